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
func EntriesOf(t testing.TB, treeFile string) []ports.TreeEntry {
	t.Helper()
	f, err := os.Open(treeFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	pos := &offsetReader{r: f}
	tr := tar.NewReader(pos)
	var out []ports.TreeEntry
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

// testPlanned holds a builder that also builds from entries known up front
// (ports.PlannedBuilder) to the bytes of its tar build, fed from the tree
// file and, when the flattener hands entries over, from the flattener.
func testPlanned(t *testing.T, fx *fixture, fl ports.TreeFlattener, ls []ports.FlattenLayer) {
	pb, ok := fx.newBuilder(t).(ports.PlannedBuilder)
	if !ok {
		t.Skip("the builder does not build from entries")
	}
	fx.fidelityImage(t)
	check := func(t *testing.T, es []ports.TreeEntry) {
		out := filepath.Join(t.TempDir(), "rootfs.ext4")
		spec := baseSpec(nil, out)
		res, err := pb.BuildEntries(context.Background(), spec, es)
		if err != nil {
			t.Fatalf("BuildEntries: %v", err)
		}
		checkResultSize(t, out, res)
		sum, err := FileSHA256(out)
		if err != nil {
			t.Fatal(err)
		}
		if sum != fx.imageSHA {
			t.Fatalf("the image built from entries (%s) differs from the one built from the tar stream (%s)", sum, fx.imageSHA)
		}
		if res.SHA256 != "" && res.SHA256 != sum {
			t.Fatalf("BuildResult.SHA256 %s, the file's is %s", res.SHA256, sum)
		}
	}
	t.Run("FromTree", func(t *testing.T) { check(t, EntriesOf(t, fx.tree)) })
	t.Run("FromFlattener", func(t *testing.T) {
		ef, ok := fl.(ports.EntryFlattener)
		if !ok {
			t.Skip("the flattener does not hand over entries")
		}
		if _, err := ef.FlattenTo(context.Background(), ls, func(es []ports.TreeEntry) error {
			check(t, es)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
