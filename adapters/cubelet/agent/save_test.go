package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/cubesandbox/templatecenter/adapters/diskio"
)

func TestSaveFileSizes(t *testing.T) {
	// Around the alignment block and the chunk, and more chunks than are
	// in flight, each with short reads from the network.
	sizes := []int{0, 1, diskio.Align - 1, diskio.Align, diskio.Align + 1,
		saveChunk - 1, saveChunk, saveChunk + diskio.Align + 7, saveBuffers*saveChunk + 12345}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range sizes {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		for _, tc := range []struct {
			name string
			r    io.Reader
		}{
			{"whole", bytes.NewReader(data)},
			{"half reads", iotest.HalfReader(bytes.NewReader(data))},
		} {
			p := filepath.Join(t.TempDir(), "a.ext4.download")
			n, sum, err := newTestAgent(t).saveFile(context.Background(), p, tc.r)
			if err != nil {
				t.Fatalf("%d bytes, %s: %v", size, tc.name, err)
			}
			if n != int64(size) || sum != hexSHA(data) {
				t.Fatalf("%d bytes, %s: got n=%d sum=%s, want %d %s", size, tc.name, n, sum, size, hexSHA(data))
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("%d bytes, %s: the file holds other bytes (%d long)", size, tc.name, len(got))
			}
		}
	}
}

func TestSaveFileReadError(t *testing.T) {
	boom := errors.New("connection reset")
	r := io.MultiReader(bytes.NewReader(make([]byte, saveChunk+10)), iotest.ErrReader(boom))
	p := filepath.Join(t.TempDir(), "a")
	if _, _, err := newTestAgent(t).saveFile(context.Background(), p, r); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the read error", err)
	}
}

func TestSaveFileCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := filepath.Join(t.TempDir(), "a")
	if _, _, err := newTestAgent(t).saveFile(ctx, p, bytes.NewReader(make([]byte, 10))); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// A disk that fills up mid-download stops the download with the write
// error instead of reading the rest of a gigabyte (or hanging).
func TestSaveFileWriteError(t *testing.T) {
	if f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0); err != nil {
		t.Skipf("no /dev/full: %v", err)
	} else {
		f.Close()
	}
	r := &countingReader{r: bytes.NewReader(make([]byte, 64*saveChunk))}
	_, _, err := newTestAgent(t).saveFile(context.Background(), "/dev/full", r)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "/dev/full") {
		t.Fatalf("err %v, want ENOSPC naming the file", err)
	}
	if r.n > int64(saveBuffers+2)*saveChunk {
		t.Fatalf("read %d bytes after the write failed, want at most %d", r.n, (saveBuffers+2)*saveChunk)
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}
