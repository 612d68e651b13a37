package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"unsafe"
)

// saveChunk is the piece a download is read, hashed and written in: a
// gigabyte artifact in 256 writes.
const saveChunk = 4 << 20

// saveDepth is how many chunks are in flight: one filled from the network
// and hashed while the others are written, so the disk and the network
// overlap instead of taking turns.
const saveDepth = 3

// saveFile writes body to path (created or truncated) and returns the bytes
// written and their sha256 in lower-case hex, after syncing the file.
//
// Where the filesystem allows, the file is written with direct I/O
// (openDirect): the bytes go from the download buffer to the disk without
// a copy into the page cache. A node copying gigabytes that no sandbox
// reads yet would otherwise pay that copy for every byte, push the page
// cache of running sandboxes out for pages nobody wants, and leave the
// whole artifact dirty for the final fsync to write in one go; direct
// writes reach the disk while the next chunk downloads. The tail that is
// not a whole alignment block is written through the page cache.
// Elsewhere the same loop writes through the page cache.
func saveFile(ctx context.Context, path string, body io.Reader) (n int64, sum string, err error) {
	f, direct, err := openDirect(path)
	if err != nil {
		return 0, "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	h := sha256.New()
	free := make(chan []byte, saveDepth)
	for range saveDepth {
		free <- alignedBuffer(saveChunk)
	}
	full := make(chan []byte, saveDepth)
	werr := make(chan error, 1)
	var failed atomic.Bool // the writer failed: stop reading
	// The writer goroutine owns f and direct until full is closed.
	go func() {
		var err error
		for b := range full {
			if err == nil {
				if err = writeChunk(f, b, &direct); err != nil {
					failed.Store(true)
				}
			}
			free <- b[:cap(b)]
		}
		werr <- err
	}()
	var rerr error
	for !failed.Load() {
		if rerr = ctx.Err(); rerr != nil {
			break
		}
		b := <-free
		k, err := io.ReadFull(body, b)
		if k > 0 {
			h.Write(b[:k])
			n += int64(k)
			full <- b[:k]
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
	close(full)
	if err := <-werr; err != nil {
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

// writeChunk appends b to f. With direct I/O on, the whole alignment
// blocks of b are written directly; a shorter tail (only the last chunk
// has one) turns direct I/O off for the rest of the file. A filesystem
// that accepted O_DIRECT at open but refuses the write (EINVAL) gets the
// same bytes through the page cache.
func writeChunk(f *os.File, b []byte, direct *bool) error {
	if *direct {
		whole := len(b) &^ (directAlign - 1)
		if whole > 0 {
			k, err := f.Write(b[:whole])
			switch {
			case err == nil:
				b = b[whole:]
			case isInvalid(err) && k == 0:
				if err := setDirect(f, false); err != nil {
					return err
				}
				*direct = false
			default:
				return err
			}
		}
		if len(b) > 0 && *direct {
			if err := setDirect(f, false); err != nil {
				return err
			}
			*direct = false
		}
	}
	if len(b) == 0 {
		return nil
	}
	_, err := f.Write(b)
	return err
}

// alignedBuffer returns n bytes starting at a directAlign boundary, as
// direct I/O requires of the memory it writes from.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % directAlign); r != 0 {
		off = directAlign - r
	}
	return b[off : off+n : off+n]
}
