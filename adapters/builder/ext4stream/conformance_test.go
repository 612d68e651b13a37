package ext4stream

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// harness runs the builder in process, fed by the layers flattener.
// adapters/builder/plugin runs the suite again through the plugin binary.
type harness struct{}

func (harness) MakeBuilder(context.Context) (ports.RootfsBuilder, error) { return New(), nil }

func (harness) MakeFlattener(context.Context) (ports.TreeFlattener, error) {
	return layers.Flattener{}, nil
}

func (harness) MakeLimitedFlattener(_ context.Context, l flattenertest.Limits) (ports.TreeFlattener, error) {
	return layers.Flattener{Limits: layers.Limits{MaxEntries: l.MaxEntries, MaxTotalBytes: l.MaxTotalBytes,
		MaxFileBytes: l.MaxFileBytes, MaxPathDepth: l.MaxPathDepth, MaxXattrBytes: l.MaxXattrBytes}}, nil
}

func (harness) Capabilities() buildertest.Capabilities {
	return buildertest.Capabilities{Headroom: true, SparseFiles: true}
}

func (harness) Close() {}

func TestConformance(t *testing.T) {
	buildertest.RunConformanceTests(t, func(context.Context, *testing.T) (buildertest.Harness, error) {
		return harness{}, nil
	})
}
