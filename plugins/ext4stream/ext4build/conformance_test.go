package ext4build

import (
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
)

// The shared fidelity suite, in process. adapters/builder/plugin runs it
// again through the plugin binary.
func TestConformance(t *testing.T) {
	buildertest.RunConformanceTests(t, func(*testing.T) ports.RootfsBuilder { return New() },
		buildertest.Capabilities{Headroom: false})
}
