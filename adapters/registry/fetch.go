package registry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/regclient/regclient"
	"github.com/regclient/regclient/types/ref"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// zstdMaxWindow caps the zstd window while computing DiffIDs (klauspost's
// own default is 512 MiB; real layers use 8 MiB, "--long" 128 MiB).
const zstdMaxWindow = 256 << 20

// diffIDLabel is the cache label holding a blob's DiffID, so cache hits
// skip decompressing the layer again.
func diffIDLabel(alg digest.Algorithm) string { return "diff_id." + alg.String() }

// FetchLayers makes every layer of img a verified file in the cache and
// returns them in manifest order. The layers stay pinned against eviction
// until ctx ends, so pass the build's context (a context that never ends,
// such as context.Background(), pins nothing beyond the call). Use
// FetchLayersLeased to release explicitly.
func (s *Source) FetchLayers(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
	layers, release, err := s.FetchLayersLeased(ctx, req, img, progress)
	if err != nil {
		return nil, err
	}
	if ctx.Done() == nil {
		release()
	} else {
		context.AfterFunc(ctx, release)
	}
	return layers, nil
}

// FetchLayersLeased is FetchLayers with the pin made explicit: the layer
// files are not evicted before release is called.
func (s *Source) FetchLayersLeased(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) (layers []ports.LocalLayer, release func(), err error) {
	layers, release, err = s.fetchLayers(ctx, req, img, progress)
	return layers, release, newSecrets(req.Username, req.Password).clean(err)
}

// prepareFetch checks a resolved image before its layers are fetched:
// its reference pinned to the resolved digest, the credentials, the layer
// descriptors and rootfs, and (for a registry) the host's address; it
// returns the pinned reference, the layers and the client to use.
func (s *Source) prepareFetch(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage) (ref.Ref, []ocispec.Descriptor, *regclient.RegClient, error) {
	var none ref.Ref
	if img == nil {
		return none, nil, nil, fmt.Errorf("registry: no resolved image: %w", core.ErrInvalidArgument)
	}
	r, err := s.parseRef(img.Ref)
	if err != nil {
		return none, nil, nil, err
	}
	manDigest, err := checkDigest(img.Digest)
	if err != nil {
		return none, nil, nil, fmt.Errorf("resolved image digest: %v: %w", err, core.ErrInvalidArgument)
	}
	r = r.SetDigest(manDigest.String())
	if err := checkCreds(req); err != nil {
		return none, nil, nil, err
	}
	layers, err := s.checkLayers(img.Layers)
	if err != nil {
		return none, nil, nil, fmt.Errorf("%s: %w", img.Ref, err)
	}
	if err := checkRootFS(&img.Config, len(layers)); err != nil {
		return none, nil, nil, fmt.Errorf("%s: %w", img.Ref, err)
	}
	if r.Scheme == "reg" {
		if err := s.precheckHost(ctx, r); err != nil {
			return none, nil, nil, err
		}
	}
	return r, layers, s.client(r, req), nil
}

func (s *Source) fetchLayers(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, func(), error) {
	r, layers, rc, err := s.prepareFetch(ctx, req, img)
	if err != nil {
		return nil, nil, err
	}

	// One job per distinct blob: an image may list the same layer twice.
	type job struct {
		desc    ocispec.Descriptor
		indexes []int
	}
	var jobs []*job
	byDigest := map[digest.Digest]*job{}
	for i, d := range layers {
		if j, ok := byDigest[d.Digest]; ok {
			j.indexes = append(j.indexes, i)
			continue
		}
		j := &job{desc: d, indexes: []int{i}}
		byDigest[d.Digest] = j
		jobs = append(jobs, j)
	}
	lease, err := s.opts.Cache.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, j := range jobs {
		if err := lease.Pin(ctx, j.desc.Digest); err != nil {
			lease.Release()
			return nil, nil, err
		}
	}

	prog := newProgress(layers, progress)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([]ports.LocalLayer, len(layers))
	sem := make(chan struct{}, s.opts.Concurrency)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel(err)
		}
		errMu.Unlock()
	}
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			path, err := s.ensureBlob(ctx, rc, r, j.desc, prog)
			if err != nil {
				fail(fmt.Errorf("%s: %w", layerName(j.indexes[0], len(layers), j.desc.Digest), err))
				return
			}
			for _, i := range j.indexes {
				want := img.Config.RootFS.DiffIDs[i]
				diff, err := s.diffID(ctx, path, j.desc, want.Algorithm())
				if err != nil {
					fail(fmt.Errorf("%s: diff_id: %w", layerName(i, len(layers), j.desc.Digest), err))
					return
				}
				if diff != want {
					fail(fmt.Errorf("%s: uncompressed digest %s but config rootfs.diff_ids[%d] is %s: %w",
						layerName(i, len(layers), j.desc.Digest), diff, i, want, ErrDiffIDMismatch))
					return
				}
				out[i] = ports.LocalLayer{Descriptor: layers[i], DiffID: diff.String(), Path: path}
			}
			prog.layersDone(len(j.indexes))
		}()
	}
	wg.Wait()
	if firstErr == nil && context.Cause(ctx) != nil {
		firstErr = context.Cause(ctx)
	}
	if firstErr != nil {
		lease.Release()
		return nil, nil, firstErr
	}
	prog.emit(true)
	return out, lease.Release, nil
}

// ensureBlob returns the cached path of d, downloading it if needed with
// retries that resume from the bytes already on disk.
func (s *Source) ensureBlob(ctx context.Context, rc *regclient.RegClient, r ref.Ref, d ocispec.Descriptor, prog *progress) (string, error) {
	return s.ensureBlobWith(ctx, rc, r, d, prog, nil)
}

// ensureBlobWith is ensureBlob telling st (when set) where the bytes are
// as they are written.
func (s *Source) ensureBlobWith(ctx context.Context, rc *regclient.RegClient, r ref.Ref, d ocispec.Descriptor, prog *progress, st *blobStream) (string, error) {
	p, ok, err := s.opts.Cache.Get(d.Digest)
	if err != nil {
		return "", err
	}
	if s.opts.Observer != nil {
		s.opts.Observer.LayerCacheLookup(ok)
	}
	if ok {
		s.log.DebugContext(ctx, "layer cache hit", "digest", d.Digest.String())
		prog.set(d.Digest, d.Size, 0)
		return p, nil
	}
	delay := s.opts.RetryDelay
	for attempt := 0; ; attempt++ {
		p, err := s.downloadOnce(ctx, rc, r, d, prog, st)
		if err == nil {
			return p, nil
		}
		var resumeErr *resumeError
		again := errors.As(err, &resumeErr)
		err = shortCause(classify(err, ""))
		again = again || retryable(err)
		if !again || attempt >= s.opts.Retries || ctx.Err() != nil {
			return "", err
		}
		s.log.DebugContext(ctx, "layer download failed, retrying", "digest", d.Digest.String(),
			"attempt", attempt+1, "err", err.Error())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", err
		case <-t.C:
		}
		delay = min(2*delay, s.opts.RetryMaxDelay)
	}
}

// resumeError marks a verification failure of a resumed download: the
// bytes kept from an earlier attempt may be the bad ones (a crash mid-write),
// so the partial is dropped and the next attempt, from byte 0, deserves a
// retry even though a mismatch is otherwise final.
type resumeError struct{ err error }

func (e *resumeError) Error() string { return "resumed download discarded: " + e.err.Error() }
func (e *resumeError) Unwrap() error { return e.err }

// downloadOnce makes one attempt at fetching d into the cache.
func (s *Source) downloadOnce(ctx context.Context, rc *regclient.RegClient, r ref.Ref, d ocispec.Descriptor, prog *progress, st *blobStream) (string, error) {
	w, path, err := s.opts.Cache.Begin(ctx, d.Digest, d.Size)
	if err != nil {
		return "", err
	}
	if w == nil { // another writer finished it while we waited
		prog.set(d.Digest, d.Size, 0)
		return path, nil
	}
	defer w.Close() // keeps the partial file for the next attempt
	off := w.Offset()
	prog.set(d.Digest, off, 0)
	if st != nil {
		st.attach(w.Name(), off)
	}
	if off == d.Size {
		p, err := w.Commit()
		if err != nil {
			return "", &resumeError{err}
		}
		return p, nil
	}
	if off > 0 {
		s.log.DebugContext(ctx, "resuming layer download", "digest", d.Digest.String(), "offset", off, "size", d.Size)
	}
	if off == 0 {
		// regclient's reader checks size and digest as it reaches EOF, and
		// only a clean EOF below leads to Commit: the cache need not hash
		// the same bytes again. A resumed file keeps the cache's own hash,
		// which is the only one that covers the prefix as it is on disk.
		w.SkipHash()
	}
	hint := &blobHint{digest: d.Digest.String(), size: d.Size, offset: off, prefix: w}
	br, err := rc.BlobGet(withBlobHint(ctx, hint), r, regDesc(d))
	if err != nil {
		return "", err
	}
	defer br.Close()
	// The stream starts at byte 0 either way: our own prefix replayed by
	// the transport, or the whole blob from a server that ignored Range.
	if off > 0 {
		if _, err := io.CopyN(io.Discard, br, off); err != nil {
			return "", err
		}
	}
	buf := make([]byte, 256<<10)
	cur := off
	for {
		n, rerr := br.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return "", err
			}
			cur += int64(n)
			prog.set(d.Digest, cur, int64(n))
			if st != nil {
				st.wrote(cur)
			}
			if s.opts.Observer != nil {
				s.opts.Observer.LayerBytesPulled(int64(n))
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// regclient checks size and digest at EOF; a mismatch after a
			// resume may be the old prefix's fault.
			if isContentErr(rerr) {
				w.Abort()
				if off > 0 {
					return "", &resumeError{rerr}
				}
			}
			return "", rerr
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
	}
	if cur < d.Size {
		// Not a content error: the stream ended early. Keep what we have.
		return "", fmt.Errorf("stream ended after %d of %d bytes", cur, d.Size)
	}
	p, err := w.Commit()
	if err != nil {
		if off > 0 && isContentErr(err) {
			return "", &resumeError{err}
		}
		return "", err
	}
	s.log.DebugContext(ctx, "layer downloaded", "digest", d.Digest.String(), "size", d.Size, "resumed_from", off)
	return p, nil
}

func isContentErr(err error) bool {
	return errors.Is(classify(err, ""), ErrDigestMismatch)
}

// diffID returns the digest of the decompressed layer at path, from the
// cache label when an earlier fetch computed it.
func (s *Source) diffID(ctx context.Context, path string, d ocispec.Descriptor, alg digest.Algorithm) (digest.Digest, error) {
	if !alg.Available() {
		return "", rejectf("diff_id algorithm %q", alg)
	}
	key := diffIDLabel(alg)
	if labels, err := s.opts.Cache.Labels(d.Digest); err == nil {
		if v, ok := labels[key]; ok {
			if dd, err := digest.Parse(v); err == nil {
				return dd, nil
			}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var rd io.Reader = &ctxReader{ctx: ctx, r: bufio.NewReaderSize(f, 1<<20)}
	switch layerTypes[d.MediaType] {
	case compGzip:
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return "", rejectf("layer is not gzip although its media type says so: %v", err)
		}
		defer zr.Close()
		rd = zr
	case compZstd:
		zr, err := zstd.NewReader(rd, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return "", rejectf("layer is not zstd although its media type says so: %v", err)
		}
		defer zr.Close()
		rd = zr
	}
	if lim := s.opts.Limits.MaxUncompressedLayerBytes; lim > 0 {
		rd = &capReader{r: rd, left: lim}
	}
	h := alg.Hash()
	if _, err := io.Copy(h, rd); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if errors.Is(err, ErrImageRejected) {
			return "", err
		}
		return "", rejectf("decompressing layer: %v", err)
	}
	dd := digest.NewDigest(alg, h)
	if err := s.opts.Cache.SetLabel(d.Digest, key, dd.String()); err != nil {
		s.log.DebugContext(ctx, "cannot store diff_id label", "digest", d.Digest.String(), "err", err.Error())
	}
	return dd, nil
}

// ctxReader stops a long local read when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// capReader fails once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, rejectf("layer decompresses to more than the configured limit")
	}
	return n, err
}

// progress aggregates per-blob byte counts into PullProgress reports.
type progress struct {
	mu        sync.Mutex
	cb        func(ports.PullProgress)
	have      map[digest.Digest]int64
	total     int64
	layers    int
	completed int
	network   int64
	start     time.Time
	last      time.Time
}

func newProgress(layers []ocispec.Descriptor, cb func(ports.PullProgress)) *progress {
	p := &progress{cb: cb, have: map[digest.Digest]int64{}, layers: len(layers), start: time.Now()}
	seen := map[digest.Digest]bool{}
	for _, l := range layers {
		if !seen[l.Digest] {
			seen[l.Digest] = true
			p.total += l.Size
		}
	}
	return p
}

// set records that cur bytes of d are present, net of them just came from
// the network.
func (p *progress) set(d digest.Digest, cur, net int64) {
	p.mu.Lock()
	p.have[d] = cur
	p.network += net
	p.mu.Unlock()
	p.emit(false)
}

func (p *progress) layersDone(n int) {
	p.mu.Lock()
	p.completed += n
	p.mu.Unlock()
	p.emit(true)
}

// emit reports at most every 100ms, and always when forced.
func (p *progress) emit(force bool) {
	if p.cb == nil {
		return
	}
	p.mu.Lock()
	now := time.Now()
	if !force && now.Sub(p.last) < 100*time.Millisecond {
		p.mu.Unlock()
		return
	}
	p.last = now
	var done int64
	for _, v := range p.have {
		done += v
	}
	pp := ports.PullProgress{TotalBytes: p.total, DownloadedBytes: done, TotalLayers: p.layers, CompletedLayers: p.completed}
	if el := now.Sub(p.start).Seconds(); el > 0 {
		pp.SpeedBPS = int64(float64(p.network) / el)
	}
	// Called under the lock so reports arrive in order.
	p.cb(pp)
	p.mu.Unlock()
}
