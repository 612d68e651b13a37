package plugin

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
)

// A host that died mid-build leaves its stage directory behind (its
// plugin died with it, diesWithHost); the next build beside that output
// removes it, but never a directory a live host holds, one just made, or
// anything that is not a stage directory.
func TestBuildSweepsDeadHostsStages(t *testing.T) {
	b := load(t)
	dir := t.TempDir()
	old := time.Now().Add(-2 * StageGrace)
	tests := []struct {
		name string
		dir  bool
		held bool
		mod  time.Time
		kept bool
	}{
		{StagePrefix + "dead", true, false, old, false},
		{StagePrefix + "live", true, true, old, true},
		{StagePrefix + "fresh", true, false, time.Now(), true},
		{StagePrefix + "file", false, false, old, true},
		{"other", true, false, old, true},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, tt.name)
		if !tt.dir {
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, ".rootfs.ext4.tmp-1"), make([]byte, 4096), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if tt.held {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, tt.mod, tt.mod); err != nil {
			t.Fatal(err)
		}
	}

	var tree bytes.Buffer
	_ = tar.NewWriter(&tree).Close()
	out := filepath.Join(dir, "rootfs.ext4")
	if _, err := b.Build(context.Background(), ports.BuildSpec{Tree: &tree, OutPath: out, UUID: buildertest.FixtureUUID}); err != nil {
		t.Fatal(err)
	}

	want := []string{"rootfs.ext4"}
	for _, tt := range tests {
		if tt.kept {
			want = append(want, tt.name)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after the build the directory holds %q, want %q", got, want)
	}
}
