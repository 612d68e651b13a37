package plugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
)

// A host that died mid-build leaves its stage directory behind (its
// plugin died with it, diesWithHost); the next build beside that output
// removes it, and nothing else (the rules are pipeline.SweepStages', tested
// there).
func TestBuildSweepsDeadHostsStages(t *testing.T) {
	b := load(t)
	dir := t.TempDir()
	old := time.Now().Add(-2 * StageGrace)
	dead := filepath.Join(dir, StagePrefix+"dead")
	if err := os.Mkdir(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, ".rootfs.ext4.tmp-1"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dead, filepath.Join(dir, "other")} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}

	out := filepath.Join(dir, "rootfs.ext4")
	if _, err := b.Build(context.Background(), ports.BuildSpec{OutPath: out, UUID: buildertest.FixtureUUID}, ports.TreeSlice(nil)); err != nil {
		t.Fatal(err)
	}

	want := []string{"other", "rootfs.ext4"}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("after the build the directory holds %q, want %q", got, want)
	}
}
