package faults

import (
	"os"
	"testing"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.Cleanup()
	os.Exit(code)
}
