package tcapp

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/samber/do/v2"

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/ports"
)

// "plugin:ext4stream" wires the ext4stream plugin, which gets the tree as
// entries (API v3) and writes the in-process builder's format.
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
	cfg := config.DefaultsFor(config.Dirs{State: t.TempDir()})
	cfg.PluginDir = dir
	i := NewBuildInjector(t.Context(), Options{Config: cfg, Builder: "plugin:ext4stream"})
	defer i.Shutdown()
	b, err := do.Invoke[ports.RootfsBuilder](i)
	if err != nil {
		t.Fatal(err)
	}
	pb, ok := b.(pluginBuilder)
	if !ok {
		t.Fatalf("wired %T, want the plugin host", b)
	}
	if pb.APIVersion() != pluginproto.APIVersionEntries || b.Format() != ext4stream.New().Format() {
		t.Fatalf("wired plugin speaks API %s with format %s, want %s and %s", pb.APIVersion(), b.Format(), pluginproto.APIVersionEntries, ext4stream.New().Format())
	}
}
