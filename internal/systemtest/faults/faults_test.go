package faults

import (
	"os"
	"strings"
	"testing"
)

// TestFaults runs every scenario on one cluster, one group after the
// other. CUBE_FAULTS_ONLY (comma-separated group names: registry, s3,
// dataplane, master, ...) narrows it while working on one.
func TestFaults(t *testing.T) {
	w := newWorld(t)
	groups := []struct {
		name string
		run  func(*testing.T)
	}{
		{"registry", w.registryScenarios},
		{"s3", w.s3Scenarios},
		{"dataplane", w.dataPlaneScenarios},
		{"master", w.masterScenarios},
		{"db", w.dbScenarios},
		{"callbacks", w.callbackScenarios},
		{"nodes", w.nodeScenarios},
		{"reconcile", w.reconcileScenarios},
		{"scratch", w.scratchScenarios},
	}
	only := os.Getenv("CUBE_FAULTS_ONLY")
	for _, g := range groups {
		if only != "" && !strings.Contains(","+only+",", ","+g.name+",") {
			continue
		}
		g.run(t)
	}
}
