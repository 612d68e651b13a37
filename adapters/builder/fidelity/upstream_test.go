package fidelity

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/builder/mkfs"
	"github.com/cubesandbox/templatecenter/adapters/builder/plugin"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// harness feeds a builder from the layers flattener, as production does.
type harness struct {
	b    ports.RootfsBuilder
	caps buildertest.Capabilities
}

func (h harness) MakeBuilder(context.Context) (ports.RootfsBuilder, error) { return h.b, nil }
func (harness) MakeFlattener(context.Context) (ports.TreeFlattener, error) {
	return layers.Flattener{}, nil
}
func (h harness) Capabilities() buildertest.Capabilities { return h.caps }
func (harness) Close()                                   {}

func TestMatchesUmociUnpack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds real images; skipped with -short")
	}
	ext4stream := loadPlugin(t)
	buildertest.RunUpstreamCorpus(t, map[string]buildertest.HarnessMaker{
		"mkfs": func(_ context.Context, t *testing.T) (buildertest.Harness, error) {
			return harness{mkfs.New(mkfs.Options{WorkDir: buildertest.FastTempDir(t)}), buildertest.Capabilities{Headroom: true, SparseFiles: true}}, nil
		},
		"ext4stream": func(context.Context, *testing.T) (buildertest.Harness, error) {
			return harness{ext4stream, buildertest.Capabilities{Headroom: true, SparseFiles: true}}, nil
		},
	})
}

// loadPlugin builds the ext4stream plugin and starts it as production
// does.
func loadPlugin(t *testing.T) *plugin.Builder {
	t.Helper()
	gobin := testenv.Tool(t, "go")
	bin := filepath.Join(t.TempDir(), "ext4stream")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/cubesandbox/templatecenter/plugins/ext4stream").CombinedOutput(); err != nil {
		t.Fatalf("build plugins/ext4stream: %v\n%s", err, out)
	}
	b, err := plugin.Load(context.Background(), bin, plugin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
