package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/cubesandbox/templatecenter/adapters/diskio"
)

// saveChunk is the piece a download is read, hashed and written in: a
// gigabyte artifact in 256 writes.
const saveChunk = 4 << 20

// saveBuffers is how many chunks exist: one filled from the network and
// hashed while the others are written, several at once, so the disk and
// the network overlap instead of taking turns.
const saveBuffers = diskio.DefaultDepth + 2

// saveFile writes body to path (created or truncated) and returns the bytes
// written and their sha256 in lower-case hex, after syncing the file.
//
// Where the filesystem allows, the file is written with direct I/O
// (adapters/diskio): the bytes go from the download buffer to the disk
// without a copy into the page cache. A node copying gigabytes that no
// sandbox reads yet would otherwise pay that copy for every byte, push the
// page cache of running sandboxes out for pages nobody wants, and leave
// the whole artifact dirty for the final fsync to write in one go; direct
// writes reach the disk while the next chunks download. The tail that is
// not a whole alignment block is written through the page cache, and so
// is everything where direct I/O is refused.
func (a *Agent) saveFile(ctx context.Context, path string, body io.Reader) (n int64, sum string, err error) {
	f, err := a.createFile(path)
	if err != nil {
		return 0, "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	h := sha256.New()
	// Released last (deferred before the writer exists): dw.Close below
	// waits for every write, on every path.
	mem := diskio.NewBuffers(saveBuffers, saveChunk)
	defer mem.Release()
	free := make(chan []byte, saveBuffers)
	for _, b := range mem.Pieces() {
		free <- b
	}
	dw := diskio.NewWriter(f, diskio.DefaultDepth)
	var rerr error
	for dw.Err() == nil { // a failed write stops the reading
		if rerr = ctx.Err(); rerr != nil {
			break
		}
		b := <-free
		k, err := io.ReadFull(body, b)
		if k > 0 {
			h.Write(b[:k])
			dw.WriteAt(b[:k], n, func() { free <- b })
			n += int64(k)
		} else {
			free <- b
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	if err := dw.Close(); err != nil {
		return n, "", fmt.Errorf("write %s: %w", path, err)
	}
	if rerr != nil {
		return n, "", rerr
	}
	if err := f.Sync(); err != nil {
		return n, "", fmt.Errorf("sync %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
