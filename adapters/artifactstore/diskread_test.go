package artifactstore

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// refusing is a direct descriptor the filesystem will not read through.
type refusing struct{}

func (refusing) ReadAt([]byte, int64) (int, error) { return 0, syscall.EINVAL }

// TestDiskReader: the bytes a disk reader yields are the file's first
// limit bytes, then io.EOF, whether it reads directly, through the page
// cache, or falls back from a refused direct read.
func TestDiskReader(t *testing.T) {
	sizes := []struct {
		name        string
		size, limit int64
	}{
		{"empty", 0, 1},
		{"one byte", 1, 2},
		{"a block", 4096, 4097},
		{"a block and a byte", 4097, 4098},
		{"a chunk", diskReadChunk, diskReadChunk + 1},
		{"two chunks and a tail", 2*diskReadChunk + 8192 + 7, 2*diskReadChunk + 8192 + 8},
		{"limit below the size", 3*diskBlock + 5, 2*diskBlock + 1},
	}
	for _, sz := range sizes {
		content := make([]byte, sz.size)
		r := rand.New(rand.NewPCG(uint64(sz.size), 1))
		for i := range content {
			content[i] = byte(r.Uint32())
		}
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		direct := openDirect(f)
		if direct != nil {
			defer direct.Close()
		}
		want := content[:min(sz.size, sz.limit)]
		for _, src := range []struct {
			name   string
			direct io.ReaderAt
		}{
			{"direct", direct},
			{"buffered", nil},
			{"refused", refusing{}},
		} {
			t.Run(sz.name+"/"+src.name, func(t *testing.T) {
				if src.name == "direct" && direct == nil {
					t.Skip("the test directory's filesystem refuses direct I/O")
				}
				dr := newDiskReader(src.direct, f, sz.limit)
				defer dr.Close()
				got, err := io.ReadAll(dr)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("read %d bytes, want the file's first %d", len(got), len(want))
				}
			})
		}
	}
}

// TestDiskReaderStopsEarly: a reader closed before the end lets its
// goroutine go, whether it waits for a free buffer or to hand one over.
func TestDiskReaderStopsEarly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 4*diskReadChunk), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := runtime.NumGoroutine()
	dr := newDiskReader(nil, f, 4*diskReadChunk)
	if _, err := dr.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	dr.Close()
	// A hang guard, not a timing assertion: the goroutine exits at its
	// next select.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before the reader", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}
