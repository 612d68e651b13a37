package data_test

import (
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

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

const testDigest = "sha256:2222222222222222222222222222222222222222222222222222222222222222"

// world is what several template-center replicas share in the tests: one
// database (job and artifact rows with the store contract's key rules), one
// bucket, one lock table, and the control plane that receives reports and
// applies them to job rows with the job state machine.
type world struct {
	mu        sync.Mutex
	now       time.Time
	jobs      map[string]*core.Job
	arts      map[string]*core.Artifact
	blobs     map[string][]byte
	locks     map[string]bool
	contended int // TryLock calls that found the lock held
	reports   []report
	events    []string // reports, publishes and deletes in order, for ordering checks

	store    *portsmock.StoreMock
	artRepo  *portsmock.ArtifactRepositoryMock
	blob     *portsmock.ArtifactStoreMock
	locker   *portsmock.LockerMock
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

func newWorld() *world {
	w := &world{
		now:   time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
		jobs:  map[string]*core.Job{},
		arts:  map[string]*core.Artifact{},
		blobs: map[string][]byte{},
		locks: map[string]bool{},
	}
	jobs := &portsmock.JobRepositoryMock{
		GetFunc: func(_ context.Context, id string) (*core.Job, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			j, ok := w.jobs[id]
			if !ok {
				return nil, fmt.Errorf("job %s: %w", id, core.ErrNotFound)
			}
			return j.Clone(), nil
		},
	}
	arts := &portsmock.ArtifactRepositoryMock{
		GetFunc: func(_ context.Context, id string) (*core.Artifact, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			a, ok := w.arts[id]
			if !ok {
				return nil, fmt.Errorf("artifact %s: %w", id, core.ErrNotFound)
			}
			c := *a
			return &c, nil
		},
		CreateFunc: func(_ context.Context, a *core.Artifact) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, o := range w.arts {
				if o.ArtifactID == a.ArtifactID || (a.Fingerprint != "" && o.Fingerprint == a.Fingerprint) {
					return fmt.Errorf("artifact %s: %w", a.ArtifactID, core.ErrConflict)
				}
			}
			c := *a
			c.CreatedAt, c.UpdatedAt = w.tick(), w.now
			w.arts[a.ArtifactID] = &c
			return nil
		},
		UpdateFunc: func(_ context.Context, id string, fn func(*core.Artifact) error) (*core.Artifact, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			a, ok := w.arts[id]
			if !ok {
				return nil, fmt.Errorf("artifact %s: %w", id, core.ErrNotFound)
			}
			c := *a
			if err := fn(&c); err != nil {
				return nil, err
			}
			c.UpdatedAt = w.tick()
			w.arts[id] = &c
			out := c
			return &out, nil
		},
	}
	w.artRepo = arts
	w.store = &portsmock.StoreMock{
		JobsFunc:      func() ports.JobRepository { return jobs },
		ArtifactsFunc: func() ports.ArtifactRepository { return arts },
	}
	w.blob = &portsmock.ArtifactStoreMock{
		BackendFunc: func() string { return "mem" },
		PutFunc: func(_ context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != want.SHA256 || int64(len(b)) != want.Size {
				return errors.New("verification failed")
			}
			w.mu.Lock()
			w.blobs[key] = b
			w.mu.Unlock()
			return nil
		},
		StatFunc: func(_ context.Context, key string) (ports.ObjectInfo, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			b, ok := w.blobs[key]
			if !ok {
				return ports.ObjectInfo{}, fmt.Errorf("object %s: %w", key, core.ErrNotFound)
			}
			sum := sha256.Sum256(b)
			return ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, nil
		},
	}
	w.locker = &portsmock.LockerMock{
		TryLockFunc: func(ctx context.Context, name string) (ports.Lock, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.locks[name] {
				w.contended++
				return nil, fmt.Errorf("lock %s: %w", name, core.ErrLocked)
			}
			w.locks[name] = true
			var once sync.Once
			return &portsmock.LockMock{
				NameFunc: func() string { return name },
				UnlockFunc: func(context.Context) error {
					once.Do(func() {
						w.mu.Lock()
						delete(w.locks, name)
						w.mu.Unlock()
					})
					return nil
				},
			}, nil
		},
	}
	w.reporter = &portsmock.StatusReporterMock{
		ReportFunc: func(_ context.Context, jobID string, r ports.StatusReport) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			var err error
			if j, ok := w.jobs[jobID]; !ok {
				err = core.ErrNotFound
			} else {
				c := j.Clone()
				if err = c.Apply(r.Update); err == nil {
					c.UpdatedAt = w.tick()
					w.jobs[jobID] = c
				}
			}
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
	w.clock = &portsmock.ClockMock{NowFunc: func() time.Time {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.now
	}}
	w.ids = &portsmock.IDsMock{NewTokenFunc: func() string { return "tok-1" }}
	return w
}

// tick advances the clock by a millisecond (callers hold w.mu) so that
// every write gets a later updated_at.
func (w *world) tick() time.Time {
	w.now = w.now.Add(time.Millisecond)
	return w.now
}

// addJob inserts a PENDING job for req, storing its canonical request as
// the control plane does.
func (w *world) addJob(t *testing.T, jobID string, req *core.FromImageRequest) {
	t.Helper()
	c := *req
	if err := core.NormalizeFromImageRequest(&c, nil); err != nil {
		t.Fatal(err)
	}
	js, err := core.CanonicalRequestJSON(&c)
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.jobs[jobID] = &core.Job{JobID: jobID, TemplateID: c.TemplateID, AttemptNo: 1, Operation: core.OpCreate,
		Status: core.JobPending, Phase: core.PhasePulling, RequestJSON: js, ActiveKey: core.ActiveKeyFromImage(c.TemplateID),
		CreatedAt: w.tick(), UpdatedAt: w.now}
}

func (w *world) job(id string) *core.Job {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobs[id].Clone()
}

func (w *world) artifact(id string) (core.Artifact, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.arts[id]
	if !ok {
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
		FetchLayersFunc: func(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
			progress(ports.PullProgress{TotalBytes: 100, DownloadedBytes: 100, TotalLayers: 1, CompletedLayers: 1})
			return []ports.LocalLayer{{Descriptor: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip}, Path: "/layers/1"}}, nil
		},
	}
	r.flattener = &portsmock.TreeFlattenerMock{
		FlattenFunc: func(ctx context.Context, layers []ports.FlattenLayer, out io.Writer) (ports.TreeStats, error) {
			_, err := out.Write([]byte("tree"))
			return ports.TreeStats{Entries: 1, ContentBytes: 4}, err
		},
	}
	r.builder = &portsmock.RootfsBuilderMock{
		NameFunc: func() string { return "fake" },
		BuildFunc: func(ctx context.Context, spec ports.BuildSpec) (ports.BuildResult, error) {
			return writeImage(spec)
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

func writeImage(spec ports.BuildSpec) (ports.BuildResult, error) {
	tree, err := io.ReadAll(spec.Tree)
	if err != nil {
		return ports.BuildResult{}, err
	}
	img := append([]byte("ext4:"+spec.UUID+":"), tree...)
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
	if err := core.NormalizeFromImageRequest(&c, nil); err != nil {
		t.Fatal(err)
	}
	fp, err := core.Fingerprint(core.SpecInputFor(&c, testDigest, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := core.ArtifactIDFor(fp)
	return id, fp
}
