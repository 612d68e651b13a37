//go:build unix

package data_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core/data"
)

// A build-* directory a dead build left (nobody holds it) is removed once
// it has been quiet for ScratchGrace, hours before the age rule would; one
// a build holds is kept however old.
func TestSweepScratchRemovesDirsOfDeadBuilds(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	mk := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "rfs.ext4"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(p, "rfs.ext4"), mtime, mtime) //nolint:errcheck
		os.Chtimes(p, mtime, mtime)                            //nolint:errcheck
		return p
	}
	dead := mk("build-dead", now.Add(-2*data.ScratchGrace))
	fresh := mk("build-fresh", now.Add(-data.ScratchGrace/10)) // just created, not held yet
	held := mk("build-held", now.Add(-7*time.Hour))
	f, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	n, err := data.SweepScratch(dir, 6*time.Hour, now)
	if err != nil || n != 1 {
		t.Fatalf("removed %d, err %v; want only the dead build's directory", n, err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Error("the dead build's directory is still there")
	}
	for _, keep := range []string{fresh, held} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s removed", filepath.Base(keep))
		}
	}
}
