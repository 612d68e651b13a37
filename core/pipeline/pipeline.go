package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Epoch is the fixed time builders stamp on anything they invent when the
// image config records no creation time, so that identical inputs give
// identical images.
var Epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// buildTime is the builder's fixed time for an image: its recorded creation
// time (a property of the digest, like SOURCE_DATE_EPOCH), else Epoch.
// Builders clamp mtimes to it, so files keep their real mtimes and nothing
// in the image is newer than the image itself.
func buildTime(img *ports.ResolvedImage) time.Time {
	if c := img.Config.Created; c != nil && !c.IsZero() && c.Unix() > 0 {
		return c.UTC().Truncate(time.Second)
	}
	return Epoch
}

// Pipeline is the data plane's build: one value serves many builds.
type Pipeline struct {
	Source    ports.ImageSource
	Flattener ports.TreeFlattener
	Builder   ports.RootfsBuilder
	// Store, when set, receives the artifact under ArtifactKey.
	Store ports.ArtifactStore
	// Chunks, when set with Store, also receives the artifact as chunks
	// and an index under the same key, while Store takes the whole file
	// (both read the image at once, each on its own core): nodes then
	// fetch only the chunks they lack. Its failure does not fail the
	// build (Result.ChunksErr): nodes then download the whole file.
	Chunks ports.ChunkStore
	// ChunksWait, when positive, is how long a build may wait for its
	// chunk publish once the whole file is published, as a share of the
	// build's time so far, and it waits only when the publish looks like
	// ending within that (ChunksWaitFor): a rebuild on a known base,
	// whose chunks are mostly stored, waits the moment its index needs;
	// one of chunks all new to the store (slow: thousands of new
	// objects, and no node holds them anyway) goes on after the build
	// (Result.ChunksLate), nodes taking the whole file until its index is
	// written. Zero waits for it to end.
	ChunksWait float64
	Clock      ports.Clock
	// ScratchDir holds per-build scratch directories (removed on exit).
	ScratchDir     string
	HeadroomBytes  int64
	HeadroomInodes int64
	MaxSizeBytes   int64
}

// Input is one build.
type Input struct {
	Image ports.ImageRequest
	// Request is the normalized from-image request; its spec fields feed the
	// fingerprint. The zero value means a bare image build with upstream's
	// defaults.
	Request core.NormalizedRequest
	Inject  Injection
	// OutPath, when set, is where the image is kept; otherwise it lives in
	// scratch only until it is published to Store. The builder writes it
	// in a stage directory beside OutPath (OutStagePrefix), renamed onto
	// OutPath once hashed and stored: the last step, so a failed build
	// never touches a file already there.
	OutPath string
	// AfterResolve, when set, runs once the digest and fingerprint are
	// known, before any layer is fetched. An error stops the build and Run
	// returns it unchanged (scratch removed, nothing published). The data
	// plane uses it to take the fingerprint lock, claim the artifact row,
	// or skip a build whose artifact already exists.
	AfterResolve func(ctx context.Context, r Resolved) error
}

// Result is a finished build.
type Result struct {
	Image       *ports.ResolvedImage
	Fingerprint string
	ArtifactID  string
	SHA256      string
	SizeBytes   int64
	// Path is the local image (Input.OutPath, or "" when only in Store).
	Path string
	// ObjectKey is the artifact store key ("" without a Store).
	ObjectKey string
	// ChunksErr is why the artifact was not published as chunks (nil when
	// it was, or without a chunk store).
	ChunksErr error
	// ChunksLate, when set, yields the outcome of the chunk publish that
	// outlived the build (Pipeline.ChunksWait), once it ends; an artifact
	// deleted meanwhile has its index removed again, and the error says
	// so.
	ChunksLate <-chan error
	Layers     int
	Tree       ports.TreeStats
	// CA is what baking the CubeEgress root CA did (zero without one).
	CA CAResult
	// Phases holds the wall time of each step.
	Phases map[core.Phase]time.Duration
}

// Event is a progress report.
type Event struct {
	Phase    core.Phase
	Progress int
	Pull     core.PullProgress
	// Resolved is set once, when the image digest and fingerprint are known.
	Resolved *Resolved
}

// Resolved is what is known right after resolution.
type Resolved struct {
	ImageDigest string
	Fingerprint string
	ArtifactID  string
	// Inputs are what the fingerprint was computed from beyond the
	// request (the BUILT report carries them).
	Inputs core.BuildInputs
}

// Run executes the build. onEvent may be nil; it is called from one
// goroutine at a time. On any error OutPath is as Run found it (absent, or
// an earlier image, kept), scratch space is removed, and nothing is
// published, except when the image cannot be moved onto OutPath once the
// store has taken it (the stored object, verified, stays).
func (p *Pipeline) Run(ctx context.Context, in Input, onEvent func(Event)) (res *Result, err error) {
	runStart := p.now()
	if onEvent == nil {
		onEvent = func(Event) {}
	}
	// The download's progress, the end of the download and the builder's
	// progress come from different goroutines.
	var eventMu sync.Mutex
	emit := onEvent
	onEvent = func(e Event) {
		eventMu.Lock()
		defer eventMu.Unlock()
		emit(e)
	}
	// Everything this build holds (pinned cache entries, child processes)
	// is tied to this context and released when Run returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := in.Request
	if req.IsZero() {
		bare := &core.FromImageRequest{SourceImageRef: in.Image.Ref, WritableLayerSize: "1Gi", TemplateID: "one-shot"}
		if req, err = core.NormalizeFromImageRequest(bare, nil); err != nil {
			return nil, err
		}
	}
	if in.Image.Platform == "" {
		in.Image.Platform = req.Request().Platform
	}
	inj, err := in.Inject.digests()
	if err != nil {
		return nil, err
	}

	scratch, err := os.MkdirTemp(p.ScratchDir, "build-")
	if err != nil {
		return nil, fmt.Errorf("create scratch dir: %w", err)
	}
	// Held while the build runs, so the data plane's sweep can remove the
	// directory of a build whose process was killed without waiting hours.
	unlock, err := lockScratch(scratch)
	if err != nil {
		os.RemoveAll(scratch)
		return nil, fmt.Errorf("lock scratch dir: %w", err)
	}
	defer unlock() // after the removal below (deferred calls run last first)
	defer os.RemoveAll(scratch)

	res = &Result{Phases: map[core.Phase]time.Duration{}}
	timed := func(ph core.Phase, start time.Time) { res.Phases[ph] += p.since(start) }

	// Resolve the tag to a digest before anything else: the digest, never
	// the tag, decides reuse.
	start := p.now()
	onEvent(Event{Phase: core.PhasePulling, Progress: 5})
	img, err := p.Source.Resolve(ctx, in.Image)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", in.Image.Ref, err)
	}
	res.Image = img
	inputs := core.BuildInputs{SourceImageDigest: img.Digest, CAFingerprint: inj.caFingerprint(), EnvdSHA256: inj.envdSHA256,
		BuilderFormat: core.BuilderFormatVersion, Builder: p.Builder.Format()}
	fp, err := core.FingerprintOf(req, inputs)
	if err != nil {
		return nil, err
	}
	aid, err := core.ArtifactIDFor(fp)
	if err != nil {
		return nil, err
	}
	res.Fingerprint, res.ArtifactID = fp, aid
	resolved := Resolved{ImageDigest: img.Digest, Fingerprint: fp, ArtifactID: aid, Inputs: inputs}
	onEvent(Event{Phase: core.PhasePulling, Progress: 5, Resolved: &resolved})
	if in.AfterResolve != nil {
		if err := in.AfterResolve(ctx, resolved); err != nil {
			return nil, err
		}
	}

	pullProgress := func(pp ports.PullProgress) {
		onEvent(Event{Phase: core.PhasePulling, Progress: 5 + pullShare(pp), Pull: core.PullProgress(pp)})
	}
	out := filepath.Join(scratch, aid+".ext4")
	var stage *Stage
	if in.OutPath != "" {
		// The builder writes in a held directory beside OutPath, so that
		// a killed build leaves nothing the next one cannot remove.
		if stage, err = NewStage(in.OutPath, OutStagePrefix); err != nil {
			return nil, err
		}
		defer stage.Remove()
		out = stage.Path(in.OutPath)
	}
	// Decoding follows the download: the flattener reads each layer as it
	// lands, and the builder writes as soon as the tree is known.
	tree, buildRes, err := p.streamedBuild(ctx, in, inj.ca, img, scratch, out, fp, res, start, pullProgress, onEvent)
	if err != nil {
		return nil, err
	}
	res.Tree = tree

	start = p.now()
	var sum string
	var size int64
	if buildRes.SHA256 != "" {
		// The builder hashed the image as it wrote it.
		st, err := os.Stat(out)
		if err != nil {
			return nil, err
		}
		sum, size = buildRes.SHA256, st.Size()
	} else if sum, size, err = hashFile(ctx, out); err != nil {
		return nil, err
	}
	if size != buildRes.SizeBytes {
		return nil, fmt.Errorf("%w: %s reported %d bytes, the file has %d", errBuilderSize, p.Builder.Name(), buildRes.SizeBytes, size)
	}
	timed(core.PhaseGeneratingJSON, start)
	res.SHA256, res.SizeBytes = sum, size
	if p.Store != nil {
		start = p.now()
		onEvent(Event{Phase: core.PhaseUploading, Progress: 80})
		if res.ChunksErr, res.ChunksLate, err = p.publish(ctx, out, aid, sum, size, p.since(runStart)); err != nil {
			return nil, err
		}
		res.ObjectKey = core.ArtifactObjectKey(aid)
		timed(core.PhaseUploading, start)
	}
	// Last: until here a failure leaves OutPath as it was.
	if stage != nil {
		if err := stage.Publish(in.OutPath); err != nil {
			return nil, err
		}
		res.Path = in.OutPath
	}
	onEvent(Event{Phase: core.PhaseReady, Progress: 100})
	return res, nil
}

// streamedBuild is the build: the layers are flattened while they
// download, and the pull phase is the time until the last one arrived (it
// overlaps BUILDING_EXT4, which runs from the first byte to the written
// image).
func (p *Pipeline) streamedBuild(ctx context.Context, in Input, ca *core.CubeCA, img *ports.ResolvedImage,
	scratch, out, fp string, res *Result, start time.Time, pullProgress func(ports.PullProgress), onEvent func(Event)) (ports.TreeStats, ports.BuildResult, error) {
	var tree ports.TreeStats
	var br ports.BuildResult
	// The fetch ends with the build: its pins are not needed once the
	// image is written, and a failed build stops the downloads.
	fetchCtx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	streams, wait, err := p.Source.StreamLayers(fetchCtx, in.Image, img, pullProgress)
	if err != nil {
		return tree, br, fmt.Errorf("fetch layers of %s: %w", in.Image.Ref, err)
	}
	type fetched struct {
		local []ports.LocalLayer
		err   error
	}
	fetchDone := make(chan fetched, 1)
	go func() {
		local, err := wait()
		res.Phases[core.PhasePulling] += p.since(start)
		if err == nil {
			onEvent(Event{Phase: core.PhaseUnpacking, Progress: 20})
			onEvent(Event{Phase: core.PhaseBuildingExt4, Progress: buildProgressFrom})
		}
		fetchDone <- fetched{local, err}
	}()
	layers := make([]ports.FlattenLayer, 0, len(streams)+1)
	for _, s := range streams {
		layers = append(layers, ports.FlattenLayer{MediaType: s.Descriptor.MediaType, Digest: s.Descriptor.Digest.String(),
			Size: s.Descriptor.Size, Blob: s.Blob, DiffID: s.DiffID, Derived: s.Derived})
	}
	var closeOnce sync.Once
	closeBlobs := func() {
		closeOnce.Do(func() {
			for _, s := range streams {
				s.Blob.Close()
			}
		})
	}
	layers, err = in.Inject.appendLayer(layers, scratch, buildTime(img))
	if err != nil {
		// Nothing will read the layers: stop their downloads rather
		// than wait for them.
		stopFetch()
		closeBlobs()
		<-fetchDone
		return tree, br, err
	}
	bstart := p.now()
	var bake *caBake
	if ca != nil {
		bake = &caBake{ca: ca, dir: scratch, result: &res.CA}
	}
	tree, br, ferr := p.flattenAndBuild(ctx, layers, out, fp, buildTime(img), bake, writeProgress(onEvent), closeBlobs)
	closeBlobs()
	if ferr != nil {
		stopFetch()
	}
	f := <-fetchDone
	if ferr != nil && (f.err == nil || errors.Is(f.err, context.Canceled) && ctx.Err() == nil) {
		// The build failed first: the fetch failed, if it did, only
		// because the build stopped it.
		return tree, br, ferr
	}
	if f.err != nil {
		// A failed fetch is the cause of whatever the flattener saw.
		return tree, br, fmt.Errorf("fetch layers of %s: %w", in.Image.Ref, f.err)
	}
	res.Layers = len(f.local)
	res.Phases[core.PhaseBuildingExt4] += p.since(bstart)
	return tree, br, nil
}

// errNoTree is the failure of a flattener that returned without handing
// a tree to the builder.
var errNoTree = errors.New("the flattener returned no tree")

// errBuilderSize is the failure of a builder whose reported size is not
// the size of the file it wrote.
var errBuilderSize = errors.New("the ext4 builder's result does not match its image")

// caBake is the CA baking of one build: the CA, the directory its new
// content is written to, and where the result goes.
type caBake struct {
	ca     *core.CubeCA
	dir    string
	result *CAResult
}

// apply bakes the CA into tree; done closes the content file once the
// builder is finished with the tree.
func (b *caBake) apply(tree ports.Tree, at time.Time) (out ports.Tree, done func(), err error) {
	f, err := os.CreateTemp(b.dir, "ca-content-")
	if err != nil {
		return nil, nil, fmt.Errorf("bake the CubeEgress CA: %w", err)
	}
	out, *b.result, err = BakeCA(tree, b.ca, f, at)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("bake the CubeEgress CA: %w", err)
	}
	return out, func() { f.Close() }, nil
}

// Progress of BUILDING_EXT4: from its start to the builder's last byte.
const (
	buildProgressFrom = 40
	buildProgressTo   = 78
)

// writeProgress turns the builder's progress (ports.BuildSpec.Progress)
// into BUILDING_EXT4 events.
func writeProgress(onEvent func(Event)) func(done, total int64) {
	return func(done, total int64) {
		if total <= 0 {
			return
		}
		share := int64(buildProgressTo-buildProgressFrom) * min(max(done, 0), total) / total
		onEvent(Event{Phase: core.PhaseBuildingExt4, Progress: buildProgressFrom + int(share)})
	}
}

// flattenAndBuild hands the flattened tree to the builder: it gets the
// whole tree, with references to the content, lays the image out first
// and hashes it as it writes it. bake, when set, bakes the CubeEgress CA
// into the tree first. progress, when set, receives the builder's
// progress. stop, when set, runs once the flatten is cancelled (it
// unblocks readers of layers still downloading).
func (p *Pipeline) flattenAndBuild(ctx context.Context, layers []ports.FlattenLayer, out, fp string, at time.Time, bake *caBake, progress func(done, total int64), stop func()) (ports.TreeStats, ports.BuildResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if stop != nil {
		// Only while flattening: returning normally disarms it.
		defer context.AfterFunc(ctx, stop)()
	}
	spec := ports.BuildSpec{
		Progress:       progress,
		OutPath:        out,
		UUID:           uuidFrom(fp),
		Time:           at,
		HeadroomBytes:  p.HeadroomBytes,
		HeadroomInodes: p.HeadroomInodes,
		MaxSizeBytes:   p.MaxSizeBytes,
	}
	var br ports.BuildResult
	var berr, bakeErr error
	built := false
	st, err := p.Flattener.Flatten(ctx, layers, func(tree ports.Tree) error {
		built = true
		if bake != nil {
			baked, done, err := bake.apply(tree, at)
			if err != nil {
				bakeErr = err
				return err
			}
			defer done()
			tree = baked
		}
		br, berr = p.Builder.Build(ctx, spec, tree)
		return berr
	})
	switch {
	case err == nil && !built:
		return st, br, errNoTree
	case bakeErr != nil:
		return st, br, bakeErr
	case berr != nil:
		return st, br, fmt.Errorf("build ext4 with %s: %w", p.Builder.Name(), berr)
	case err != nil:
		return st, br, fmt.Errorf("flatten layers: %w", err)
	}
	return st, br, nil
}

// DefaultChunksWait is the data plane's Pipeline.ChunksWait: a build
// waits for chunks that look like ending within half its time more. A
// rebuild's chunk publish reads and hashes the whole image on one core
// (about 1.5 times the whole file's publish here); one of new chunks is
// slower many times over and does not wait.
const DefaultChunksWait = 0.5

// ChunksWaitFor is how long a build that took took until its publish, and
// whose whole file is stored elapsed after the publish started, waits for
// a chunk publish that has read read of size bytes: share × took when the
// rest looks like taking no longer at the rate so far, else nothing.
func ChunksWaitFor(share float64, took, elapsed time.Duration, read, size int64) time.Duration {
	most := time.Duration(float64(took) * share)
	switch {
	case read >= size:
		return most // only the last writes and the index are left
	case read <= 0:
		return 0
	}
	if rest := time.Duration(float64(elapsed) * float64(size-read) / float64(read)); rest > most {
		return 0
	}
	return most
}

// countedFile counts the bytes read from it (ReadAt, which the chunk
// store uses to store a chunk again, does not count).
type countedFile struct {
	*os.File
	n *atomic.Int64
}

func (c countedFile) Read(p []byte) (int, error) {
	n, err := c.File.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// lateChunksTimeout bounds a chunk publish that outlived its build.
const lateChunksTimeout = time.Hour

// publish stores the image whole and, at once, as chunks; chunksErr is the
// chunk store's failure, which leaves the whole file published. A chunk
// publish still running once the whole file is stored and the build has
// waited for it as ChunksWaitFor says goes on alone and reports on late.
func (p *Pipeline) publish(ctx context.Context, file, aid, sum string, size int64, took time.Duration) (chunksErr error, late <-chan error, err error) {
	want := ports.ObjectInfo{Size: size, SHA256: sum}
	key := core.ArtifactObjectKey(aid)
	var chunked chan error
	var read atomic.Int64
	pubStart := p.now()
	cctx, cancelChunks := context.WithTimeout(context.WithoutCancel(ctx), lateChunksTimeout)
	if p.Chunks != nil {
		chunked = make(chan error, 1)
		// Opened here: the scratch file may be removed while a late
		// publish still reads it.
		f, err := os.Open(file)
		go func() {
			if err == nil {
				err = p.Chunks.Put(cctx, key, countedFile{f, &read}, want)
				f.Close()
			}
			chunked <- err
		}()
	}
	f, err := os.Open(file)
	if err == nil {
		err = p.Store.Put(ctx, key, f, want)
		f.Close()
		if err != nil {
			err = fmt.Errorf("publish %s to %s store: %w", aid, p.Store.Backend(), err)
		}
	}
	if chunked == nil {
		cancelChunks()
		return nil, nil, err
	}
	var wait <-chan time.Time
	if err == nil && p.ChunksWait > 0 {
		wait = time.After(ChunksWaitFor(p.ChunksWait, took, p.since(pubStart), read.Load(), size))
	}
	select {
	case cerr := <-chunked:
		cancelChunks()
		if cerr != nil {
			chunksErr = fmt.Errorf("publish %s as chunks: %w", aid, cerr)
		}
		return chunksErr, nil, err
	case <-wait:
	}
	out := make(chan error, 1)
	go func() {
		defer cancelChunks()
		cerr := <-chunked
		if cerr == nil {
			// Deleted meanwhile (the deleter removed the whole file, then
			// an index that was not there yet): the index goes too.
			if _, serr := p.Store.Stat(cctx, key); errors.Is(serr, core.ErrNotFound) {
				cerr = errors.Join(errArtifactGone, p.Chunks.Delete(cctx, key))
			}
		}
		if cerr != nil {
			cerr = fmt.Errorf("publish %s as chunks after the build: %w", aid, cerr)
		}
		out <- cerr
	}()
	return nil, out, nil
}

var errArtifactGone = errors.New("the artifact was deleted while its chunks were published; its index is removed")

func hashFile(ctx context.Context, file string) (string, int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	sum, n, err := core.SHA256OfContext(ctx, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", file, err)
	}
	return sum, n, nil
}

// uuidFrom formats the first 128 bits of the fingerprint as a UUID.
func uuidFrom(fp string) string {
	return fmt.Sprintf("%s-%s-%s-%s-%s", fp[0:8], fp[8:12], fp[12:16], fp[16:20], fp[20:32])
}

func pullShare(pp ports.PullProgress) int {
	if pp.TotalBytes <= 0 {
		return 0
	}
	return int(15 * pp.DownloadedBytes / pp.TotalBytes)
}

func (p *Pipeline) now() time.Time {
	if p.Clock != nil {
		return p.Clock.Now()
	}
	return time.Now()
}

func (p *Pipeline) since(t time.Time) time.Duration { return p.now().Sub(t) }
