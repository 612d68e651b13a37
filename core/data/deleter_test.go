package data_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
)

// deleteCounter is the memory artifact store counting deletes; fail, when
// set, fails them.
type deleteCounter struct {
	ports.ArtifactStore
	mu      sync.Mutex
	deletes int
	fail    error
}

func (c *deleteCounter) Delete(ctx context.Context, key string) error {
	c.mu.Lock()
	c.deletes++
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		return fail
	}
	return c.ArtifactStore.Delete(ctx, key)
}

func (c *deleteCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deletes
}

// newDeleter returns a deleter over d and a memory bucket holding objects.
func newDeleter(t *testing.T, d *db, objects []string, fail error) (*data.Deleter, *deleteCounter) {
	t.Helper()
	mem, err := artifactstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range objects {
		b := []byte("ext4 of " + key)
		sum := sha256.Sum256(b)
		if err := mem.Put(context.Background(), key, bytes.NewReader(b), ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}); err != nil {
			t.Fatal(err)
		}
	}
	blob := &deleteCounter{ArtifactStore: mem, fail: fail}
	return &data.Deleter{Store: d, Artifacts: blob}, blob
}

func exists(t *testing.T, s ports.ArtifactStore, key string) bool {
	t.Helper()
	_, err := s.Stat(context.Background(), key)
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func TestDeleterRemovesBytesThenRow(t *testing.T) {
	for _, st := range []core.ArtifactStatus{core.ArtifactCleanupPending, core.ArtifactDeleting, core.ArtifactFailed} {
		t.Run(string(st), func(t *testing.T) {
			d := newDB(t0)
			d.addArtifact(t, "rfs-1", st, t0)
			del, blob := newDeleter(t, d, []string{"rfs-1/rfs-1.ext4", "rfs-2/rfs-2.ext4"}, nil)
			if err := del.Delete(context.Background(), "rfs-1"); err != nil {
				t.Fatal(err)
			}
			if _, ok := d.artifact("rfs-1"); ok || exists(t, blob, "rfs-1/rfs-1.ext4") || !exists(t, blob, "rfs-2/rfs-2.ext4") {
				t.Fatalf("row left %v, or the wrong objects deleted", ok)
			}
			// Idempotent: the second call finds no row and touches nothing.
			if err := del.Delete(context.Background(), "rfs-1"); err != nil {
				t.Fatal(err)
			}
			if n := blob.count(); n != 1 {
				t.Fatalf("%d object deletes, want 1", n)
			}
		})
	}
}

func TestDeleterLeavesLiveRowsAlone(t *testing.T) {
	for _, st := range []core.ArtifactStatus{core.ArtifactReady, core.ArtifactPending, core.ArtifactBuilding} {
		t.Run(string(st), func(t *testing.T) {
			d := newDB(t0)
			d.addArtifact(t, "rfs-1", st, t0)
			del, blob := newDeleter(t, d, nil, nil)
			if err := del.Delete(context.Background(), "rfs-1"); err != nil {
				t.Fatal(err)
			}
			if a, ok := d.artifact("rfs-1"); !ok || a.Status != st || blob.count() != 0 {
				t.Fatalf("row %+v (exists %v), %d object deletes", a, ok, blob.count())
			}
		})
	}
}

func TestDeleterDataErrorPutsTheRowBack(t *testing.T) {
	d := newDB(t0)
	d.addArtifact(t, "rfs-1", core.ArtifactCleanupPending, t0)
	s3down := errors.New("s3: connection refused")
	del, _ := newDeleter(t, d, []string{"rfs-1/rfs-1.ext4"}, s3down)
	err := del.Delete(context.Background(), "rfs-1")
	if !errors.Is(err, s3down) {
		t.Fatalf("err = %v", err)
	}
	a, ok := d.artifact("rfs-1")
	if !ok || a.Status != core.ArtifactCleanupPending || !strings.Contains(a.LastError, "connection refused") {
		t.Fatalf("row = %+v (exists %v), want CLEANUP_PENDING with last_error", a, ok)
	}
	if err := del.Delete(context.Background(), ""); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("empty id: %v", err)
	}
}

func TestSweepScratchRemovesOnlyOldBuildDirs(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := now.Add(-7 * time.Hour)
	mk := func(name string, mtime time.Time, files ...string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			fp := filepath.Join(p, f)
			if err := os.WriteFile(fp, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(fp, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := mk("build-111", old, "inject.tar", "rfs-x.ext4")
	mk("build-222", now)                                    // a live build
	live := mk("build-333", old, "rfs-y.ext4")              // old dir, but a file is being written
	os.Chtimes(filepath.Join(live, "rfs-y.ext4"), now, now) //nolint:errcheck
	mk("cube-layer-cache", old)                             // not ours
	if err := os.WriteFile(filepath.Join(dir, "build-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(filepath.Join(dir, "build-file"), old, old) //nolint:errcheck

	n, err := data.SweepScratch(dir, 6*time.Hour, now)
	if err != nil || n != 1 {
		t.Fatalf("removed %d, err %v", n, err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatal("dead build dir kept")
	}
	for _, keep := range []string{"build-222", "build-333", "cube-layer-cache", "build-file"} {
		if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
			t.Fatalf("%s removed", keep)
		}
	}
	if n, err := data.SweepScratch(filepath.Join(dir, "missing"), time.Hour, now); n != 0 || err != nil {
		t.Fatalf("missing dir: %d, %v", n, err)
	}
}

func TestRunOnceSweepsScratchEvenWhenTheLockIsElsewhere(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "build-1")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	old := t0.Add(-24 * time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	d, l := newDB(t0), newLocks()
	l.holdElsewhere(t, data.LockName)
	rep, err := newReconciler(d, l, data.ReconcilerConfig{ScratchDir: dir}).RunOnce(context.Background())
	if err != nil || !rep.Skipped || rep.ScratchRemoved != 1 {
		t.Fatalf("report %+v, err %v", rep, err)
	}
}
