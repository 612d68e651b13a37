package flattenertest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// trickle hands out a blob a few bytes at a time, as a download does.
type trickle struct {
	b    []byte
	step int
}

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.step)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// Streamed turns layer files into FlattenLayers read through Blob (the way
// a layer is handed over while it downloads), with Path unset.
func Streamed(t testing.TB, ls []ports.FlattenLayer) []ports.FlattenLayer {
	t.Helper()
	out := make([]ports.FlattenLayer, len(ls))
	for i, l := range ls {
		b, err := os.ReadFile(l.Path)
		if err != nil {
			t.Fatal(err)
		}
		l.Blob, l.Path = &trickle{b: b, step: 1000 + 777*i}, ""
		out[i] = l
	}
	return out
}

// DiffIDOf is the digest of a layer blob's uncompressed bytes.
func DiffIDOf(t testing.TB, blob []byte) string {
	t.Helper()
	var r io.Reader = bytes.NewReader(blob)
	switch {
	case len(blob) >= 2 && blob[0] == 0x1f && blob[1] == 0x8b:
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case len(blob) >= 4 && bytes.Equal(blob[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	}
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DirCache is a ports.DerivedCache in a directory, for tests.
type DirCache struct {
	Dir string
	mu  sync.Mutex
}

// Open implements ports.DerivedCache.
func (c *DirCache) Open(name string) (*os.File, error) {
	f, err := os.Open(filepath.Join(c.Dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", name, core.ErrNotFound)
	}
	return f, err
}

// Create implements ports.DerivedCache.
func (c *DirCache) Create(name string) (*os.File, func() error, error) {
	f, err := os.CreateTemp(c.Dir, ".tmp-")
	if err != nil {
		return nil, nil, err
	}
	return f, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return os.Rename(f.Name(), filepath.Join(c.Dir, name))
	}, nil
}

// Files lists the committed derived files.
func (c *DirCache) Files() []string {
	ents, _ := os.ReadDir(c.Dir)
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// testStreamed holds the flattener to the same answers when layers arrive
// through FlattenLayer.Blob: every hostile case refused with its rule or
// flattened to the same bytes.
func testStreamed(t *testing.T, h Harness) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			f := flattener(t, h, c.Limits)
			t.Setenv("TMPDIR", t.TempDir())
			v := NewVictim(t)
			forms := []string{MediaTar, MediaGzip}
			if c.Blobs != nil {
				forms = forms[:1]
			}
			for _, form := range forms {
				files := WriteLayers(t, c.LayerBlobs(t, v, form)...)
				want, _, werr := flatten(t, f, files)
				got, _, gerr := flatten(t, f, Streamed(t, files))
				v.Check(t)
				if c.Flatten != "" {
					WantRule(t, gerr, c.Flatten)
					continue
				}
				if werr != nil || gerr != nil {
					t.Fatalf("%s: file: %v, streamed: %v", form, werr, gerr)
				}
				if !bytes.Equal(want, got) {
					t.Fatalf("%s: a streamed layer flattens differently from its file", form)
				}
			}
		})
	}
	t.Run("BlobError", func(t *testing.T) {
		f := flattener(t, h, Limits{})
		boom := errors.New("download failed")
		tarB := Tar(t, Reg("a", strings.Repeat("a", 100_000)))
		// A download that breaks is the download's error, not bad layer
		// bytes, whatever decodes the stream.
		gz := Gzip(t, tarB)
		for _, b := range []Blob{{tarB[:700], MediaTar}, {gz[:len(gz)/2], MediaGzip}} {
			ls := []ports.FlattenLayer{{MediaType: b.MediaType, Digest: "sha256:test0", Blob: io.MultiReader(bytes.NewReader(b.Data), errReader{boom})}}
			_, _, err := flatten(t, f, ls)
			if !errors.Is(err, boom) || RuleOf(err) != "" {
				t.Fatalf("%s: Flatten = %v, want the blob's read error", b.MediaType, err)
			}
		}
	})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// testDiffID: a layer whose uncompressed bytes match FlattenLayer.DiffID
// flattens; one that does not fails with ports.ErrDiffIDMismatch.
func testDiffID(t *testing.T, h Harness) {
	f := flattener(t, h, Limits{})
	tarB := Tar(t, Dir("d"), Reg("d/f", strings.Repeat("x", 10000)))
	for _, b := range []Blob{{tarB, MediaTar}, {Gzip(t, tarB), MediaGzip}, {Zstd(t, tarB), MediaZstd}} {
		ls := WriteLayers(t, b)
		ls[0].DiffID = DiffIDOf(t, b.Data)
		if _, _, err := flatten(t, f, ls); err != nil {
			t.Fatalf("%s with its diff_id: %v", b.MediaType, err)
		}
		if _, _, err := flatten(t, f, Streamed(t, ls)); err != nil {
			t.Fatalf("%s streamed with its diff_id: %v", b.MediaType, err)
		}
		ls[0].DiffID = "sha256:" + strings.Repeat("0", 64)
		if _, _, err := flatten(t, f, ls); !errors.Is(err, ports.ErrDiffIDMismatch) {
			t.Fatalf("%s with a wrong diff_id: %v, want ErrDiffIDMismatch", b.MediaType, err)
		}
	}
}

// testDerived: a flattener given a DerivedCache gives the same output
// whether it decodes or uses what it kept, keeps nothing for a refused
// layer, and still catches a wrong diff_id.
func testDerived(t *testing.T, h Harness) {
	f := flattener(t, h, Limits{})
	l0 := Tar(t, Dir("etc"), Reg("etc/a", strings.Repeat("a", 5000)), Reg("etc/b", "b"), Hard("etc/c", "etc/a"), Sym("l", "etc/a"))
	l1 := Tar(t, Whiteout("etc", "b"), Reg("etc/d", strings.Repeat("d", 70000)), Reg("empty", ""))
	blobs := []Blob{{Gzip(t, l0), MediaGzip}, {Zstd(t, l1), MediaZstd}}
	files := WriteLayers(t, blobs...)
	caches := []*DirCache{{Dir: t.TempDir()}, {Dir: t.TempDir()}}
	with := func(ls []ports.FlattenLayer) []ports.FlattenLayer {
		out := make([]ports.FlattenLayer, len(ls))
		for i, l := range ls {
			l.Derived, l.DiffID = caches[i], DiffIDOf(t, blobs[i].Data)
			out[i] = l
		}
		return out
	}
	plain, _, err := flatten(t, f, files)
	if err != nil {
		t.Fatal(err)
	}
	for round, ls := range [][]ports.FlattenLayer{with(files), with(files), with(Streamed(t, files))} {
		got, _, err := flatten(t, f, ls)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(got, plain) {
			t.Fatalf("round %d: output differs from a build without the cache", round)
		}
	}
	ls := with(files)
	ls[1].DiffID = "sha256:" + strings.Repeat("0", 64)
	if _, _, err := flatten(t, f, ls); !errors.Is(err, ports.ErrDiffIDMismatch) {
		t.Fatalf("wrong diff_id over a kept layer: %v, want ErrDiffIDMismatch", err)
	}

	bad := &DirCache{Dir: t.TempDir()}
	bl := WriteLayers(t, Blob{Gzip(t, Tar(t, Reg("ok", "x"), Reg("../evil", "x"))), MediaGzip})
	bl[0].Derived = bad
	if _, _, err := flatten(t, f, bl); err == nil {
		t.Fatal("hostile layer accepted")
	}
	if files := bad.Files(); len(files) != 0 {
		t.Fatalf("a refused layer left derived files %v", files)
	}
}

// EntriesTar encodes a tree handed over as its tar stream, reading
// content from the entries' files, and checks each Zero list against the
// content. It reads the entries again, last first, to hold the tree to
// its contract: entries may be read in any order and more than once.
func EntriesTar(t testing.TB, tree ports.Tree) []byte {
	t.Helper()
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	var names []string
	for i := range tree.Len() {
		e, err := tree.Entry(i)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if e.Header == nil {
			t.Fatalf("entry %d has no header", i)
		}
		h := *e.Header
		names = append(names, h.Name+"\x00"+h.Linkname)
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		if h.Typeflag != tar.TypeReg || h.Size == 0 {
			continue
		}
		if e.File == nil {
			t.Fatalf("%s: %d bytes of content but no file", h.Name, h.Size)
		}
		body := make([]byte, h.Size)
		if _, err := e.File.ReadAt(body, e.Offset); err != nil {
			t.Fatalf("%s: read content: %v", h.Name, err)
		}
		if e.ZeroKnown {
			checkZero(t, h.Name, body, e.Zero)
		}
		tw.Write(body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	for i := tree.Len() - 1; i >= 0; i-- {
		e, err := tree.Entry(i)
		if err != nil {
			t.Fatalf("entry %d read again: %v", i, err)
		}
		if got := e.Header.Name + "\x00" + e.Header.Linkname; got != names[i] {
			t.Fatalf("entry %d read again is %q, first %q", i, got, names[i])
		}
	}
	return out.Bytes()
}

func checkZero(t testing.TB, name string, body []byte, zero [][2]uint32) {
	t.Helper()
	isZero := map[uint32]bool{}
	for _, r := range zero {
		for b := r[0]; b < r[0]+r[1]; b++ {
			isZero[b] = true
		}
	}
	for b := uint32(0); int64(b)*4096 < int64(len(body)); b++ {
		blk := body[int64(b)*4096 : min(int64(b+1)*4096, int64(len(body)))]
		if z := !bytes.ContainsFunc(blk, func(r rune) bool { return r != 0 }); z != isZero[b] {
			t.Fatalf("%s: block %d is zero: %v, Zero says %v", name, b, z, isZero[b])
		}
	}
}

// testEntries: the zero-block lists a flattener hands over with content
// match the content (EntriesTar checks them), for files with holes, a zero
// tail and nothing but zeros.
func testEntries(t *testing.T, h Harness) {
	sparse := make([]byte, 3*4096+100)
	copy(sparse[4096:], "data in the second block")
	zeroTail := make([]byte, 2*4096+10)
	zeroTail[0] = 1
	ls := WriteLayers(t, Blob{Gzip(t, Tar(t, Reg("sparse", string(sparse)), Reg("zerotail", string(zeroTail)), Reg("allzero", string(make([]byte, 9000))))), MediaGzip})
	out, _, err := flatten(t, flattener(t, h, Limits{}), ls)
	if err != nil {
		t.Fatal(err)
	}
	CheckTree(t, out)
}

// TarEntries is EntriesTar's inverse: the tree a tar stream holds, as the
// entries a flattener hands over, with the content in one file (kept until
// the test ends) and, withZero, each file's list of zero blocks. Builder
// and extractor tests feed their tar fixtures through it.
func TarEntries(t testing.TB, tree []byte, withZero bool) ports.TreeSlice {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "content-")
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
			return out
		}
		if err != nil {
			t.Fatalf("TarEntries: %v", err)
		}
		e := ports.TreeEntry{Header: h}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			zero, err := copySparse(f, off, tr)
			if err != nil {
				t.Fatalf("TarEntries: content of %s: %v", h.Name, err)
			}
			e.File, e.Offset = f, off
			off += h.Size
			if withZero {
				e.Zero, e.ZeroKnown = zero, true
			}
		}
		out = append(out, e)
	}
}

// copySparse copies r into f at off block by block, leaving all-zero 4 KiB
// blocks as holes (a hostile fixture may declare gigabytes of them, which
// must cost neither memory nor disk), and returns the zero blocks as
// [first, count] runs.
func copySparse(f *os.File, off int64, r io.Reader) ([][2]uint32, error) {
	var runs [][2]uint32
	buf := make([]byte, 256*4096)
	zero := make([]byte, 4096)
	var n int64
	for {
		k, err := fill(r, buf)
		for i := 0; i < k; i += 4096 {
			blk := buf[i:min(i+4096, k)]
			b := uint32((n + int64(i)) / 4096)
			if !bytes.Equal(blk, zero[:len(blk)]) {
				if _, err := f.WriteAt(blk, off+n+int64(i)); err != nil {
					return nil, err
				}
				continue
			}
			if j := len(runs); j > 0 && runs[j-1][0]+runs[j-1][1] == b {
				runs[j-1][1]++
			} else {
				runs = append(runs, [2]uint32{b, 1})
			}
		}
		n += int64(k)
		if err == io.EOF {
			// The file ends in a hole: give it its length.
			return runs, f.Truncate(max(off+n, fileSize(f)))
		}
		if err != nil {
			return nil, err
		}
	}
}

// fill reads until buf is full or r fails, returning r's own error (io.EOF
// at the end), unlike io.ReadFull, which hides a truncation behind it.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func fileSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}
