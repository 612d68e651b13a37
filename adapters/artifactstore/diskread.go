package artifactstore

import (
	"io"
	"unsafe"
)

const (
	diskReadChunk = 4 << 20 // what one read of a disk reader asks the disk for
	diskBlock     = 4096    // the alignment direct I/O wants, at most
)

// diskReader reads a published file back for the hash check: through the
// direct descriptor when there is one (see openDirect), else through the
// page cache, one chunk ahead of the hash on a goroutine of its own so
// that the disk and the hash work at once. An image the builder wrote with
// direct I/O is not in the page cache; reading it back through the cache
// would fill a gigabyte of it only to hash it once (on VMs whose host
// hands out memory lazily, most of a Put's time), and reading around the
// cache checks the bytes the disk holds, not a copy in memory.
type diskReader struct {
	chunks chan readChunk
	free   chan []byte
	done   chan struct{}
	cur    readChunk
	rest   []byte
}

type readChunk struct {
	b   []byte
	err error
}

// newDiskReader starts reading at most limit bytes from offset 0. direct
// may be nil; when the filesystem refuses a direct read (isDirectRefused)
// the rest is read from buffered. Close stops the goroutine.
func newDiskReader(direct, buffered io.ReaderAt, limit int64) *diskReader {
	r := &diskReader{
		chunks: make(chan readChunk, 1),
		free:   make(chan []byte, 2),
		done:   make(chan struct{}),
	}
	for range 2 {
		r.free <- alignedBuffer(diskReadChunk)
	}
	go r.run(direct, buffered, limit)
	return r
}

func (r *diskReader) run(direct, buffered io.ReaderAt, limit int64) {
	src := buffered
	if direct != nil {
		src = direct
	}
	for off := int64(0); ; {
		var b []byte
		select {
		case b = <-r.free:
		case <-r.done:
			return
		}
		// A direct read must be whole blocks: ask for the wanted bytes
		// rounded up and keep the wanted ones.
		want := min(int64(len(b)), limit-off)
		n, err := src.ReadAt(b[:min(int64(len(b)), (want+diskBlock-1)/diskBlock*diskBlock)], off)
		if err != nil && src == direct && isDirectRefused(err) {
			src = buffered
			n, err = src.ReadAt(b[:want], off)
		}
		if int64(n) >= want {
			n, err = int(want), nil
		}
		if err == nil && off+int64(n) == limit {
			err = io.EOF
		}
		off += int64(n)
		select {
		case r.chunks <- readChunk{b[:n], err}:
		case <-r.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (r *diskReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		if r.cur.err != nil {
			return 0, r.cur.err
		}
		if r.cur.b != nil {
			r.free <- r.cur.b[:cap(r.cur.b)]
		}
		r.cur = <-r.chunks
		r.rest = r.cur.b
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// Close stops the reading goroutine; Read must not be called after.
func (r *diskReader) Close() { close(r.done) }

// alignedBuffer returns n bytes starting on a 4 KiB boundary, as direct
// I/O requires (the Go heap does not move objects).
func alignedBuffer(n int) []byte {
	b := make([]byte, n+diskBlock)
	k := int(-uintptr(unsafe.Pointer(&b[0])) & (diskBlock - 1))
	return b[k : k+n : k+n]
}
