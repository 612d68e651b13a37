package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cubesandbox/templatecenter/adapters/diskio"
	"github.com/cubesandbox/templatecenter/core/chunk"
)

// An artifact is assembled in one ordered pass, the way a download is
// saved (save.go): the new file is written front to back from pieces of
// saveChunk bytes with direct writes, several in flight, and its sha256
// is computed over the pieces in order as they go to the disk. Each
// chunk's bytes come from the node's own files (read, then checked
// against the chunk's sha256), from a run fetched ahead of the writer, or
// are zeros. Nothing is read back and the page cache is not filled with
// the new file: the work per byte is what a download's is, plus one
// sha256 of each chunk.
//
// Why not write chunks where they belong as they come: a file written out
// of order cannot be hashed as it is written (it had to be read back
// whole), and its pieces are too small for direct writes.

var (
	// aheadBytes bounds the bytes of missing runs fetched and not yet
	// written: memory stays bounded whatever share of the artifact is
	// missing. Variables so tests can shrink the window.
	aheadBytes int64 = fetchers * runBytes
	// aheadRuns bounds how many runs, however small, are fetched ahead.
	aheadRuns = 64
	// maxRefetch is how many chunks the node's own files turned out not
	// to hold any more (changed since they were indexed) are fetched one
	// by one before the assembly gives up for the whole file.
	maxRefetch = 64
)

// assemble writes the artifact into tmp from the seeds and the chunk data
// route, synced, and returns the bytes it fetched. tmp is left for the
// caller to remove on error.
func (c *chunkFetch) assemble(ctx context.Context, tmp string, seeds map[[sha256.Size]byte]seed) (fetched int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f, err := c.a.createFile(tmp)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	chunks := c.x.Chunks
	// from says where each held chunk is (path "" for the others).
	from := make([]seed, len(chunks))
	var missing []int
	for i, e := range chunks {
		if e.Zero {
			continue
		}
		if s, ok := seeds[e.Sum]; ok {
			from[i] = s
			continue
		}
		missing = append(missing, i)
	}
	ahead := c.fetchAhead(ctx, cancel, c.runs(missing))
	var refetched int64
	defer func() { // every return below: fetched is set here
		cancel()
		fetched = ahead.wait() + refetched
	}()
	out := newOrderedWriter(f)
	defer out.abort()
	files := seedFiles{}
	defer files.close()
	scratch := make([]byte, chunk.MaxDataLength)
	stale := 0
	for i, steps := 0, 0; i < len(chunks); steps++ {
		if steps%256 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, ahead.cause(err)
			}
		}
		e := chunks[i]
		switch {
		case e.Zero:
			err = out.zeros(int64(e.Length))
			i++
		case from[i].path != "":
			var n int
			if n, err = c.fromSeeds(files, from, i, out, scratch); err != nil || n > 0 {
				i += n
				break
			}
			// The node's file no longer holds the chunk: fetch it alone.
			if stale++; stale > maxRefetch {
				return 0, fmt.Errorf("more than %d chunks changed in the node's own files since they were indexed", maxRefetch)
			}
			b := scratch[:e.Length]
			var k int64
			k, err = c.fetchRun(ctx, chunkRun{first: i, count: 1}, b)
			refetched += k
			if err == nil {
				err = out.write(b)
			}
			i++
		default:
			var b []byte
			if b, err = ahead.next(ctx, i, e.Length); err == nil {
				err = out.write(b)
			}
			i++
		}
		if err != nil {
			return 0, ahead.cause(err)
		}
	}
	n, sum, err := out.finish()
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", tmp, err)
	}
	if n != c.x.Size || sum != c.j.sha256 {
		return 0, fmt.Errorf("the assembled file does not match the expected sha256 %s", c.j.sha256)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("sync %s: %w", tmp, err)
	}
	return 0, nil
}

// fromSeeds writes chunk i, and the chunks after it that follow it in the
// same file of the node's, from that file: one read for as many as fit in
// the current piece, then each chunk checked. It returns how many chunks
// it wrote; 0 when the file does not hold chunk i any more.
func (c *chunkFetch) fromSeeds(files seedFiles, from []seed, i int, out *orderedWriter, scratch []byte) (int, error) {
	chunks := c.x.Chunks
	s, first := from[i], chunks[i]
	space, err := out.space()
	if err != nil {
		return 0, err
	}
	f := files.open(s.path)
	if f == nil {
		return 0, nil
	}
	if int(first.Length) > len(space) {
		// The chunk straddles two pieces: read and check it aside.
		b := scratch[:first.Length]
		if _, err := f.ReadAt(b, s.off); err != nil || sha256.Sum256(b) != first.Sum {
			return 0, nil
		}
		return 1, out.write(b)
	}
	end := i + 1
	for end < len(chunks) && from[end].path == s.path &&
		from[end].off == s.off+(chunks[end].Offset-first.Offset) &&
		chunks[end].End()-first.Offset <= int64(len(space)) {
		end++
	}
	span := space[:chunks[end-1].End()-first.Offset]
	got, _ := f.ReadAt(span, s.off) // a short read: the chunks it covers are used
	good, n := 0, int64(0)
	for _, e := range chunks[i:end] {
		lo := e.Offset - first.Offset
		if lo+int64(e.Length) > int64(got) || sha256.Sum256(span[lo:lo+int64(e.Length)]) != e.Sum {
			break
		}
		good, n = good+1, e.End()-first.Offset
	}
	out.advance(int(n))
	return good, nil
}

// seedFiles are the node's files chunks are read from, opened once each
// (nil: could not be opened).
type seedFiles map[string]*seedFile

// seedFile is read around the page cache where it can be (direct):
// artifacts are written with direct writes and mostly not cached, and
// the pages a read through the cache would add are pages nobody wants.
type seedFile struct {
	cached, direct *os.File
}

func (s seedFiles) open(p string) *seedFile {
	f, ok := s[p]
	if !ok {
		if c, err := os.Open(p); err == nil {
			f = &seedFile{cached: c, direct: diskio.OpenDirectReader(p)}
		}
		s[p] = f
	}
	return f
}

// ReadAt reads directly when b and off allow it, else through the cache.
func (f *seedFile) ReadAt(b []byte, off int64) (int, error) {
	if n, ok, err := diskio.ReadAligned(f.direct, b, off); ok {
		return n, err
	}
	return f.cached.ReadAt(b, off)
}

func (s seedFiles) close() {
	for _, f := range s {
		if f != nil {
			f.cached.Close()
			if f.direct != nil {
				f.direct.Close()
			}
		}
	}
}

// fetchRun fetches one run into dst, which holds exactly the run's data
// chunks, checking each as it arrives; it returns the bytes received.
func (c *chunkFetch) fetchRun(ctx context.Context, r chunkRun, dst []byte) (int64, error) {
	u := *c.data
	q := u.Query()
	q.Set("first", strconv.Itoa(r.first))
	q.Set("count", strconv.Itoa(r.count))
	u.RawQuery = q.Encode()
	resp, err := c.a.get(ctx, &u, c.j.token)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("chunks %s: HTTP %s", redact(&u), resp.Status)
	}
	var n int64
	for _, e := range c.x.Chunks[r.first : r.first+r.count] {
		if e.Zero {
			continue
		}
		b := dst[n : n+int64(e.Length)]
		k, err := io.ReadFull(resp.Body, b)
		n += int64(k)
		if err != nil {
			return n, fmt.Errorf("chunks %s: the answer ended short: %w", redact(&u), err)
		}
		if sha256.Sum256(b) != e.Sum {
			return n, fmt.Errorf("chunks %s: a chunk does not match its sha256 in the index: %w", redact(&u), chunk.ErrCorrupt)
		}
	}
	return n, nil
}

// ahead fetches the runs of missing chunks, fetchers at once, in the
// order the writer needs them and at most aheadBytes (aheadRuns) ahead of
// it: a run's buffer is let go once the writer has used it.
type ahead struct {
	runs  []chunkRun
	slots []aheadRun
	wg    sync.WaitGroup
	stop  func() bool // stops waking the dispatcher on cancellation

	mu      sync.Mutex
	wake    *sync.Cond // a run was used, or the fetch was cancelled
	used    int64      // bytes of runs handed out and not yet used
	out     int        // runs handed out and not yet used
	fetched int64
	err     error // the first run that failed

	// the writer's side
	k   int // the run being used (-1 before the first)
	pos int // where its next chunk starts in its buffer
}

type aheadRun struct {
	bytes int64
	buf   []byte
	err   error
	done  chan struct{} // closed once buf or err is set
}

// fetchAhead starts fetching runs; cancel is called when one fails, so
// the writer stops at once. Call wait when done.
func (c *chunkFetch) fetchAhead(ctx context.Context, cancel func(), runs []chunkRun) *ahead {
	a := &ahead{runs: runs, slots: make([]aheadRun, len(runs)), k: -1}
	a.wake = sync.NewCond(&a.mu)
	for k, r := range runs {
		for _, e := range c.x.Chunks[r.first : r.first+r.count] {
			if !e.Zero {
				a.slots[k].bytes += int64(e.Length)
			}
		}
		a.slots[k].done = make(chan struct{})
	}
	a.stop = context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.wake.Broadcast()
		a.mu.Unlock()
	})
	work := make(chan int)
	a.wg.Go(func() {
		defer close(work)
		for k := range runs {
			if !a.reserve(ctx, k) {
				return
			}
			select {
			case work <- k:
			case <-ctx.Done():
				return
			}
		}
	})
	for range min(fetchers, len(runs)) {
		a.wg.Go(func() {
			for k := range work {
				s := &a.slots[k]
				buf := make([]byte, s.bytes)
				n, err := c.fetchRun(ctx, runs[k], buf)
				a.mu.Lock()
				a.fetched += n
				if err != nil && a.err == nil {
					a.err = err
				}
				a.mu.Unlock()
				if err != nil {
					cancel()
				}
				s.buf, s.err = buf, err
				close(s.done)
			}
		})
	}
	return a
}

// reserve waits until run k fits in the window; false if ctx ended.
func (a *ahead) reserve(ctx context.Context, k int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.out > 0 && (a.out >= aheadRuns || a.used+a.slots[k].bytes > aheadBytes) && ctx.Err() == nil {
		a.wake.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	a.used += a.slots[k].bytes
	a.out++
	return true
}

// next returns the bytes of missing chunk i (of length n), waiting for
// its run; a run's room in the window is let go with its last chunk.
func (a *ahead) next(ctx context.Context, i int, n uint32) ([]byte, error) {
	if a.k < 0 || i >= a.runs[a.k].first+a.runs[a.k].count {
		a.k++
		// Cannot happen (the runs cover the missing chunks in order, and
		// each run is used up before the next), but a slip must not
		// write wrong bytes.
		if a.k >= len(a.runs) || i < a.runs[a.k].first || (a.k > 0 && a.slots[a.k-1].buf != nil) {
			return nil, fmt.Errorf("chunk %d is not where the runs put it", i)
		}
		s := &a.slots[a.k]
		select {
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if s.err != nil {
			return nil, s.err
		}
		a.pos = 0
	}
	s := &a.slots[a.k]
	if a.pos+int(n) > len(s.buf) {
		return nil, fmt.Errorf("chunk %d is not where the runs put it", i)
	}
	b := s.buf[a.pos : a.pos+int(n)]
	if a.pos += int(n); a.pos == len(s.buf) {
		a.release(a.k) // b stays valid: the buffer is the garbage collector's
	}
	return b, nil
}

// release lets go of run k's buffer and its room in the window.
func (a *ahead) release(k int) {
	a.mu.Lock()
	a.used -= a.slots[k].bytes
	a.out--
	a.slots[k].buf = nil
	a.wake.Broadcast()
	a.mu.Unlock()
}

// cause is the first failed run's error if there is one (it cancelled
// the assembly), else err.
func (a *ahead) cause(err error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	return err
}

// wait waits for the fetchers (the context cancelled, or every run
// fetched) and returns the bytes received.
func (a *ahead) wait() int64 {
	a.wg.Wait()
	a.stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fetched
}

// orderedWriter writes a file front to back from pieces of saveChunk
// bytes (diskio.Buffers, as saveFile): the caller fills the current piece
// (space, advance, or write and zeros); a full piece is hashed and queued
// for a direct write by a goroutine of its own, so filling the next piece
// overlaps both.
type orderedWriter struct {
	dw     *diskio.Writer
	mem    *diskio.Buffers
	free   chan []byte
	full   chan filled
	hashed chan struct{} // closed when the hashing goroutine has ended
	h      hash.Hash
	skip   atomic.Bool // aborted: pieces go back unwritten

	cur    []byte // the piece being filled, nil when none
	pos    int    // bytes of cur filled
	off    int64  // cur's offset in the file
	closed bool
}

type filled struct {
	b, piece []byte
	off      int64
}

func newOrderedWriter(f *os.File) *orderedWriter {
	w := &orderedWriter{
		mem:    diskio.NewBuffers(saveBuffers, saveChunk),
		free:   make(chan []byte, saveBuffers),
		full:   make(chan filled, 1),
		hashed: make(chan struct{}),
		h:      sha256.New(),
	}
	for _, b := range w.mem.Pieces() {
		w.free <- b
	}
	w.dw = diskio.NewWriter(f, diskio.DefaultDepth)
	go w.hash()
	return w
}

func (w *orderedWriter) hash() {
	defer close(w.hashed)
	for p := range w.full {
		if w.skip.Load() {
			w.free <- p.piece
			continue
		}
		w.h.Write(p.b)
		w.dw.WriteAt(p.b, p.off, func() { w.free <- p.piece })
	}
}

// space is the rest of the current piece (a new one if there is none);
// an error if a write has failed.
func (w *orderedWriter) space() ([]byte, error) {
	if w.cur == nil {
		if err := w.dw.Err(); err != nil {
			return nil, err
		}
		w.cur, w.pos = <-w.free, 0
	}
	return w.cur[w.pos:], nil
}

// advance marks n more bytes of the current piece filled.
func (w *orderedWriter) advance(n int) {
	w.pos += n
	if w.pos == len(w.cur) {
		w.flush()
	}
}

func (w *orderedWriter) flush() {
	w.full <- filled{b: w.cur[:w.pos], piece: w.cur, off: w.off}
	w.off += int64(w.pos)
	w.cur = nil
}

// write appends b.
func (w *orderedWriter) write(b []byte) error {
	for len(b) > 0 {
		s, err := w.space()
		if err != nil {
			return err
		}
		k := copy(s, b)
		w.advance(k)
		b = b[k:]
	}
	return nil
}

// zeros appends n zero bytes: written, as a download writes them, so the
// file is the same on disk (no holes).
func (w *orderedWriter) zeros(n int64) error {
	for n > 0 {
		s, err := w.space()
		if err != nil {
			return err
		}
		k := int(min(int64(len(s)), n))
		clear(s[:k])
		w.advance(k)
		n -= int64(k)
	}
	return nil
}

// finish writes what is left, waits for every write, and returns the
// bytes written and their sha256 in lower-case hex.
func (w *orderedWriter) finish() (int64, string, error) {
	if w.cur != nil && w.pos > 0 {
		w.flush()
	}
	if err := w.close(); err != nil {
		return w.off, "", err
	}
	return w.off, hex.EncodeToString(w.h.Sum(nil)), nil
}

// abort stops writing: pieces not yet written are dropped. It does
// nothing after finish.
func (w *orderedWriter) abort() {
	if !w.closed {
		w.skip.Store(true)
		_ = w.close()
	}
}

// close waits for the hashing goroutine and every write, then returns
// the pieces' memory (no write may be in flight by then).
func (w *orderedWriter) close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.cur != nil {
		w.free <- w.cur
		w.cur = nil
	}
	close(w.full)
	<-w.hashed
	err := w.dw.Close()
	w.mem.Release()
	return err
}
