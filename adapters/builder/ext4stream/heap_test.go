package ext4stream

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
)

// smallFilesTree is n entries shaped like a distro's library directories:
// directories of 50 small files (up to 8 KiB, all content non-zero and
// its zero list known, so the plan reads nothing), a symlink and a hard
// link in every 25 files. The content is one shared file.
func smallFilesTree(t testing.TB, n int) []ports.TreeEntry {
	f, err := os.Create(filepath.Join(t.TempDir(), "content"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	body := make([]byte, 8<<10)
	for i := range body {
		body[i] = byte(i*7 + 1)
	}
	if _, err := f.Write(body); err != nil {
		t.Fatal(err)
	}
	es := make([]ports.TreeEntry, 0, n)
	add := func(h *tar.Header) {
		h.ModTime = testMtime
		e := ports.TreeEntry{Header: h}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			e.File, e.ZeroKnown = f, true
		}
		es = append(es, e)
	}
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "usr", Mode: 0o755})
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "usr/lib", Mode: 0o755})
	for d := 0; len(es) < n; d++ {
		dir := fmt.Sprintf("usr/lib/pkg%04d", d)
		add(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755})
		for i := 0; i < 50 && len(es) < n; i++ {
			name := fmt.Sprintf("%s/lib%02d.so.%d", dir, i, d)
			add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(1 + (i*977+d*131)%(8<<10))})
			if i%25 == 0 && len(es)+2 <= n {
				add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name + ".sym", Linkname: filepath.Base(name)})
				add(&tar.Header{Typeflag: tar.TypeLink, Name: name + ".hl", Linkname: name})
			}
		}
	}
	return es
}

// TestPlanHeapPerEntry reports the heap the writer holds once a tree of
// 100,000 small files is placed (its peak: the metadata is written from
// it), per entry; the tree itself is built before the measurement.
func TestPlanHeapPerEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 entries")
	}
	const n = 100_000
	es := smallFilesTree(t, n)
	var before, after runtime.MemStats
	planned = func() {
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	defer func() { planned = nil }()
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	if _, err := New().Build(context.Background(), ports.BuildSpec{OutPath: out, UUID: testUUID, Time: buildTime}, ports.TreeSlice(es)); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(es)
	perEntry := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("writer heap after placing %d entries: %d bytes per entry", n, perEntry)
	// A cold build's budget is 300 bytes per entry (flattened tree and
	// writer together); the writer's share is 180.
	if perEntry > 180 {
		t.Errorf("the writer holds %d bytes per entry, want at most 180", perEntry)
	}
}

// BenchmarkBuildSmallFiles builds the 100,000-entry tree of
// TestPlanHeapPerEntry: the per-entry cost of placing, writing the
// metadata and copying small files.
func BenchmarkBuildSmallFiles(b *testing.B) {
	es := smallFilesTree(b, 100_000)
	out := filepath.Join(b.TempDir(), "rootfs.ext4")
	for b.Loop() {
		if _, err := New().Build(context.Background(), ports.BuildSpec{OutPath: out, UUID: testUUID, Time: buildTime}, ports.TreeSlice(es)); err != nil {
			b.Fatal(err)
		}
	}
}
