package buildertest

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
)

// EntriesOf reads a flattened tree file into TreeEntries whose content is
// read in place from the file (Zero unknown).
func EntriesOf(t testing.TB, treeFile string) ports.TreeSlice {
	t.Helper()
	f, err := os.Open(treeFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	pos := &offsetReader{r: f}
	tr := tar.NewReader(pos)
	var out ports.TreeSlice
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e := ports.TreeEntry{Header: h}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			e.File, e.Offset = f, pos.n
		}
		out = append(out, e)
	}
}

// offsetReader counts the bytes read (the tar reader reads a header, then
// the content, so the count after Next is the content's offset).
type offsetReader struct {
	r io.Reader
	n int64
}

func (o *offsetReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	o.n += int64(n)
	return n, err
}

// testFromFlattener holds the image built from the flattener's entries,
// which come with their zero-block lists, to the bytes of the one built
// from the same tree read back from its file (lists unknown, no layers):
// without their layers the entries give those bytes, and with them they
// give the same bytes whether their zero lists are known or not.
func testFromFlattener(t *testing.T, fx *fixture, fl ports.TreeFlattener, ls []ports.FlattenLayer) {
	fx.fidelityImage(t)
	b := fx.newBuilder(t)
	build := func(es ports.Tree) string {
		out := filepath.Join(t.TempDir(), "rootfs.ext4")
		res, err := b.Build(context.Background(), baseSpec(out), es)
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		checkResultSize(t, out, res)
		sum, err := FileSHA256(out)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	if _, err := fl.Flatten(context.Background(), ls, func(tree ports.Tree) error {
		es, err := ports.TreeEntries(tree)
		if err != nil {
			return err
		}
		flat := make(ports.TreeSlice, len(es))
		unknown := make(ports.TreeSlice, len(es))
		for i, e := range es {
			flat[i], unknown[i] = e, e
			flat[i].Layer = 0
			unknown[i].Zero, unknown[i].ZeroKnown = nil, false
		}
		if sum := build(flat); sum != fx.imageSHA {
			t.Fatalf("the image built from the flattener's entries (%s) differs from the one built from the tree file (%s)", sum, fx.imageSHA)
		}
		if with, without := build(tree), build(unknown); with != without {
			t.Fatalf("with their layers, the entries give %s with their zero lists and %s without", with, without)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
