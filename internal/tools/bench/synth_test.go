package bench

import (
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// The big image's generated layers are the same byte for byte for the
// same seed and sizes (so the image cached under -work and the pushed
// digests stay valid across runs and machines), differ for another seed,
// and are neither zeros nor trivially compressible.
func TestGeneratedLayersAreDeterministic(t *testing.T) {
	dir := t.TempDir()
	gen := func(name string, seed uint64) Layer {
		t.Helper()
		l, _, err := writeLayer(filepath.Join(dir, name), func(w *layerWriter) error {
			if err := w.addSources("opt/rust/src", seed, 300); err != nil {
				return err
			}
			return w.addBinaries("opt/rust", seed, 3<<20+12345)
		})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b, c := gen("a.tar.gz", 1), gen("b.tar.gz", 1), gen("c.tar.gz", 2)
	if a.Digest != b.Digest || a.DiffID != b.DiffID {
		t.Fatalf("same seed, different layers: %s %s", a.Digest, b.Digest)
	}
	if a.DiffID == c.DiffID {
		t.Fatal("another seed gave the same layer")
	}
	if a.Content < 3<<20+12345 || a.Entries < 300 {
		t.Fatalf("layer too small: %d bytes, %d entries", a.Content, a.Entries)
	}
	// Compressed to between a fifth and nine tenths of the tar: real
	// toolchains compress about 2-3x.
	if r := float64(a.Size) / float64(a.TarSize); r < 0.2 || r > 0.9 {
		t.Fatalf("gzip / tar = %.2f, want 0.2..0.9", r)
	}
	f, err := os.Open(filepath.Join(dir, "a.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if zeros := bytes.Count(raw, []byte{0}); zeros > len(raw)/4 {
		t.Fatalf("%d of %d bytes are zero", zeros, len(raw))
	}
}

func TestSourceTextHasTheSizeAsked(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 64, 5000, 64 << 10} {
		if got := len(sourceText(r, nil, size)); got != size {
			t.Errorf("sourceText(%d) gave %d bytes", size, got)
		}
	}
}

func TestBinaryGenPartsAreDifferentKinds(t *testing.T) {
	g := newBinaryGen(7)
	b := make([]byte, 1<<20)
	g.fill(b)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	// Random blocks alone would not compress; all-copies would vanish.
	if r := float64(buf.Len()) / float64(len(b)); r < 0.3 || r > 0.8 {
		t.Fatalf("gzip ratio of the binaries %.2f, want 0.3..0.8", r)
	}
}
