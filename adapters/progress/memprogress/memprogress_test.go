package memprogress

import (
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/progresstest"
)

func TestConformance(t *testing.T) {
	progresstest.RunConformanceTests(t, func(*testing.T) ports.ProgressSink { return New() })
}
