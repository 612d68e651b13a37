package legacyartifactstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness gives the suite a LegacyArtifacts and the files around it. Paths
// are absolute unless the suite builds a relative one on purpose.
type Harness interface {
	// MakeLegacyArtifacts returns the implementation under test, configured
	// with the harness's roots.
	MakeLegacyArtifacts(ctx context.Context) (ports.LegacyArtifacts, error)
	// WriteInside writes data as the file rel (a local, slash-separated
	// path) under one of the roots, creating its directories, and returns
	// the file's absolute path.
	WriteInside(ctx context.Context, rel string, data []byte) (string, error)
	// WriteOutside writes data as the file rel outside every root and
	// returns its absolute path.
	WriteOutside(ctx context.Context, rel string, data []byte) (string, error)
	// LinkInside makes rel under the root WriteInside uses a symbolic link
	// to target and returns the link's absolute path.
	LinkInside(ctx context.Context, rel, target string) (string, error)
	// ReadFile returns the bytes of the file at path; exists is false when
	// there is none.
	ReadFile(ctx context.Context, path string) (data []byte, exists bool, err error)
	// Close releases what the harness opened.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds each subtest.
const testTimeout = 30 * time.Second

type env struct {
	ctx context.Context
	h   Harness
	l   ports.LegacyArtifacts
}

// RunConformanceTests runs the suite against the implementation newHarness
// builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"OpenInsideARoot", testOpenInside},
		{"OpenMissingIsNotFound", testOpenMissing},
		{"OpenNeverLeavesTheRoots", testOpenRefused},
		{"RemoveInsideARoot", testRemoveInside},
		{"RemoveLeavesOthersAlone", testRemoveLeavesAlone},
		{"RemoveNeverLeavesTheRoots", testRemoveOutside},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			l, err := h.MakeLegacyArtifacts(ctx)
			if err != nil {
				t.Fatalf("MakeLegacyArtifacts: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, l: l})
		})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

// legacyRel is the layout older deployments used: <aid>/<aid>.ext4.
func legacyRel(aid string) string { return aid + "/" + aid + ".ext4" }

func (e *env) inside(t *testing.T, rel string, data []byte) string {
	t.Helper()
	p, err := e.h.WriteInside(e.ctx, rel, data)
	if err != nil {
		t.Fatalf("WriteInside(%q): %v", rel, err)
	}
	return p
}

// secret is a file outside every root: its bytes must never come back.
func (e *env) secret(t *testing.T) (path string, data []byte) {
	t.Helper()
	data = append([]byte("secret outside the roots "), randomBytes(64)...)
	p, err := e.h.WriteOutside(e.ctx, "outside-"+randomHex(4)+"/secret.ext4", data)
	if err != nil {
		t.Fatalf("WriteOutside: %v", err)
	}
	return p, data
}

func (e *env) link(t *testing.T, rel, target string) string {
	t.Helper()
	p, err := e.h.LinkInside(e.ctx, rel, target)
	if err != nil {
		t.Fatalf("LinkInside(%q -> %q): %v", rel, target, err)
	}
	return p
}

// wantFile checks that path still holds data.
func (e *env) wantFile(t *testing.T, path string, data []byte) {
	t.Helper()
	got, ok, err := e.h.ReadFile(e.ctx, path)
	switch {
	case err != nil:
		t.Fatalf("ReadFile(%s): %v", path, err)
	case !ok:
		t.Fatalf("%s was removed", path)
	case !bytes.Equal(got, data):
		t.Fatalf("%s was changed: %d bytes, had %d", path, len(got), len(data))
	}
}

func (e *env) wantGone(t *testing.T, path string) {
	t.Helper()
	_, ok, err := e.h.ReadFile(e.ctx, path)
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", path, err)
	}
	if ok {
		t.Fatalf("%s is still there", path)
	}
}

// climbOut turns outside into a path that starts in dir and climbs to the
// filesystem root with "..", so only cleaning it shows where it leads.
func climbOut(dir, outside string) string {
	depth := strings.Count(filepath.ToSlash(filepath.Clean(dir)), "/")
	return dir + strings.Repeat("/..", depth) + filepath.ToSlash(outside)
}

// relativeTo drops path's leading slash: a relative path that reaches the
// file only if it is resolved against the filesystem root.
func relativeTo(path string) string {
	return strings.TrimPrefix(filepath.ToSlash(path), "/")
}

func (e *env) open(t *testing.T, a *core.Artifact) ([]byte, int64) {
	t.Helper()
	rc, size, err := e.l.Open(e.ctx, a)
	if err != nil {
		t.Fatalf("Open(%q): %v", a.Ext4Path, err)
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", a.Ext4Path, err)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("close %s: %v", a.Ext4Path, err)
	}
	return b, size
}

func testOpenInside(t *testing.T, e *env) {
	for _, tc := range []struct {
		name, rel string
		size      int
	}{
		{"legacy layout", legacyRel("rfs-" + randomHex(4)), 4096},
		{"directly in the root", "rfs-" + randomHex(4) + ".ext4", 10},
		{"deeper", "a/b/c/rfs-" + randomHex(4) + ".ext4", 1 << 20},
		{"one byte", legacyRel("rfs-" + randomHex(4)), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(tc.size)
			p := e.inside(t, tc.rel, data)
			got, size := e.open(t, &core.Artifact{ArtifactID: "rfs-x", Ext4Path: p, StorageBackend: "s3"})
			if size != int64(len(data)) {
				t.Errorf("size = %d, want %d", size, len(data))
			}
			if !bytes.Equal(got, data) {
				t.Errorf("read %d bytes that differ from the %d written", len(got), len(data))
			}
			// Open does not consume or move the copy.
			if again, _ := e.open(t, &core.Artifact{Ext4Path: p}); !bytes.Equal(again, data) {
				t.Error("a second Open read different bytes")
			}
			e.wantFile(t, p, data)
		})
	}
}

func testOpenMissing(t *testing.T, e *env) {
	aid := "rfs-" + randomHex(4)
	p := e.inside(t, legacyRel(aid), []byte("ext4"))
	dir := filepath.Dir(p)
	for _, path := range []string{
		filepath.Join(dir, "missing.ext4"),
		filepath.Join(dir, "no-such-dir", "missing.ext4"),
	} {
		rc, _, err := e.l.Open(e.ctx, &core.Artifact{ArtifactID: aid, Ext4Path: path})
		if !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Open(%q) = %v, want an error wrapping core.ErrNotFound", path, err)
		}
		if rc != nil {
			rc.Close()
			t.Errorf("Open(%q) returned a reader with its error", path)
		}
	}
}

func testOpenRefused(t *testing.T, e *env) {
	secret, secretData := e.secret(t)
	aid := "rfs-" + randomHex(4)
	p := e.inside(t, legacyRel(aid), []byte("inside"))
	dir := filepath.Dir(p)
	fileLink := e.link(t, "link-"+randomHex(4)+".ext4", secret)
	dirLink := e.link(t, "linkdir-"+randomHex(4), filepath.Dir(secret))

	for _, tc := range []struct {
		name, path string
		notFound   bool // the error must wrap core.ErrNotFound
	}{
		{"empty path", "", true},
		{"outside every root", secret, true},
		{"relative path", relativeTo(secret), true},
		{"relative path of an inside file", legacyRel(aid), true},
		{"dot-dot climbing out", climbOut(dir, secret), true},
		{"symlink to an outside file", fileLink, false},
		{"through a symlinked directory", filepath.Join(dirLink, filepath.Base(secret)), false},
		{"a directory", dir, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, size, err := e.l.Open(e.ctx, &core.Artifact{ArtifactID: aid, Ext4Path: tc.path, StorageBackend: "s3"})
			if err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				if bytes.Equal(b, secretData) {
					t.Fatalf("Open(%q) served the bytes of %s, outside every root", tc.path, secret)
				}
				t.Fatalf("Open(%q) succeeded (%d bytes, size %d); want it refused", tc.path, len(b), size)
			}
			if rc != nil {
				rc.Close()
				t.Errorf("Open(%q) returned a reader with its error %v", tc.path, err)
			}
			if tc.notFound && !errors.Is(err, core.ErrNotFound) {
				t.Errorf("Open(%q) = %v, want an error wrapping core.ErrNotFound", tc.path, err)
			}
		})
	}
	e.wantFile(t, secret, secretData)
}

func testRemoveInside(t *testing.T, e *env) {
	for _, backend := range []string{"s3", "gcs"} {
		t.Run(backend, func(t *testing.T) {
			aid := "rfs-" + randomHex(4)
			data := randomBytes(100)
			p := e.inside(t, legacyRel(aid), data)
			a := &core.Artifact{ArtifactID: aid, Ext4Path: p, StorageBackend: backend, ObjectKey: core.ArtifactObjectKey(aid)}
			if err := e.l.Remove(e.ctx, a); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			e.wantGone(t, p)
			if rc, _, err := e.l.Open(e.ctx, a); !errors.Is(err, core.ErrNotFound) {
				if rc != nil {
					rc.Close()
				}
				t.Fatalf("Open after Remove = %v, want an error wrapping core.ErrNotFound", err)
			}
			// Removing what is already gone is not an error.
			if err := e.l.Remove(e.ctx, a); err != nil {
				t.Fatalf("second Remove: %v", err)
			}
		})
	}
}

func testRemoveLeavesAlone(t *testing.T, e *env) {
	aid := "rfs-" + randomHex(4)
	data := randomBytes(100)
	p := e.inside(t, legacyRel(aid), data)

	// A copy that may be a file store's own object stays.
	for _, backend := range []string{"file", "local", ""} {
		if err := e.l.Remove(e.ctx, &core.Artifact{ArtifactID: aid, Ext4Path: p, StorageBackend: backend}); err != nil {
			t.Errorf("Remove with storage backend %q: %v", backend, err)
		}
		e.wantFile(t, p, data)
	}

	// A missing copy is no error; the file next to where it was stays.
	missing := filepath.Join(filepath.Dir(p), "gone.ext4")
	if err := e.l.Remove(e.ctx, &core.Artifact{ArtifactID: aid, Ext4Path: missing, StorageBackend: "s3"}); err != nil {
		t.Errorf("Remove of a missing copy: %v", err)
	}
	e.wantFile(t, p, data)

	// Removing one copy leaves the other files of its directory.
	other := randomBytes(10)
	op := e.inside(t, filepath.ToSlash(filepath.Join(aid, "keep.txt")), other)
	if err := e.l.Remove(e.ctx, &core.Artifact{ArtifactID: aid, Ext4Path: p, StorageBackend: "s3"}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	e.wantGone(t, p)
	e.wantFile(t, op, other)
}

func testRemoveOutside(t *testing.T, e *env) {
	secret, secretData := e.secret(t)
	aid := "rfs-" + randomHex(4)
	insideData := []byte("inside")
	p := e.inside(t, legacyRel(aid), insideData)
	dir := filepath.Dir(p)
	fileLink := e.link(t, "link-"+randomHex(4)+".ext4", secret)
	dirLink := e.link(t, "linkdir-"+randomHex(4), filepath.Dir(secret))

	for _, tc := range []struct {
		name, path string
		mayRefuse  bool // an error is allowed (the path is lexically inside)
	}{
		{"empty path", "", false},
		{"outside every root", secret, false},
		{"relative path", relativeTo(secret), false},
		{"relative path of an inside file", legacyRel(aid), false},
		{"dot-dot climbing out", climbOut(dir, secret), false},
		{"symlink to an outside file", fileLink, true},
		{"through a symlinked directory", filepath.Join(dirLink, filepath.Base(secret)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.l.Remove(e.ctx, &core.Artifact{ArtifactID: aid, Ext4Path: tc.path, StorageBackend: "s3"})
			if err != nil && !tc.mayRefuse {
				t.Errorf("Remove(%q) = %v, want it left alone without an error", tc.path, err)
			}
			e.wantFile(t, secret, secretData)
			e.wantFile(t, p, insideData)
		})
	}
}
