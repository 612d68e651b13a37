package layers

import (
	"archive/tar"
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/cubesandbox/templatecenter/ports"
)

// benchImage writes a three-layer image of about 100 MB per layer
// (uncompressed) under dir, in the given compression, and returns the
// layers and their total uncompressed tar size. Content is text-like
// (compresses about 3:1); layer 2 overwrites and whites out part of layer 1.
func benchImage(b testing.TB, dir string, comp compression) ([]Layer, int64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"lib", "usr", "func", "return", "the", "of", "0x7f", "static", "const", "\n", " ", "\t", "import", "int", "char", "{", "}"}
	pool := make([]byte, 0, 4<<20)
	for len(pool) < 4<<20 {
		pool = append(pool, words[rng.IntN(len(words))]...)
		if rng.IntN(8) == 0 {
			pool = append(pool, byte(rng.IntN(256)))
		}
	}
	var layers []Layer
	var total int64
	for l := range 3 {
		p := filepath.Join(dir, "layer"+strconv.Itoa(l))
		tw, finish := layerFile(b, p, comp, "sha256:bench"+strconv.Itoa(l))
		write := func(h *tar.Header, body []byte) {
			h.ModTime = fixedTime
			if err := tw.WriteHeader(h); err != nil {
				b.Fatal(err)
			}
			tw.Write(body)
		}
		for d := range 40 {
			write(&tar.Header{Typeflag: tar.TypeDir, Name: "usr/lib/pkg" + strconv.Itoa(d), Mode: 0o755}, nil)
		}
		size := int64(0)
		for i := 0; size < 100<<20; i++ {
			n := 512 + rng.IntN(200<<10)
			off := rng.IntN(len(pool) - n)
			name := "usr/lib/pkg" + strconv.Itoa(i%40) + "/file" + strconv.Itoa(i)
			if l == 2 && i%10 == 0 {
				write(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/lib/pkg" + strconv.Itoa(i%40) + "/.wh.file" + strconv.Itoa(i), Mode: 0o644}, nil)
			}
			write(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(n)}, pool[off:off+n])
			if i%50 == 0 {
				write(&tar.Header{Typeflag: tar.TypeSymlink, Name: name + ".lnk", Linkname: "file" + strconv.Itoa(i)}, nil)
			}
			size += int64(n)
		}
		layer, n := finish()
		total += n
		layers = append(layers, layer)
	}
	return layers, total
}

// layerFile creates the layer file p, compressed as comp, and returns a
// tar writer into it and finish, which closes the file and returns its
// layer (named digest) and its uncompressed tar size.
func layerFile(t testing.TB, p string, comp compression, digest string) (*tar.Writer, func() (Layer, int64)) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	var w io.Writer = f
	var closer io.Closer
	mt := mtTar
	switch comp {
	case gzipped:
		gw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
		w, closer, mt = gw, gw, mtGzip
	case zstded:
		zw, _ := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
		w, closer, mt = zw, zw, mtZstd
	}
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<20)
	tw := tar.NewWriter(bw)
	return tw, func() (Layer, int64) {
		t.Helper()
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if closer != nil {
			if err := closer.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return Layer{Path: p, MediaType: mt, Digest: digest}, cw.n
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// BenchmarkFlatten reports throughput in uncompressed layer bytes per
// second (MB/s) for plain, gzip and zstd layers of ~300 MB in total, next to
// a baseline that only decompresses the same layers in parallel (the floor
// Flatten cannot beat on this machine).
func BenchmarkFlatten(b *testing.B) {
	for _, comp := range []compression{plain, gzipped, zstded} {
		// Generated in the parent's directory: a sub-benchmark's TempDir
		// vanishes when it ends.
		layers, total := benchImage(b, b.TempDir(), comp)
		setup := func(b *testing.B) {
			b.SetBytes(total)
			b.ResetTimer()
		}
		b.Run(comp.String(), func(b *testing.B) {
			setup(b)
			var out int64
			for b.Loop() {
				st, err := Flatten(context.Background(), layers, DefaultLimits(), func(ports.Tree) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				out = st.ContentBytes
			}
			var compressed int64
			for _, l := range layers {
				fi, _ := os.Stat(l.Path)
				compressed += fi.Size()
			}
			b.ReportMetric(float64(out)/1e6, "outMB")
			b.ReportMetric(float64(compressed)/float64(total), "ratio")
		})
		if comp == plain {
			continue
		}
		b.Run(comp.String()+"-decode-only", func(b *testing.B) {
			setup(b)
			for b.Loop() {
				var wg sync.WaitGroup
				for _, l := range layers {
					wg.Go(func() {
						f, _ := os.Open(l.Path)
						defer f.Close()
						dec, err := decoder(comp, f, DefaultLimits())
						if err != nil {
							b.Error(err)
							return
						}
						defer dec.Close()
						if _, err := io.Copy(io.Discard, dec); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}
