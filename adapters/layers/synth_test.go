package layers

import (
	"archive/tar"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// synthImage writes a deterministic four-layer image of about n entries
// under dir: small files in many directories, symlinks, hard links (within
// a layer and to lower layers), xattrs, devices, FIFOs, files with zero
// blocks, a directory reached through a symlink, whiteouts, an opaque
// directory and directories declared again. Layers are gzip, zstd, plain
// and gzip, so every decode path is used.
func synthImage(t testing.TB, dir string, n int) []Layer {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	pool := make([]byte, 64<<10)
	for i := range pool {
		pool[i] = "abcdefghij\n \x00"[rng.IntN(13)]
	}
	dirs := max(4, n/60)
	share := []float64{0.6, 0.2, 0.15, 0.05}
	comps := []compression{gzipped, zstded, plain, gzipped}
	var out []Layer
	var files []string // regular files so far, for hard links across layers
	for l, frac := range share {
		p := filepath.Join(dir, "synth"+strconv.Itoa(l))
		tw, finish := layerFile(t, p, comps[l], "sha256:synth"+strconv.Itoa(l))
		write := func(h *tar.Header, body []byte) {
			h.ModTime = fixedTime.Add(time.Duration(rng.IntN(1000)) * time.Second)
			if h.Typeflag == tar.TypeReg {
				h.Size = int64(len(body))
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
		}
		dname := func(d int) string { return "usr/share/pkg" + strconv.Itoa(d) }
		if l == 0 {
			write(&tar.Header{Typeflag: tar.TypeDir, Name: "usr/", Mode: 0o755}, nil)
			for d := range dirs {
				write(&tar.Header{Typeflag: tar.TypeDir, Name: dname(d), Mode: 0o755}, nil)
			}
			write(&tar.Header{Typeflag: tar.TypeSymlink, Name: "share", Linkname: "usr/share"}, nil)
			write(&tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}, nil)
			write(&tar.Header{Typeflag: tar.TypeFifo, Name: "run/initctl", Mode: 0o600}, nil)
		}
		count := int(frac * float64(n))
		for i := 0; i < count; i++ {
			d := rng.IntN(dirs)
			name := dname(d) + "/f" + strconv.Itoa(l) + "-" + strconv.Itoa(i)
			switch k := rng.IntN(100); {
			case k < 4 && len(files) > 0:
				target := files[rng.IntN(len(files))]
				write(&tar.Header{Typeflag: tar.TypeLink, Name: name + ".hl", Linkname: target}, nil)
			case k < 9:
				write(&tar.Header{Typeflag: tar.TypeSymlink, Name: name + ".sl", Linkname: "../pkg" + strconv.Itoa(rng.IntN(dirs)) + "/x"}, nil)
			case k < 10 && l > 0:
				// a whiteout of some lower name (it may not exist)
				write(&tar.Header{Typeflag: tar.TypeReg, Name: dname(d) + "/.wh.f" + strconv.Itoa(rng.IntN(l)) + "-" + strconv.Itoa(rng.IntN(count))}, nil)
			case k < 11 && l > 0:
				write(&tar.Header{Typeflag: tar.TypeDir, Name: dname(d), Mode: 0o750, Uid: 5}, nil)
			case k < 12:
				// through the "share" symlink
				write(&tar.Header{Typeflag: tar.TypeReg, Name: "share/pkg" + strconv.Itoa(d) + "/via" + strconv.Itoa(l) + "-" + strconv.Itoa(i), Mode: 0o644}, pool[:rng.IntN(300)])
			case k < 13:
				body := make([]byte, 9000) // a zero block, then data
				copy(body[4096:], pool[:4904])
				write(&tar.Header{Typeflag: tar.TypeReg, Name: name + ".z", Mode: 0o600}, body)
				files = append(files, name+".z")
			default:
				h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Uid: rng.IntN(3), Gid: rng.IntN(3)}
				if k < 18 {
					h.PAXRecords = map[string]string{"SCHILY.xattr.user.tag": "v" + strconv.Itoa(i)}
				}
				off := rng.IntN(len(pool) - 2000)
				write(h, pool[off:off+rng.IntN(1200)])
				files = append(files, name)
			}
		}
		if l == 2 {
			write(&tar.Header{Typeflag: tar.TypeReg, Name: dname(1) + "/.wh..wh..opq"}, nil)
			write(&tar.Header{Typeflag: tar.TypeReg, Name: dname(1) + "/after-opaque", Mode: 0o644}, []byte("new"))
		}
		layer, _ := finish()
		out = append(out, layer)
	}
	return out
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkFlattenMemory flattens a synthetic image of about 100k small
// entries and reports the live heap per entry of the tree at three
// points: the most while flattening (peakB/entry: before each layer is
// applied, when the layers read but not applied wait beside the tree, and
// when the tree is complete), when the flattener's tree is complete
// (treeB/entry) and inside use, while a builder would run (useB/entry).
// Run it alone:
//
//	go test -run - -bench FlattenMemory -benchtime 1x ./adapters/layers
func BenchmarkFlattenMemory(b *testing.B) {
	n := 100_000
	if s := os.Getenv("CUBE_FLATTEN_MEMORY_ENTRIES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	layers := synthImage(b, b.TempDir(), n)
	for b.Loop() {
		base := liveHeap()
		var atDone, inUse, peak int64
		flattenApplying = func() { peak = max(peak, liveHeap()-base) }
		flattenTreeDone = func() { atDone = liveHeap() - base; peak = max(peak, atDone) }
		st, err := Flatten(context.Background(), layers, DefaultLimits(), func(tree ports.Tree) error {
			inUse = liveHeap() - base
			runtime.KeepAlive(tree)
			return nil
		})
		flattenTreeDone, flattenApplying = nil, nil
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Entries), "entries")
		b.ReportMetric(float64(peak)/float64(st.Entries), "peakB/entry")
		b.ReportMetric(float64(atDone)/float64(st.Entries), "treeB/entry")
		b.ReportMetric(float64(inUse)/float64(st.Entries), "useB/entry")
	}
}

// TestSpilledTree: the tree Flatten hands over reads the same entries in
// any order and more than once (EntriesTar checks that), keeps every
// entry's layer without decoding it, and a record file that went bad is an
// I/O error, not a rejection of the image.
func TestSpilledTree(t *testing.T) {
	layers := synthImage(t, t.TempDir(), 500)
	_, err := Flatten(context.Background(), layers, DefaultLimits(), func(tree ports.Tree) error {
		flattenertest.EntriesTar(t, tree)
		tl, ok := tree.(ports.TreeLayers)
		if !ok {
			t.Fatal("the tree does not tell the entries' layers")
		}
		seen := map[int]bool{}
		for i := range tree.Len() {
			e, err := tree.Entry(i)
			if err != nil {
				t.Fatal(err)
			}
			if tl.EntryLayer(i) != e.Layer {
				t.Fatalf("entry %d: layer %d, EntryLayer says %d", i, e.Layer, tl.EntryLayer(i))
			}
			seen[e.Layer] = true
		}
		if len(seen) < 3 {
			t.Fatalf("entries of layers %v only", seen)
		}
		sp := tree.(*spilledTree)
		if err := sp.f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		sp.win = sp.win[:0]
		_, err := tree.Entry(tree.Len() - 1)
		if err == nil || errors.Is(err, ErrRejected) || errors.Is(err, core.ErrInvalidArgument) {
			t.Fatalf("a truncated record file: %v, want an I/O error", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFlattenSmallFiles times Flatten of the synthetic image of
// about 100k small entries (BenchmarkFlattenMemory's), where the tree,
// not the content, is the work.
func BenchmarkFlattenSmallFiles(b *testing.B) {
	layers := synthImage(b, b.TempDir(), 100_000)
	b.ResetTimer()
	var n int
	for b.Loop() {
		st, err := Flatten(context.Background(), layers, DefaultLimits(), func(ports.Tree) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		n = st.Entries
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
}
