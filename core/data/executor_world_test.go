package data_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

const testDigest = "sha256:2222222222222222222222222222222222222222222222222222222222222222"

// world is what several template-center replicas share in the tests: one
// database (the memory store, with the store contract's real semantics),
// one bucket (the memory artifact store), one lock table (the in-process
// locker), and the control plane that receives reports and applies them to
// job rows with the job state machine.
type world struct {
	mu      sync.Mutex
	now     time.Time
	reports []report
	events  []string // reports, publishes and deletes in order, for ordering checks

	db       *memstore.Store
	store    *faultStore
	blob     *faultBlobs
	locker   *countingLocker
	reporter *portsmock.StatusReporterMock
	progress *portsmock.ProgressSinkMock
	clock    *portsmock.ClockMock
	ids      *portsmock.IDsMock
}

type report struct {
	jobID string
	r     ports.StatusReport
	err   error // the control plane's verdict (ErrStaleUpdate for a backward report)
}

// faultStore is the shared database with one seam: artifactUpdate, when
// set, wraps every artifact row update (to make one fail).
type faultStore struct {
	*memstore.Store
	mu             sync.Mutex
	artifactUpdate func(orig ports.ArtifactRepository, ctx context.Context, id string, fn func(*core.Artifact) error) (*core.Artifact, error)
}

func (f *faultStore) Artifacts() ports.ArtifactRepository {
	return faultArtifacts{ArtifactRepository: f.Store.Artifacts(), f: f}
}

type faultArtifacts struct {
	ports.ArtifactRepository
	f *faultStore
}

func (r faultArtifacts) Update(ctx context.Context, id string, fn func(*core.Artifact) error) (*core.Artifact, error) {
	r.f.mu.Lock()
	hook := r.f.artifactUpdate
	r.f.mu.Unlock()
	if hook != nil {
		return hook(r.ArtifactRepository, ctx, id, fn)
	}
	return r.ArtifactRepository.Update(ctx, id, fn)
}

// faultBlobs is the shared bucket; putErr, when set, fails every Put, and
// hideSHA makes Stat report no sha256 (as for an object stored without
// its digest metadata).
type faultBlobs struct {
	ports.ArtifactStore
	mu      sync.Mutex
	putErr  error
	hideSHA bool
}

func (b *faultBlobs) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	info, err := b.ArtifactStore.Stat(ctx, key)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hideSHA {
		info.SHA256 = ""
	}
	return info, err
}

func (b *faultBlobs) Put(ctx context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
	b.mu.Lock()
	err := b.putErr
	b.mu.Unlock()
	if err != nil {
		return err
	}
	return b.ArtifactStore.Put(ctx, key, r, want)
}

// countingLocker is the in-process locker; it counts TryLock calls that
// found the lock held and knows which locks are held.
type countingLocker struct {
	*memlock.Locker
	mu        sync.Mutex
	contended int
	held      map[string]int
}

func (l *countingLocker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	k, err := l.Locker.TryLock(ctx, name)
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.Is(err, core.ErrLocked) {
		l.contended++
	}
	if err != nil {
		return nil, err
	}
	l.held[name]++
	return &countedLock{Lock: k, l: l}, nil
}

func (l *countingLocker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	k, err := l.Locker.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.held[name]++
	l.mu.Unlock()
	return &countedLock{Lock: k, l: l}, nil
}

func (l *countingLocker) contention() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.contended
}

func (l *countingLocker) heldNames() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for n, c := range l.held {
		if c > 0 {
			out = append(out, n)
		}
	}
	return out
}

type countedLock struct {
	ports.Lock
	l    *countingLocker
	once sync.Once
}

func (k *countedLock) Unlock(ctx context.Context) error {
	err := k.Lock.Unlock(ctx)
	k.once.Do(func() {
		k.l.mu.Lock()
		k.l.held[k.Name()]--
		k.l.mu.Unlock()
	})
	return err
}

func newWorld() *world {
	w := &world{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	w.clock = &portsmock.ClockMock{NowFunc: func() time.Time {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.now
	}}
	w.db = memstore.New(memstore.WithClock(w.clock))
	w.store = &faultStore{Store: w.db}
	mem, err := artifactstore.Open(context.Background(), "mem://")
	if err != nil {
		panic(err)
	}
	w.blob = &faultBlobs{ArtifactStore: mem}
	w.locker = &countingLocker{Locker: memlock.New(), held: map[string]int{}}
	w.reporter = &portsmock.StatusReporterMock{
		ReportFunc: func(ctx context.Context, jobID string, r ports.StatusReport) error {
			// The control plane applies what it received; the data plane
			// giving up on the answer does not undo it.
			_, err := w.db.Jobs().Update(context.WithoutCancel(ctx), jobID, func(j *core.Job) error { return j.Apply(r.Update) })
			w.mu.Lock()
			defer w.mu.Unlock()
			w.reports = append(w.reports, report{jobID, r, err})
			w.events = append(w.events, "report "+string(r.Update.Status))
			return nil
		},
	}
	w.progress = &portsmock.ProgressSinkMock{
		PublishFunc: func(_ context.Context, jobID string, p ports.LiveProgress) error {
			w.mu.Lock()
			w.events = append(w.events, "publish "+string(p.Phase))
			w.mu.Unlock()
			return nil
		},
		DeleteFunc: func(_ context.Context, jobID string) error {
			w.mu.Lock()
			w.events = append(w.events, "delete "+jobID)
			w.mu.Unlock()
			return nil
		},
	}
	w.ids = &portsmock.IDsMock{NewTokenFunc: func() string { return "tok-1" }}
	return w
}

// setJob edits a stored job row.
func (w *world) setJob(t *testing.T, id string, fn func(*core.Job)) {
	t.Helper()
	if _, err := w.db.Jobs().Update(context.Background(), id, func(j *core.Job) error { fn(j); return nil }); err != nil {
		t.Fatal(err)
	}
}

// setArtifact edits a stored artifact row.
func (w *world) setArtifact(t *testing.T, id string, fn func(*core.Artifact)) {
	t.Helper()
	if _, err := w.db.Artifacts().Update(context.Background(), id, func(a *core.Artifact) error { fn(a); return nil }); err != nil {
		t.Fatal(err)
	}
}

// object returns the bytes stored under key, if any.
func (w *world) object(t *testing.T, key string) ([]byte, bool) {
	t.Helper()
	rc, err := w.blob.Open(context.Background(), key, 0, -1)
	if errors.Is(err, core.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// putObject replaces the bytes under key (to damage a published artifact).
func (w *world) putObject(t *testing.T, key string, b []byte) {
	t.Helper()
	sum := sha256.Sum256(b)
	if err := w.blob.ArtifactStore.Put(context.Background(), key, bytes.NewReader(b), ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}); err != nil {
		t.Fatal(err)
	}
}

// addJob inserts a PENDING job for req, storing its canonical request as
// the control plane does.
func (w *world) addJob(t *testing.T, jobID string, req *core.FromImageRequest) {
	t.Helper()
	c := *req
	n, err := core.NormalizeFromImageRequest(&c, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, err := core.CanonicalRequestJSON(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.db.Jobs().Create(context.Background(), &core.Job{JobID: jobID, TemplateID: c.TemplateID, AttemptNo: 1, Operation: core.OpCreate,
		Status: core.JobPending, Phase: core.PhasePulling, RequestJSON: js, ActiveKey: core.ActiveKeyFromImage(c.TemplateID)}); err != nil {
		t.Fatal(err)
	}
}

func (w *world) job(id string) *core.Job {
	j, err := w.db.Jobs().Get(context.Background(), id)
	if err != nil {
		panic(fmt.Sprintf("job %s: %v", id, err))
	}
	return j
}

func (w *world) artifact(id string) (core.Artifact, bool) {
	a, err := w.db.Artifacts().Get(context.Background(), id)
	if err != nil {
		return core.Artifact{}, false
	}
	return *a, true
}

func (w *world) reportsOf(jobID string) []report {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []report
	for _, r := range w.reports {
		if r.jobID == jobID {
			out = append(out, r)
		}
	}
	return out
}

// eventually waits for cond; the deadline only stops a broken test from
// hanging, it is not a timing assertion.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// replica is one template center: its own pipeline and executor over the
// shared world.
type replica struct {
	source    *portsmock.ImageSourceMock
	flattener *portsmock.TreeFlattenerMock
	builder   *portsmock.RootfsBuilderMock
	exec      *data.Executor
	done      chan data.Outcome
}

func newReplica(t *testing.T, w *world, cfg data.ExecutorConfig) *replica {
	t.Helper()
	r := &replica{done: make(chan data.Outcome, 16)}
	r.source = &portsmock.ImageSourceMock{
		ResolveFunc: func(ctx context.Context, req ports.ImageRequest) (*ports.ResolvedImage, error) {
			img := &ports.ResolvedImage{Ref: req.Ref, Digest: testDigest, Platform: req.Platform}
			img.Config.Config = ocispec.ImageConfig{Entrypoint: []string{"/app"}, Cmd: []string{"serve"}, Env: []string{"A=1"}, WorkingDir: "/srv", User: "1000"}
			return img, nil
		},
		StreamLayersFunc: portsmock.Streamed(func(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
			progress(ports.PullProgress{TotalBytes: 100, DownloadedBytes: 100, TotalLayers: 1, CompletedLayers: 1})
			return []ports.LocalLayer{{Descriptor: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip}, Path: "/layers/1"}}, nil
		}),
	}
	r.flattener = &portsmock.TreeFlattenerMock{
		FlattenFunc: func(ctx context.Context, layers []ports.FlattenLayer, use func(ports.Tree) error) (ports.TreeStats, error) {
			return ports.TreeStats{Entries: 1, ContentBytes: 4}, use(ports.TreeSlice{{Header: &tar.Header{Name: "tree", Typeflag: tar.TypeDir}}})
		},
	}
	r.builder = &portsmock.RootfsBuilderMock{
		NameFunc:   func() string { return "fake" },
		FormatFunc: func() string { return "fake/1" },
		BuildFunc: func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
			return writeImage(spec, tree)
		},
	}
	if cfg.LockPoll == 0 {
		cfg.LockPoll = time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.OnDone = func(o data.Outcome) { r.done <- o }
	r.exec = &data.Executor{
		Store:  w.store,
		Locker: w.locker,
		Pipeline: &pipeline.Pipeline{Source: r.source, Flattener: r.flattener, Builder: r.builder, Store: w.blob,
			ScratchDir: t.TempDir()},
		Artifacts: w.blob,
		Reporter:  w.reporter,
		Progress:  w.progress,
		Clock:     w.clock,
		IDs:       w.ids,
		Config:    cfg,
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r.exec.Shutdown(ctx)
	})
	return r
}

// writeImage is the fake builder: the image names the tree's entries.
func writeImage(spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
	img := []byte("ext4:" + spec.UUID + ":")
	for i := range tree.Len() {
		e, err := tree.Entry(i)
		if err != nil {
			return ports.BuildResult{}, err
		}
		img = append(img, e.Header.Name...)
	}
	return ports.BuildResult{SizeBytes: int64(len(img))}, os.WriteFile(spec.OutPath, img, 0o644)
}

func (r *replica) wait(t *testing.T) data.Outcome {
	t.Helper()
	select {
	case o := <-r.done:
		return o
	case <-time.After(20 * time.Second):
		t.Fatal("build did not finish")
		return data.Outcome{}
	}
}

func fromImage(tid string) *core.FromImageRequest {
	return &core.FromImageRequest{
		RequestID:         "req-1",
		SourceImageRef:    "registry.example/app:v1",
		RegistryUsername:  "bob",
		RegistryPassword:  "secret",
		TemplateID:        tid,
		WritableLayerSize: "20Gi",
		ExposedPorts:      []int32{9000, 8080},
	}
}

func buildReq(jobID string, req *core.FromImageRequest) ports.BuildRequest {
	return ports.BuildRequest{JobID: jobID, Request: req, DownloadBaseURL: "http://tc.example:8090"}
}

// expectedArtifactID is the id a build of req at testDigest gets.
func expectedArtifactID(t *testing.T, req *core.FromImageRequest) (string, string) {
	t.Helper()
	c := *req
	n, err := core.NormalizeFromImageRequest(&c, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := core.Fingerprint(core.SpecInputFor(n, testDigest, "", "", "fake/1"))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := core.ArtifactIDFor(fp)
	return id, fp
}
