package layers

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// Fixture entries come from the port's suite.
type ent = flattenertest.Entry

var (
	reg       = flattenertest.Reg
	dir       = flattenertest.Dir
	sym       = flattenertest.Sym
	hard      = flattenertest.Hard
	fifo      = flattenertest.Fifo
	dev       = flattenertest.Dev
	xattrs    = flattenertest.Xattrs
	mkTar     = flattenertest.Tar
	gz        = flattenertest.Gzip
	zst       = flattenertest.Zstd
	fixedTime = flattenertest.FixedTime
)

const (
	mtTar  = flattenertest.MediaTar
	mtGzip = flattenertest.MediaGzip
	mtZstd = flattenertest.MediaZstd
)

type blob = flattenertest.Blob

func writeLayers(t testing.TB, blobs ...blob) []Layer {
	t.Helper()
	d := t.TempDir()
	var out []Layer
	for i, b := range blobs {
		p := filepath.Join(d, "layer"+strconv.Itoa(i))
		if err := os.WriteFile(p, b.Data, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, Layer{Path: p, MediaType: b.MediaType, Digest: "sha256:test" + strconv.Itoa(i)})
	}
	return out
}

// plainLayers makes one uncompressed layer per entry list.
func plainLayers(t testing.TB, layers ...[]ent) []Layer {
	var bs []blob
	for _, l := range layers {
		bs = append(bs, blob{Data: mkTar(t, l...), MediaType: mtTar})
	}
	return writeLayers(t, bs...)
}

// flatten returns the tree Flatten hands over, as tar.
func flatten(t testing.TB, layers []Layer, lim Limits) ([]byte, Stats, error) {
	t.Helper()
	var out []byte
	st, err := Flatten(context.Background(), layers, lim, func(es ports.Tree) error {
		out = flattenertest.EntriesTar(t, es)
		return nil
	})
	return out, st, err
}

// extractTar is ExtractEntries of the tree a tar stream holds (tests write
// their trees as tar); its content sits in a temporary file. A stream that
// is not a whole tar archive is an error of its own, which is not a
// refusal: ExtractEntries never sees it.
func extractTar(ctx context.Context, tree io.Reader, root string, opt ExtractOptions) (ExtractResult, error) {
	es, done, err := tarEntries(tree)
	if err != nil {
		return ExtractResult{}, err
	}
	defer done()
	return ExtractEntries(ctx, es, root, opt)
}

var errNotTar = errors.New("test tree is not a tar archive")

func tarEntries(tree io.Reader) (ports.TreeSlice, func(), error) {
	f, err := os.CreateTemp("", "extract-content-")
	if err != nil {
		return nil, nil, err
	}
	os.Remove(f.Name())
	var out ports.TreeSlice
	tr := tar.NewReader(tree)
	var off int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, func() { f.Close() }, nil
		}
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("%w: %v", errNotTar, err)
		}
		e := ports.TreeEntry{Header: h}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			n, err := io.Copy(f, tr)
			if err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("%w: %v", errNotTar, err)
			}
			e.File, e.Offset = f, off
			off += n
		}
		out = append(out, e)
	}
}

func mustFlatten(t testing.TB, layers ...[]ent) []byte {
	t.Helper()
	out, _, err := flatten(t, plainLayers(t, layers...), DefaultLimits())
	if err != nil {
		t.Fatalf("Flatten: %v", err)
	}
	return out
}

func find(es []ent, name string) *ent {
	for i := range es {
		if es[i].Header.Name == name {
			return &es[i]
		}
	}
	return nil
}

// wantRule asserts err is a *RejectError with rule.
func wantRule(t testing.TB, err error, rule string) {
	t.Helper()
	var re *RejectError
	if !errors.As(err, &re) {
		t.Fatalf("want *RejectError %s, got %v", rule, err)
	}
	if re.Rule != rule {
		t.Fatalf("want rule %s, got %v", rule, err)
	}
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("errors.Is(err, ErrRejected) false for %v", err)
	}
}

// needRoot skips the test, or fails it when servers are required, unless
// it runs as root.
func needRoot(t testing.TB) {
	t.Helper()
	testenv.Root(t, "Extract applies ownership, devices and trusted.* xattrs")
}

func itoa(n int) string { return strconv.Itoa(n) }
