package ext4stream

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
)

// writeBenchTree writes a flattened tree of about total bytes shaped like a
// distro rootfs: many small files, some medium, a few large, nested
// directories, symlinks and hard links. Content is pseudo-random.
func writeBenchTree(w io.Writer, total int64) error {
	rng := rand.New(rand.NewPCG(1, 2))
	data := rand.NewChaCha8([32]byte{7})
	tw := tar.NewWriter(w)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Format = testMtime, tar.FormatPAX
		return tw.WriteHeader(h)
	}
	var written int64
	for d := 0; written < total; d++ {
		dir := fmt.Sprintf("usr/lib/pkg%03d/sub%d", d, d%7)
		if d == 0 {
			for _, p := range []string{"usr", "usr/lib"} {
				if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755}); err != nil {
					return err
				}
			}
		}
		for _, p := range []string{filepath.Dir(dir), dir} {
			if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755}); err != nil {
				return err
			}
		}
		for i := 0; i < 60 && written < total; i++ {
			var size int64
			switch r := rng.IntN(100); {
			case r < 70:
				size = rng.Int64N(8 << 10)
			case r < 97:
				size = 8<<10 + rng.Int64N(248<<10)
			default:
				size = 1<<20 + rng.Int64N(15<<20)
			}
			name := fmt.Sprintf("%s/file%02d.so", dir, i)
			if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size}); err != nil {
				return err
			}
			if _, err := io.CopyN(tw, data, size); err != nil {
				return err
			}
			written += size
			if i%20 == 0 {
				if err := hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: name + ".1", Linkname: filepath.Base(name)}); err != nil {
					return err
				}
				if err := hdr(&tar.Header{Typeflag: tar.TypeLink, Name: name + ".hl", Linkname: name}); err != nil {
					return err
				}
			}
		}
	}
	return tw.Close()
}

// BenchmarkBuild converts a ~300 MB tree read from a file (page cache) into
// an image, its content read in place from the tree file; MB/s is tree
// bytes per second. peak-RSS-MiB shows that file data is not held.
func BenchmarkBuild(b *testing.B) {
	dir := b.TempDir()
	treePath := filepath.Join(dir, "tree.tar")
	f, err := os.Create(treePath)
	if err != nil {
		b.Fatal(err)
	}
	if err := writeBenchTree(f, 300<<20); err != nil {
		b.Fatal(err)
	}
	size, _ := f.Seek(0, io.SeekCurrent)
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	out := filepath.Join(dir, "rootfs.ext4")
	var imgSize int64
	b.ResetTimer()
	es := buildertest.EntriesOf(b, treePath)
	for b.Loop() {
		res, err := New().Build(context.Background(), ports.BuildSpec{OutPath: out, UUID: testUUID, Time: buildTime}, es)
		if err != nil {
			b.Fatal(err)
		}
		imgSize = res.SizeBytes
	}
	b.StopTimer()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
	b.ReportMetric(float64(imgSize)/float64(size), "image/tree")
}
