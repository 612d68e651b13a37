package tcapp

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/samber/do/v2"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/ports"
)

// A plugin that builds from entries is wired as a ports.PlannedBuilder, so
// the pipeline hands it the tree as entries; CUBE_TEMPLATE_CENTER_PLUGIN_TREE
// =fifo (or chunks) keeps it on the tar stream.
func TestWiredPluginBuildsFromEntries(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build the plugin")
	}
	dir := t.TempDir()
	if out, err := exec.Command(gobin, "build", "-o", filepath.Join(dir, "ext4stream"),
		"github.com/cubesandbox/templatecenter/plugins/ext4stream").CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		tree    string
		planned bool
	}{{"", true}, {"fifo", false}, {"chunks", false}} {
		t.Run("tree="+tc.tree, func(t *testing.T) {
			t.Setenv("CUBE_TEMPLATE_CENTER_PLUGIN_TREE", tc.tree)
			cfg := config.DefaultsFor(config.Dirs{State: t.TempDir()})
			cfg.PluginDir = dir
			i := NewBuildInjector(t.Context(), Options{Config: cfg, Builder: "plugin:ext4stream"})
			defer i.Shutdown()
			b, err := do.Invoke[ports.RootfsBuilder](i)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := b.(ports.PlannedBuilder); ok != tc.planned {
				t.Fatalf("wired %T: builds from entries = %v, want %v", b, ok, tc.planned)
			}
		})
	}
}
