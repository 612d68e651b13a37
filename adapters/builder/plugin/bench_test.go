package plugin

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
)

// BenchmarkBuildThroughPlugin is ext4stream's BenchmarkBuild across the
// process boundary: the plugin reads the tree's content from the host's
// files in place (API v3). Compare its MB/s with the in-process figure for
// the cost of the boundary.
func BenchmarkBuildThroughPlugin(b *testing.B) {
	if pluginBin == "" {
		b.Skip("no go toolchain to build the plugin")
	}
	bl, err := Load(context.Background(), pluginBin, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer bl.Close()
	dir := b.TempDir()
	treePath := filepath.Join(dir, "tree.tar")
	size, err := writeTree(treePath, 300<<20)
	if err != nil {
		b.Fatal(err)
	}
	tree := buildertest.EntriesOf(b, treePath)
	b.SetBytes(size)
	out := filepath.Join(dir, "rootfs.ext4")
	for b.Loop() {
		if _, err := bl.Build(context.Background(), ports.BuildSpec{OutPath: out, UUID: buildertest.FixtureUUID, Time: time.Unix(1700000000, 0)}, tree); err != nil {
			b.Fatal(err)
		}
	}
}

// writeTree writes a tree of about total bytes: files of 0..256 KiB with
// a few of several MiB, sixty to a directory.
func writeTree(p string, total int64) (int64, error) {
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	data := rand.NewChaCha8([32]byte{9})
	tw := tar.NewWriter(f)
	mtime := time.Unix(1700000000, 0)
	var written int64
	for d := 0; written < total; d++ {
		dir := fmt.Sprintf("d%04d", d)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime}); err != nil {
			return 0, err
		}
		for i := 0; i < 60 && written < total; i++ {
			size := rng.Int64N(256 << 10)
			if rng.IntN(100) < 3 {
				size = 1<<20 + rng.Int64N(15<<20)
			}
			h := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%s/f%02d", dir, i), Mode: 0o644, Size: size, ModTime: mtime}
			if err := tw.WriteHeader(h); err != nil {
				return 0, err
			}
			if _, err := io.CopyN(tw, data, size); err != nil {
				return 0, err
			}
			written += size
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	return f.Seek(0, io.SeekCurrent)
}
