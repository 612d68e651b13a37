package ext4stream

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/diskio"
	"github.com/cubesandbox/templatecenter/ports"
)

// entriesOf turns a tree into TreeEntries with their content in one file,
// with or without zero lists.
func entriesOf(t testing.TB, tree []byte, withZero bool) ports.TreeSlice {
	t.Helper()
	es, err := tryEntries(t, tree, withZero)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// tryEntries is entriesOf for a tree that may not be a well-formed tar
// (fuzz input): it says so instead of failing the test.
func tryEntries(t testing.TB, tree []byte, withZero bool) (ports.TreeSlice, error) {
	f, err := os.Create(filepath.Join(t.TempDir(), "content"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var out ports.TreeSlice
	tr := tar.NewReader(bytes.NewReader(tree))
	var off int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		e := ports.TreeEntry{Header: h}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			n, err := io.Copy(f, tr)
			if err != nil {
				return nil, err
			}
			e.File, e.Offset = f, off
			if withZero {
				if e.Zero, err = zeroRunsBuf(context.Background(), f, off, n, make([]byte, 1<<20)); err != nil {
					t.Fatal(err)
				}
				e.ZeroKnown = true
			}
			off += n
		}
		out = append(out, e)
	}
}

func sparseTree(t testing.TB) []byte {
	holey := make([]byte, 40*blockSize+17)
	for _, b := range []int{0, 3, 4, 20, 39} {
		copy(holey[b*blockSize:], "not zero")
	}
	copy(holey[len(holey)-5:], "tail!")
	return tarOf(t,
		dir("opt", 0o755),
		file("opt/holey", 0o644, string(holey)),
		file("opt/zero", 0o644, string(make([]byte, 3*blockSize))),
		file("opt/zerotail", 0o644, "x"+string(make([]byte, 2*blockSize))),
		entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "opt/long", Linkname: strings.Repeat("abc/", 30)}},
	)
}

func buildEntries(t testing.TB, es ports.TreeSlice, mutate ...func(*ports.BuildSpec)) (string, ports.BuildResult, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	spec := ports.BuildSpec{OutPath: out, UUID: testUUID, Time: buildTime}
	for _, m := range mutate {
		m(&spec)
	}
	res, err := New().Build(context.Background(), spec, es)
	return out, res, err
}

// TestZeroListsKeepTheBytes: a tree with zero lists gives the image the
// same tree without them gives (the builder then finds the zero blocks by
// reading the content), and the builder reports its sha256.
func TestZeroListsKeepTheBytes(t *testing.T) {
	head := func(s *ports.BuildSpec) { s.HeadroomBytes, s.HeadroomInodes = 5<<20, 300 }
	for name, tree := range map[string][]byte{"rich": richTree(t), "sparse": sparseTree(t), "empty": tarOf(t)} {
		for _, m := range [][]func(*ports.BuildSpec){nil, {head}} {
			img, res, err := buildEntries(t, entriesOf(t, tree, false), m...)
			if err != nil {
				t.Fatal(err)
			}
			want := sha(t, img)
			if res.SHA256 != want {
				t.Fatalf("%s: reported sha256 %s, the file's is %s", name, res.SHA256, want)
			}
			zimg, zres, err := buildEntries(t, entriesOf(t, tree, true), m...)
			if err != nil {
				t.Fatalf("%s: with zero lists: %v", name, err)
			}
			if got := sha(t, zimg); got != want || zres.SHA256 != want || zres.SizeBytes != res.SizeBytes {
				t.Fatalf("%s (headroom %v): with zero lists %s (reported %s, %d bytes), without %s (%d bytes)",
					name, m != nil, got, zres.SHA256, zres.SizeBytes, want, res.SizeBytes)
			}
		}
	}
}

// A zero list that does not match the content stops the build.
func TestRefusesWrongZeroList(t *testing.T) {
	es := entriesOf(t, sparseTree(t), true)
	for i := range es {
		if es[i].Header.Name == "opt/holey" {
			es[i].Zero, es[i].ZeroKnown = [][2]uint32{{0, 1}}, true
		}
	}
	out, _, err := buildEntries(t, es)
	if !errors.Is(err, errContentChanged) {
		t.Fatalf("err = %v, want errContentChanged", err)
	}
	noLeftovers(t, filepath.Dir(out))
}

// The tree rules hold with content in files.
func TestRefusesBadTreesWithContent(t *testing.T) {
	es := entriesOf(t, tarOf(t, file("a", 0o644, "x"), file("a", 0o644, "y")), false)
	out, _, err := buildEntries(t, es)
	if err == nil || !strings.Contains(err.Error(), "duplicate-entry") {
		t.Fatalf("err = %v, want duplicate-entry", err)
	}
	noLeftovers(t, filepath.Dir(out))
	_, _, err = buildEntries(t, entriesOf(t, tarOf(t, file("big", 0o644, strings.Repeat("x", 3<<20))), false),
		func(s *ports.BuildSpec) { s.MaxSizeBytes = 2 << 20 })
	if err == nil || !strings.Contains(err.Error(), "exceeds MaxSizeBytes") {
		t.Fatalf("err = %v, want the cap", err)
	}
}

// canceledCopyWriter is an fsWriter over a fresh image file whose data
// area is one file of content (all non-zero) of the given blocks.
func canceledCopyWriter(t *testing.T, blocks int64) *fsWriter {
	t.Helper()
	dir := t.TempDir()
	img, err := os.Create(filepath.Join(dir, "img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	w := &fsWriter{f: img, dataStart: 1, dataEnd: 1 + blocks, metaEnd: 1 + blocks}
	if blocks > 0 {
		src, err := os.Create(filepath.Join(dir, "content"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		if _, err := src.Write(bytes.Repeat([]byte{'x'}, int(blocks*blockSize))); err != nil {
			t.Fatal(err)
		}
		w.nodes = []inode{{mode: sIFREG, size: blocks * blockSize}}
		w.addRun(0, 0, 1, uint32(blocks))
		w.setExtents(1, 0)
		w.jobs = []copyJob{{src: w.files.of(src), ino: 1}}
	}
	return w
}

// TestCopyStopsWhenCanceled: a canceled build stops copying within a file
// (an image may hold one file of many gigabytes) and stops hashing the
// zeros after the metadata (an image may have gigabytes of headroom).
func TestCopyStopsWhenCanceled(t *testing.T) {
	t.Run("within one large file", func(t *testing.T) {
		const blocks = 16 << 20 / blockSize * 4 // 64 MiB, 16 buffers
		w := canceledCopyWriter(t, blocks)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		free := make(chan []byte, 2)
		for range 2 {
			free <- make([]byte, 0, 4<<20)
		}
		full := make(chan dataPiece)
		pieces := make(chan int)
		go func() {
			n := 0
			for p := range full {
				n++
				cancel() // the build is canceled once the copy is under way
				free <- p.b[:0]
			}
			pieces <- n
		}()
		dw := diskio.NewWriter(w.f, 1)
		err := w.copyData(ctx, dw, free, full)
		close(full)
		n := <-pieces
		if err := dw.Close(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, context.Canceled) || n > 3 {
			t.Fatalf("copyData = %v after %d of 16 pieces, want context.Canceled within the first few", err, n)
		}
	})
	t.Run("within a file of zero blocks", func(t *testing.T) {
		// 256 MiB of holes with their zero list: read and checked, never
		// filling a buffer, so no flush sees the context.
		const blocks = 256 << 20 / blockSize
		w := canceledCopyWriter(t, 0)
		src, err := os.Create(filepath.Join(t.TempDir(), "zeros"))
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		if err := src.Truncate(blocks * blockSize); err != nil {
			t.Fatal(err)
		}
		w.nodes = []inode{{mode: sIFREG, size: blocks * blockSize}} // all holes: no extents
		w.jobs = []copyJob{{src: w.files.of(src), ino: 1}}
		free := make(chan []byte, 1)
		free <- make([]byte, 0, 4<<20)
		full := make(chan dataPiece, 1)
		// Canceled once the copy has looked at it the first time.
		ctx := &cancelAfterFirstCheck{Context: context.Background()}
		dw := diskio.NewWriter(w.f, 1)
		err = w.copyData(ctx, dw, free, full)
		if cerr := dw.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("copyData = %v, want context.Canceled", err)
		}
	})
	t.Run("while hashing the metadata", func(t *testing.T) {
		f, err := os.Create(filepath.Join(t.TempDir(), "img"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(1 << 30); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := hashRange(ctx, sha256.New(), f, 0, 1<<30); !errors.Is(err, context.Canceled) {
			t.Fatalf("hashRange = %v, want context.Canceled", err)
		}
	})
	t.Run("while hashing the zeros after the metadata", func(t *testing.T) {
		w := canceledCopyWriter(t, 0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// 16 GiB of zeros: seconds of hashing for a build already canceled.
		if _, err := w.copyAndHash(ctx, 16<<30); !errors.Is(err, context.Canceled) {
			t.Fatalf("copyAndHash = %v, want context.Canceled", err)
		}
	})
}

// cancelAfterFirstCheck is a context whose Err is nil the first time it
// is asked and context.Canceled from then on.
type cancelAfterFirstCheck struct {
	context.Context
	asked atomic.Bool
}

func (c *cancelAfterFirstCheck) Err() error {
	if c.asked.Swap(true) {
		return context.Canceled
	}
	return nil
}

// A build tells its progress as it copies: forward only, ending
// with all of it.
func TestBuildReportsProgress(t *testing.T) {
	var calls [][2]int64
	_, _, err := buildEntries(t, entriesOf(t, richTree(t), true), func(s *ports.BuildSpec) {
		s.Progress = func(done, total int64) { calls = append(calls, [2]int64{done, total}) }
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 {
		t.Fatal("no progress reported")
	}
	last := calls[len(calls)-1]
	if last[0] != last[1] || last[1] <= 0 {
		t.Fatalf("last progress %d of %d, want all of it", last[0], last[1])
	}
	for i := 1; i < len(calls); i++ {
		if calls[i][0] < calls[i-1][0] || calls[i][1] != last[1] {
			t.Fatalf("progress went back or changed its total: %v", calls)
		}
	}
}
