package fidelity

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/builder/mkfs"
	"github.com/cubesandbox/templatecenter/adapters/builder/plugin"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/internal/testenv"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
)

// pluginBin is the ext4stream plugin, built once by TestMain.
var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fidelity-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if gobin, err := exec.LookPath("go"); err == nil {
		pluginBin = filepath.Join(dir, "ext4stream")
		cmd := exec.Command(gobin, "build", "-o", pluginBin, "github.com/cubesandbox/templatecenter/plugins/ext4stream")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build plugins/ext4stream: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

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
	if pluginBin == "" {
		testenv.Tool(t, "go")
	}
	ext4stream, err := plugin.Load(context.Background(), pluginBin, plugin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ext4stream.Close()
	buildertest.RunUpstreamCorpus(t, map[string]buildertest.HarnessMaker{
		"mkfs": func(_ context.Context, t *testing.T) (buildertest.Harness, error) {
			return harness{mkfs.New(mkfs.Options{WorkDir: buildertest.FastTempDir(t)}), buildertest.Capabilities{Headroom: true, SparseFiles: true}}, nil
		},
		"ext4stream": func(context.Context, *testing.T) (buildertest.Harness, error) {
			return harness{b: ext4stream}, nil
		},
	})
}
