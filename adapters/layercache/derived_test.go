package layercache

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cubesandbox/templatecenter/core"
)

func putBlob(t *testing.T, c *Cache, data []byte) digest.Digest {
	t.Helper()
	d := digest.FromBytes(data)
	if _, err := c.Put(d, int64(len(data)), bytesReader(data)); err != nil {
		t.Fatal(err)
	}
	return d
}

type byteReader struct {
	b []byte
}

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func bytesReader(b []byte) io.Reader { return &byteReader{b} }

func writeDerived(t *testing.T, x *DerivedFiles, name string, data []byte, commit bool) {
	t.Helper()
	f, c, err := x.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if commit {
		if err := c(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDerivedRoundTripAndEviction(t *testing.T) {
	c := openCache(t, 0)
	d := putBlob(t, c, randomBytes(t, 1000))
	x, err := c.Derived(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Open("v1.index"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Open before Create = %v, want ErrNotFound", err)
	}
	// Not committed: never visible, nothing left behind.
	writeDerived(t, x, "v1.index", []byte("draft"), false)
	if _, err := x.Open("v1.index"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("uncommitted file is visible: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(ents) != 0 {
		t.Fatalf("uncommitted derived file left %v in tmp", ents)
	}
	data := randomBytes(t, 5000)
	writeDerived(t, x, "v1.index", data, true)
	f, err := x.Open("v1.index")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != string(data) {
		t.Fatal("derived file read back differs")
	}
	if n, _ := c.Usage(); n < 6000 {
		t.Fatalf("usage %d does not count the derived file", n)
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden", "x.meta"} {
		if _, err := x.Open(bad); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	// Eviction takes the derived files with the blob.
	c.maxBytes = 1
	if _, err := c.Evict(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.derivedDir(d)); !os.IsNotExist(err) {
		t.Fatalf("derived files survived the eviction of their blob: %v", err)
	}
}

// A derived file from another boot that was never fsynced may hold bytes
// that never reached the disk: it is dropped.
func TestDerivedFromAnotherBootNeedsSync(t *testing.T) {
	c := openCache(t, 0)
	d := putBlob(t, c, randomBytes(t, 100))
	x, _ := c.Derived(d)
	writeDerived(t, x, "v1.content", randomBytes(t, 100), true)
	meta := filepath.Join(c.derivedDir(d), "v1.content.meta")
	var m derivedMeta
	b, _ := os.ReadFile(meta)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.BootID, m.Synced = "another-boot", false
	if err := writeJSON(meta, m); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Open("v1.content"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("unsynced file of another boot: %v, want ErrNotFound", err)
	}
	writeDerived(t, x, "v1.content", randomBytes(t, 100), true)
	if err := c.SyncDerived(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(meta)
	json.Unmarshal(b, &m)
	if !m.Synced {
		t.Fatal("SyncDerived did not mark the file synced")
	}
	m.BootID = "another-boot"
	writeJSON(meta, m)
	if f, err := x.Open("v1.content"); err != nil {
		t.Fatalf("synced file of another boot: %v", err)
	} else {
		f.Close()
	}
}

// A derived file changed behind the cache's back is dropped.
func TestDerivedAlteredIsDropped(t *testing.T) {
	c := openCache(t, 0)
	d := putBlob(t, c, randomBytes(t, 100))
	x, _ := c.Derived(d)
	writeDerived(t, x, "v1.index", randomBytes(t, 100), true)
	if err := os.WriteFile(filepath.Join(c.derivedDir(d), "v1.index"), []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Open("v1.index"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("altered file: %v, want ErrNotFound", err)
	}
}
