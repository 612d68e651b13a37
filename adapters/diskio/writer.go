package diskio

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Align is what direct I/O asks of a piece's memory address, its length
// and its file offset: 4 KiB covers disks with 512-byte and 4 KiB logical
// blocks.
const Align = 4096

// DefaultDepth is the number of writes a Writer keeps in flight unless
// told otherwise.
const DefaultDepth = 4

// AlignedBuffer returns n bytes starting on an Align boundary (the Go
// heap does not move objects).
func AlignedBuffer(n int) []byte {
	b := make([]byte, n+Align)
	k := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (Align - 1))
	return b[k : k+n : k+n]
}

// Writer writes pieces of one open file at the offsets given, up to depth
// at once. Its methods other than Close may be called from any goroutine;
// Close is called once, after the last WriteAt.
type Writer struct {
	f       *os.File // the caller's descriptor: the page-cache path
	direct  *os.File // a second descriptor with O_DIRECT, or nil
	refused atomic.Bool
	jobs    chan piece
	wg      sync.WaitGroup

	mu  sync.Mutex
	err error
	bad atomic.Bool // err is set: later pieces are skipped
}

type piece struct {
	b    []byte
	off  int64
	done func()
}

// NewWriter returns a Writer over f with depth writes in flight (depth < 1
// means DefaultDepth). f must be open for writing; the Writer opens the
// same file a second time for direct I/O where the filesystem allows it
// and f's name still leads to it (else every write goes through f), and
// never closes f.
func NewWriter(f *os.File, depth int) *Writer {
	if depth < 1 {
		depth = DefaultDepth
	}
	return newWriter(f, openDirect(f), depth)
}

func newWriter(f, direct *os.File, depth int) *Writer {
	w := &Writer{f: f, direct: direct, jobs: make(chan piece, depth)}
	for range depth {
		w.wg.Go(w.loop)
	}
	return w
}

// WriteAt queues b to be written at off and returns, blocking only while
// the queue is full. done, if not nil, is called once b is no longer used,
// whether it was written or skipped; until then the caller must not touch
// b. After a write has failed, later pieces are skipped (Err says why).
func (w *Writer) WriteAt(b []byte, off int64, done func()) {
	w.jobs <- piece{b: b, off: off, done: done}
}

// Err returns the first write error so far, without waiting: a producer
// checks it to stop early.
func (w *Writer) Err() error {
	if !w.bad.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Direct reports whether writes still go around the page cache.
func (w *Writer) Direct() bool { return w.direct != nil && !w.refused.Load() }

// Close waits for every queued piece, closes the direct descriptor and
// returns the first error. The data written through the page cache is not
// synced: that is the caller's (its write-back has been started).
func (w *Writer) Close() error {
	close(w.jobs)
	w.wg.Wait()
	err := w.Err()
	if w.direct != nil {
		err = errors.Join(err, w.direct.Close())
	}
	return err
}

func (w *Writer) loop() {
	for p := range w.jobs {
		if !w.bad.Load() {
			if err := w.write(p.b, p.off); err != nil {
				w.fail(fmt.Errorf("write %d bytes at %d: %w", len(p.b), p.off, err))
			}
		}
		if p.done != nil {
			p.done()
		}
	}
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.bad.Store(true)
}

// write writes one piece directly when it is aligned and the filesystem
// takes it, else through the page cache.
func (w *Writer) write(b []byte, off int64) error {
	if w.Direct() && aligned(b, off) {
		return w.writeDirect(b, off)
	}
	return w.writeCached(b, off)
}

// writeDirect writes b around the page cache; where the filesystem refuses
// that, the same bytes go through the page cache, and so does every later
// piece (a positional rewrite of a partly written piece is harmless).
func (w *Writer) writeDirect(b []byte, off int64) error {
	_, err := w.direct.WriteAt(b, off)
	if err == nil || !isDirectRefused(err) {
		return err
	}
	w.refused.Store(true)
	return w.writeCached(b, off)
}

// writeCached writes b through the page cache and starts its write-back.
func (w *Writer) writeCached(b []byte, off int64) error {
	if _, err := w.f.WriteAt(b, off); err != nil {
		return err
	}
	writeBehind(w.f, off, int64(len(b)))
	return nil
}

func aligned(b []byte, off int64) bool {
	return len(b) > 0 && len(b)%Align == 0 && off%Align == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(b)))%Align == 0
}

// ReadAligned reads len(b) bytes at off from d, a file opened with
// OpenDirectReader, around the page cache, when b and off suit direct
// I/O; it reports false (and reads nothing) when they do not or the
// filesystem refused, so the caller reads through the page cache instead.
// Why: reading a file nobody else reads (an artifact written with direct
// writes, read once to seed another) through the page cache fills it with
// pages nobody wants, which is most of the read's cost on virtual machines.
func ReadAligned(d *os.File, b []byte, off int64) (n int, ok bool, err error) {
	if d == nil || !aligned(b, off) {
		return 0, false, nil
	}
	n, err = d.ReadAt(b, off)
	if err != nil && isDirectRefused(err) {
		return 0, false, nil
	}
	return n, true, err
}
