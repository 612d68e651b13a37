package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cubesandbox/templatecenter/ports"
)

var _ ports.ImageSource = (*Source)(nil)

// StreamLayers implements ports.ImageSource: every distinct blob is
// fetched at once (bounded by Options.Concurrency) into the cache, and
// each layer's Blob follows its download through the partial file, so a
// decoder reads the bytes as they land, from the page cache, and hands the
// pages it has read back to the kernel (dropBehind). DiffIDs are left to
// the decoder.
func (s *Source) StreamLayers(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
	out, wait, err := s.streamLayers(ctx, req, img, progress)
	if err != nil {
		return nil, nil, newSecrets(req.Username, req.Password).clean(err)
	}
	return out, wait, nil
}

func (s *Source) streamLayers(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
	// A call that is already cancelled starts nothing: blobs in the cache
	// would otherwise be handed over as if it were not.
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("fetch layers: %w", err)
	}
	r, layers, rc, err := s.prepareFetch(ctx, req, img)
	if err != nil {
		return nil, nil, err
	}
	lease, err := s.opts.Cache.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	streams := map[digest.Digest]*blobStream{}
	var order []ocispec.Descriptor
	for _, d := range layers {
		if _, ok := streams[d.Digest]; ok {
			continue
		}
		if err := lease.Pin(ctx, d.Digest); err != nil {
			lease.Release()
			return nil, nil, err
		}
		streams[d.Digest] = newBlobStream()
		order = append(order, d)
	}
	// A ctx that can never end would never end the lease, so wait
	// releases it. Decided here, on the caller's ctx: the one derived
	// from it below always has a Done channel.
	releaseInWait := ctx.Done() == nil
	if !releaseInWait {
		context.AfterFunc(ctx, lease.Release)
	}

	prog := newProgress(layers, progress)
	ctx, cancel := context.WithCancelCause(ctx)
	paths := map[digest.Digest]string{}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.opts.Concurrency)
	for _, d := range order {
		st := streams[d.Digest]
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				// wait must fail too: this layer has no path.
				err := context.Cause(ctx)
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				st.finish("", err)
				return
			}
			defer func() { <-sem }()
			p, err := s.ensureBlobWith(ctx, rc, r, d, prog, st)
			if err != nil {
				i := slices.IndexFunc(layers, func(l ocispec.Descriptor) bool { return l.Digest == d.Digest })
				err = fmt.Errorf("%s: %w", layerName(i, len(layers), d.Digest), err)
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel(err)
				}
				mu.Unlock()
				st.finish("", err)
				return
			}
			st.finish(p, nil)
			mu.Lock()
			paths[d.Digest] = p
			mu.Unlock()
			n := 0
			for _, l := range layers {
				if l.Digest == d.Digest {
					n++
				}
			}
			prog.layersDone(n)
		})
	}

	out := make([]ports.StreamedLayer, len(layers))
	for i, d := range layers {
		sl := ports.StreamedLayer{Descriptor: d, DiffID: img.Config.RootFS.DiffIDs[i].String(), Blob: streams[d.Digest].reader()}
		if dc, err := s.opts.Cache.Derived(d.Digest); err == nil {
			sl.Derived = dc
		}
		out[i] = sl
	}
	var once sync.Once
	var local []ports.LocalLayer
	var werr error
	wait := func() ([]ports.LocalLayer, error) {
		once.Do(func() {
			wg.Wait()
			cancel(nil)
			if releaseInWait {
				lease.Release()
			}
			if firstErr != nil {
				werr = newSecrets(req.Username, req.Password).clean(firstErr)
				return
			}
			prog.emit(true)
			for i, d := range layers {
				local = append(local, ports.LocalLayer{Descriptor: d, DiffID: img.Config.RootFS.DiffIDs[i].String(), Path: paths[d.Digest]})
			}
		})
		return local, werr
	}
	return out, wait, nil
}

// errRestarted fails a stream whose download had to start over after its
// reader had consumed bytes that are now gone.
var errRestarted = errors.New("layer download started over after a verification failure; its bytes already read are void")

// blobStream is one blob being fetched, as its readers see it: the file
// holding the bytes so far and how many there are.
type blobStream struct {
	mu    sync.Mutex
	cond  *sync.Cond
	file  string // partial file while downloading, then the blob
	avail int64
	done  bool
	err   error
}

func newBlobStream() *blobStream {
	b := &blobStream{}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// attach points the stream at a download attempt that starts at off.
func (b *blobStream) attach(file string, off int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < b.avail && b.err == nil {
		b.err = errRestarted
	}
	b.file, b.avail = file, off
	b.cond.Broadcast()
}

// wrote records that n bytes from the start are in the file.
func (b *blobStream) wrote(n int64) {
	b.mu.Lock()
	if n > b.avail {
		b.avail = n
		b.cond.Broadcast()
	}
	b.mu.Unlock()
}

// finish ends the stream: the verified blob at path, or err.
func (b *blobStream) finish(path string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || b.err != nil {
		return
	}
	if err != nil {
		b.err = err
	} else {
		b.done, b.file = true, path
		if st, serr := os.Stat(path); serr == nil {
			b.avail = st.Size()
		}
	}
	b.cond.Broadcast()
}

func (b *blobStream) reader() *blobReader { return &blobReader{s: b} }

// blobReader reads a blobStream from the start.
type blobReader struct {
	s      *blobStream
	f      *os.File
	pos    int64
	closed bool // under s.mu: Close wakes a Read that waits for bytes
	// dropped is how far the bytes already read have been handed back
	// to the kernel (see dropBehind).
	dropped int64
}

// dropEvery is how many bytes a reader reads between two dropBehind calls.
const dropEvery = 8 << 20

// dropBehind drops the cached pages of what the reader has read from f,
// every dropEvery bytes. The decoder reads each byte of the compressed
// blob once and nothing else in a build reads it again (a later build of
// the same layer uses the decoded copy), so those pages only hold memory;
// freed while the build runs, they are reused by its next page-cache
// writes (the decoded content), which on a VM whose host takes freed
// memory back costs a fraction of filling new memory. Pages not yet
// written back are kept (their write-back starts); Close drops them.
func (r *blobReader) dropBehind(f *os.File) {
	if r.pos-r.dropped >= dropEvery {
		dropCached(f, r.dropped, r.pos-r.dropped)
		r.dropped = r.pos
	}
}

var errReaderClosed = errors.New("layer stream closed")

func (r *blobReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s := r.s
	s.mu.Lock()
	for r.pos >= s.avail && !s.done && s.err == nil && !r.closed {
		s.cond.Wait()
	}
	avail, done, err, file, closed, f := s.avail, s.done, s.err, s.file, r.closed, r.f
	s.mu.Unlock()
	if closed {
		return 0, errReaderClosed
	}
	if err != nil {
		return 0, err
	}
	if r.pos >= avail {
		if done {
			return 0, io.EOF
		}
		return 0, io.ErrUnexpectedEOF
	}
	if f == nil {
		if f, err = r.open(file); err != nil {
			return 0, err
		}
		s.mu.Lock()
		if r.closed {
			s.mu.Unlock()
			f.Close()
			return 0, errReaderClosed
		}
		r.f = f
		s.mu.Unlock()
	}
	n := int(min(int64(len(p)), avail-r.pos))
	n, rerr := f.ReadAt(p[:n], r.pos)
	r.pos += int64(n)
	if rerr == io.EOF && n > 0 {
		rerr = nil
	}
	r.dropBehind(f)
	return n, rerr
}

// open opens the stream's file. The partial file is renamed into place
// when the download commits, and the stream learns the new name a moment
// later: a reader that misses the old name waits for the new one.
func (r *blobReader) open(file string) (*os.File, error) {
	for {
		f, err := os.Open(file)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		s := r.s
		s.mu.Lock()
		for s.file == file && !s.done && s.err == nil && !r.closed {
			s.cond.Wait()
		}
		next, serr, closed := s.file, s.err, r.closed
		s.mu.Unlock()
		switch {
		case closed:
			return nil, errReaderClosed
		case serr != nil:
			return nil, serr
		case next == file:
			return nil, err
		}
		file = next
	}
}

// Close may be called while another goroutine is in Read: a Read waiting
// for bytes returns at once.
func (r *blobReader) Close() error {
	r.s.mu.Lock()
	r.closed = true
	f := r.f
	r.f = nil
	r.s.cond.Broadcast()
	r.s.mu.Unlock()
	if f != nil {
		dropCached(f, 0, 0) // what was still being written back
		return f.Close()
	}
	return nil
}
