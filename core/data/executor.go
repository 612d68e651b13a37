package data

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

// Defaults of ExecutorConfig.
const (
	DefaultMaxConcurrent   = 2
	DefaultHeartbeatEvery  = 60 * time.Second
	DefaultLockPoll        = 5 * time.Second
	DefaultPublishEvery    = 500 * time.Millisecond
	DefaultGCDeadlineAfter = 7 * 24 * time.Hour
	DefaultFinalTimeout    = 2 * time.Minute
	DefaultShutdownGrace   = 10 * time.Second
	DefaultBuildTimeout    = 2 * time.Hour
	DefaultReportEvery     = time.Second
)

// LockPrefix starts the name of a build's fingerprint lock.
const LockPrefix = "tc_build_"

// Runner runs one build; *pipeline.Pipeline is the implementation (with its
// Store set to the same store as Executor.Artifacts, so that bytes are
// published before the executor writes the artifact row). A Runner must
// call in.AfterResolve before fetching layers and return its error
// unchanged: that is where the executor takes the fingerprint lock and
// claims or reuses the artifact.
type Runner interface {
	Run(ctx context.Context, in pipeline.Input, onEvent func(pipeline.Event)) (*pipeline.Result, error)
}

// ExecutorConfig tunes the executor. Zero values take the defaults.
type ExecutorConfig struct {
	// MaxConcurrent caps builds running at once
	// (CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS, default 2). Submit
	// answers core.ErrBusy at the cap instead of queueing.
	MaxConcurrent int
	// HeartbeatEvery is how often a running build shows it is alive: it
	// touches its job row (with an Owner; without one it re-reports its
	// status through the control plane), so the job's updated_at, the
	// staleness clock of the liveness sweep and the reconciler, keeps
	// moving (core/liveness).
	HeartbeatEvery time.Duration
	// Owner is this process's instance id (core/liveness): written into
	// every job it accepts, while it holds the owner lock under that id.
	// "" claims nothing (a build is then judged by its heartbeat alone).
	Owner string
	// ReportEvery is the least time between two status reports that only
	// carry progress (pulled bytes and layers, the ext4 writer's share);
	// a phase change is reported at once. Through these reports the
	// control plane shows live progress without Redis.
	ReportEvery time.Duration
	// LockPoll is how often a build waiting for the fingerprint lock
	// retries it and looks for a finished artifact to reuse.
	LockPoll time.Duration
	// PublishEvery is the least time between two live-progress publishes
	// within one phase; a phase change is published at once.
	PublishEvery time.Duration
	// GCDeadlineAfter sets the artifact row's gc_deadline (default 7 days).
	GCDeadlineAfter time.Duration
	// FinalTimeout bounds the terminal report and row writes, which run
	// even when the build's context was cancelled.
	FinalTimeout time.Duration
	// ShutdownGrace is how long Shutdown still waits, once its context has
	// ended, for the cancelled builds' terminal writes (row FAILED, FAILED
	// report, unlock). The caller's budget may be spent elsewhere (an HTTP
	// drain); without this the writes would start on a cancelled context
	// and leave rows BUILDING and jobs RUNNING until the reconciler.
	ShutdownGrace time.Duration
	// BuildTimeout bounds a whole build, from resolving the image to the
	// published bytes (CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT, default 2h). The
	// registry's idle timeout catches a connection that stops; this
	// catches one that trickles, and Retry-After waits a day long: either
	// would otherwise hold one of the few build slots for ever.
	BuildTimeout time.Duration
	// DownloadBaseURL is recorded on built artifacts when the build request
	// names none (upstream column master_node_ip).
	DownloadBaseURL string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnDone, when set, is called once per finished build (for metrics).
	OnDone func(Outcome)
}

// Outcome describes a finished build.
type Outcome struct {
	JobID      string
	ArtifactID string
	// Reused is true when an existing READY artifact was reported instead
	// of building.
	Reused bool
	// Result is the pipeline's result of a fresh build (nil otherwise).
	Result *pipeline.Result
	// Phase is the phase the build failed in; Err is nil on success.
	Phase    core.Phase
	Err      error
	Duration time.Duration
}

// Executor runs the builds this process accepted. Set the fields, then call
// Submit; the zero ExecutorConfig takes the defaults. It must not be copied after
// first use.
type Executor struct {
	Store     ports.Store
	Locker    ports.Locker
	Pipeline  Runner
	Artifacts ports.ArtifactStore // where Pipeline publishes; used to check bytes before reuse
	Reporter  ports.StatusReporter
	Progress  ports.ProgressSink // optional
	Clock     ports.Clock        // optional; time.Now
	IDs       ports.IDs          // optional; mints the download token of a fresh build
	// CubeCA is this data plane's CubeEgress root CA, baked when the
	// control plane sends none (optional).
	CubeCA ports.CubeCASource
	Config ExecutorConfig

	once     sync.Once
	conf     ExecutorConfig     // Config with defaults, fixed at first use
	root     context.Context    // parent of every build; cancelled by Shutdown
	stop     context.CancelFunc // cancels root
	final    context.Context    // parent of terminal writes; cancelled when Shutdown gives up
	hardStop context.CancelFunc

	mu       sync.Mutex
	inflight map[string]*run
	closed   bool
	wg       sync.WaitGroup
}

func (e *Executor) init() {
	e.once.Do(func() {
		e.root, e.stop = context.WithCancel(context.Background())
		e.final, e.hardStop = context.WithCancel(context.Background())
		e.inflight = map[string]*run{}
		e.conf = e.cfg()
	})
}

func (e *Executor) cfg() ExecutorConfig {
	c := e.Config
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.HeartbeatEvery <= 0 {
		c.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if c.LockPoll <= 0 {
		c.LockPoll = DefaultLockPoll
	}
	if c.ReportEvery <= 0 {
		c.ReportEvery = DefaultReportEvery
	}
	if c.PublishEvery <= 0 {
		c.PublishEvery = DefaultPublishEvery
	}
	if c.GCDeadlineAfter <= 0 {
		c.GCDeadlineAfter = DefaultGCDeadlineAfter
	}
	if c.FinalTimeout <= 0 {
		c.FinalTimeout = DefaultFinalTimeout
	}
	if c.BuildTimeout <= 0 {
		c.BuildTimeout = DefaultBuildTimeout
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (e *Executor) now() time.Time {
	if e.Clock != nil {
		return e.Clock.Now()
	}
	return time.Now()
}

// Submit validates a build the control plane forwards and starts it in the
// background; it never waits for the build. Errors:
//
//   - missing job id or request, a request that does not canonically equal
//     the job's request_json, bad envd payload: core.ErrInvalidArgument (400);
//   - the job is already building in this process: core.ErrConflict (409),
//     checked before the job row (which is RUNNING by then);
//   - no such job: core.ErrNotFound; a job that is not PENDING (another
//     replica took it: an accepted build moves its job to RUNNING in the
//     store before it starts): *NotPendingError, which also matches
//     core.ErrNotFound (404);
//   - MaxConcurrent builds running: core.ErrBusy (429); ErrShuttingDown
//     (also core.ErrBusy) after Shutdown;
//   - a missing dependency or a store failure: other errors (5xx).
func (e *Executor) Submit(ctx context.Context, req ports.BuildRequest) error {
	e.init()
	if e.Store == nil || e.Locker == nil || e.Pipeline == nil || e.Artifacts == nil || e.Reporter == nil {
		return errors.New("build executor is not wired: store, locker, pipeline, artifact store and reporter are required")
	}
	if strings.TrimSpace(req.JobID) == "" {
		return &core.FieldError{Field: "job_id", Reason: "is required"}
	}
	if req.Request == nil {
		return &core.FieldError{Field: "request", Reason: "is required"}
	}
	norm, err := normalized(req.Request)
	if err != nil {
		return err
	}
	if err := checkEnvd(norm.Request(), req); err != nil {
		return err
	}

	// A build of this job already running here answers "in flight" even
	// though its job row has moved on to RUNNING.
	e.mu.Lock()
	dup := e.inflight[req.JobID] != nil
	e.mu.Unlock()
	if dup {
		return fmt.Errorf("job %s is already building here: %w", req.JobID, core.ErrConflict)
	}

	job, err := e.Store.Jobs().Get(ctx, req.JobID)
	if err != nil {
		return fmt.Errorf("job %s: %w", req.JobID, err)
	}
	if job.Status != core.JobPending {
		return &NotPendingError{JobID: job.JobID, Status: job.Status}
	}
	if err := sameRequest(job, norm); err != nil {
		return err
	}

	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return ErrShuttingDown
	case e.inflight[req.JobID] != nil:
		e.mu.Unlock()
		return fmt.Errorf("job %s is already building here: %w", req.JobID, core.ErrConflict)
	case len(e.inflight) >= e.conf.MaxConcurrent:
		n := len(e.inflight)
		e.mu.Unlock()
		return fmt.Errorf("%d builds running, the limit: %w", n, core.ErrBusy)
	}
	// The slot is reserved before the job is taken, so a refusal never
	// leaves a taken job without a build.
	r := e.newRun(req, norm)
	e.inflight[req.JobID] = r
	e.wg.Add(1)
	e.mu.Unlock()
	if err := e.take(ctx, req.JobID); err != nil {
		r.cancel()
		e.finish(r)
		return err
	}
	go r.execute()
	return nil
}

// take moves the job from PENDING to RUNNING in the store before its build
// starts, writing this process's instance id into it
// (ExecutorConfig.Owner) so the liveness sweeps know whose lock tells
// whether the build is alive. It is a compare-and-set: of two replicas a
// forward reached twice (a lost answer, a second forward behind a
// balancer) only one builds the job; the other answers *NotPendingError
// (or core.ErrConflict for a job another process owns). The build's own
// first report (RUNNING/PULLING) then repeats what take wrote.
func (e *Executor) take(ctx context.Context, jobID string) error {
	me := e.conf.Owner
	_, err := e.Store.Jobs().Update(ctx, jobID, func(j *core.Job) error {
		switch {
		case j.Status != core.JobPending || j.Phase.PostBuild():
			return &NotPendingError{JobID: j.JobID, Status: j.Status}
		case me != "" && j.BuildOwner != "" && j.BuildOwner != me:
			return fmt.Errorf("job %s is being built by template center %s: %w", j.JobID, j.BuildOwner, core.ErrConflict)
		}
		if me != "" {
			j.BuildOwner = me
		}
		return j.Apply(core.Progress(core.JobRunning, core.PhasePulling, 5))
	})
	var np *NotPendingError
	if err != nil && !errors.As(err, &np) {
		return fmt.Errorf("take job %s: %w", jobID, err)
	}
	return err
}

// normalized normalizes a copy of a request that came over the wire or
// from a stored row (the caller's value is not changed). Every failure
// wraps core.ErrInvalidArgument.
func normalized(in *core.FromImageRequest) (core.NormalizedRequest, error) {
	c := *in
	c.ExposedPorts = slices.Clone(in.ExposedPorts)
	c.DistributionScope = slices.Clone(in.DistributionScope)
	n, err := core.NormalizeFromImageRequest(&c, nil)
	if err != nil && !errors.Is(err, core.ErrInvalidArgument) {
		err = fmt.Errorf("request: %w: %w", core.ErrInvalidArgument, err)
	}
	return n, err
}

// sameRequest compares canonical forms. The stored side is decoded and
// normalized again, so a row written by an older writer (another field
// order, defaults left out) still matches the same request.
func sameRequest(job *core.Job, req core.NormalizedRequest) error {
	got, err := core.CanonicalRequestJSON(req)
	if err != nil {
		return err
	}
	stored, err := core.DecodeRequestJSON(job.RequestJSON)
	if err != nil {
		return fmt.Errorf("job %s has an unreadable request_json: %w", job.JobID, err)
	}
	storedNorm, err := normalized(stored)
	if err != nil {
		return fmt.Errorf("job %s request_json: %w", job.JobID, err)
	}
	want, err := core.CanonicalRequestJSON(storedNorm)
	if err != nil {
		return err
	}
	if got != want {
		return &core.FieldError{Field: "request", Reason: fmt.Sprintf("does not match the request of job %s", job.JobID)}
	}
	return nil
}

// checkEnvd refuses an envd payload that cannot be injected, before the
// build starts (the pipeline would refuse it too, but only asynchronously).
func checkEnvd(req *core.FromImageRequest, br ports.BuildRequest) error {
	if !pipeline.WantsEnvd(req) {
		return nil
	}
	if len(br.EnvdData) == 0 {
		return &core.FieldError{Field: "envd_data", Reason: "the request opts in to envd injection but no envd binary was sent"}
	}
	if len(br.EnvdData) > pipeline.MaxEnvdBytes {
		return &core.FieldError{Field: "envd_data", Reason: fmt.Sprintf("%d bytes, at most %d", len(br.EnvdData), pipeline.MaxEnvdBytes)}
	}
	if c := strings.ToLower(strings.TrimSpace(br.EnvdSHA256)); c != "" {
		sum := sha256.Sum256(br.EnvdData)
		if c != hex.EncodeToString(sum[:]) {
			return &core.FieldError{Field: "envd_sha256", Reason: "does not match the sha256 of envd_data"}
		}
	}
	return nil
}

// InFlight returns the ids of the jobs building in this process, sorted.
func (e *Executor) InFlight() []string {
	e.init()
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.inflight))
	for id := range e.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Running returns how many builds run in this process.
func (e *Executor) Running() int {
	e.init()
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}

// Shutdown refuses new builds, cancels the running ones (each reports its
// job FAILED "template center shutting down", best effort) and waits for
// them. If ctx ends first (even before the call), the builds still get
// ExecutorConfig.ShutdownGrace for their terminal writes; only those still
// in progress after it are abandoned, and then ctx's error is returned.
func (e *Executor) Shutdown(ctx context.Context) error {
	e.init()
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stop()
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		e.hardStop()
		return nil
	case <-ctx.Done():
	}
	grace := time.NewTimer(e.conf.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		e.hardStop()
		return nil
	case <-grace.C:
		e.hardStop()
		return fmt.Errorf("build executor shutdown: terminal writes still running after %s: %w", e.conf.ShutdownGrace, ctx.Err())
	}
}

func (e *Executor) finish(r *run) {
	e.mu.Lock()
	delete(e.inflight, r.req.JobID)
	e.mu.Unlock()
	e.wg.Done()
}
