package mkfs_test

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/builder/mkfs"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
)

// writeBenchTree writes a flattened tree of about 300 MB shaped like a
// language runtime image: a few large files, many medium and small ones,
// in 30 directories. It returns the content bytes.
func writeBenchTree(b *testing.B, p string) int64 {
	b.Helper()
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	r := rand.New(rand.NewChaCha8([32]byte{'b', 'e', 'n', 'c', 'h'}))
	mt := time.Unix(1_650_000_000, 0)
	buf := make([]byte, 4<<20)
	var total int64
	for d := range 30 {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("d%02d/", d), Mode: 0o755, ModTime: mt}); err != nil {
			b.Fatal(err)
		}
	}
	shapes := []struct {
		count int
		size  int
	}{{40, 4 << 20}, {1200, 64 << 10}, {4000, 16 << 10}, {2000, 1 << 10}}
	n := 0
	for _, s := range shapes {
		for range s.count {
			body := buf[:s.size]
			for i := 0; i+8 <= len(body); i += 8 {
				binary.LittleEndian.PutUint64(body[i:], r.Uint64())
			}
			h := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("d%02d/f%05d", n%30, n), Mode: 0o644, Size: int64(len(body)), ModTime: mt}
			if err := tw.WriteHeader(h); err != nil {
				b.Fatal(err)
			}
			if _, err := tw.Write(body); err != nil {
				b.Fatal(err)
			}
			total += int64(len(body))
			n++
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	return total
}

// BenchmarkBuild measures the builder on a ~300 MB tree (MB/s is content
// bytes per second), next to the plain pipeline it wraps: tar -x plus
// mkfs.ext4 -d into a fixed-size image, with no sizing, fixup or check.
func BenchmarkBuild(b *testing.B) {
	needRoot(b)
	dir := b.TempDir()
	tree := filepath.Join(dir, "tree.tar")
	content := writeBenchTree(b, tree)
	out := filepath.Join(dir, "img")

	b.Run("builder", func(b *testing.B) {
		b.SetBytes(content)
		var size int64
		es := buildertest.EntriesOf(b, tree)
		for b.Loop() {
			res, err := mkfs.New(mkfs.Options{WorkDir: dir}).Build(context.Background(), ports.BuildSpec{
				OutPath: out, UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime,
			}, es)
			if err != nil {
				b.Fatal(err)
			}
			size = res.SizeBytes
			os.Remove(out)
		}
		b.ReportMetric(float64(size)/(1<<20), "image-MiB")
		b.ReportMetric(float64(content)/(1<<20), "content-MiB")
	})

	b.Run("tar-x+mkfs-d", func(b *testing.B) {
		b.SetBytes(content)
		for b.Loop() {
			stage := filepath.Join(dir, "stage")
			if err := os.Mkdir(stage, 0o700); err != nil {
				b.Fatal(err)
			}
			if o, err := exec.Command("tar", "-xf", tree, "-C", stage).CombinedOutput(); err != nil {
				b.Fatalf("tar: %v: %s", err, o)
			}
			blocks := strconv.FormatInt(content*5/4/4096+8192, 10)
			if o, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-d", stage, out, blocks).CombinedOutput(); err != nil {
				b.Fatalf("mkfs: %v: %s", err, o)
			}
			os.RemoveAll(stage)
			os.Remove(out)
		}
	})
}
