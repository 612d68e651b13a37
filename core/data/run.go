package data

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

// buildPhases are the phases a data-plane build reports, in order. The
// pipeline's final READY event is not among them: the build ends with a
// BUILT (or FAILED) report, and RUNNING/READY would read as a post-build
// phase on the control plane.
var buildPhases = []core.Phase{core.PhasePulling, core.PhaseUnpacking, core.PhaseBuildingExt4, core.PhaseGeneratingJSON, core.PhaseUploading}

// run is one accepted build.
type run struct {
	e   *Executor
	c   ExecutorConfig
	log *slog.Logger
	req ports.BuildRequest
	// spec is the normalized request, which the pipeline takes; norm is a
	// copy of it the run and the artifact row read.
	spec  core.NormalizedRequest
	norm  *core.FromImageRequest
	start time.Time

	ctx    context.Context
	cancel context.CancelFunc
	// pctx is the pipeline's context; abort cancels it with a cause
	// (ErrLockLost) without touching the report loop.
	pctx  context.Context
	abort context.CancelCauseFunc

	// changed wakes the report loop after an event (capacity 1).
	changed chan struct{}

	mu       sync.Mutex
	st       state
	lock     ports.Lock     // the fingerprint lock, once held
	claimed  bool           // this build moved the artifact row to BUILDING
	released bool           // and then moved it to FAILED (releaseClaim)
	owner    string         // the BuildOwnerToken this build's claim wrote
	lockLost bool           // the fingerprint lock's Lost() closed while held
	artifact *core.Artifact // the row reported with BUILT
	reused   bool
}

// state is what the report loop and the terminal report read.
type state struct {
	phase          core.Phase
	progress       int
	pull           core.PullProgress
	resolved       *pipeline.Resolved
	artifactStatus core.ArtifactStatus
	// durations holds the finished phases' times; phaseStart is when the
	// current phase began (both on this process's clock, where the work
	// happens). snapshot copies the map.
	durations  core.PhaseDurations
	phaseStart time.Time
}

func (e *Executor) newRun(req ports.BuildRequest, spec core.NormalizedRequest) *run {
	c := e.conf
	ctx, cancel := context.WithCancel(e.root)
	pctx, abort := context.WithCancelCause(ctx)
	norm := spec.Request()
	now := e.now()
	return &run{
		e: e, c: c, req: req, spec: spec, norm: norm, start: now,
		log:     c.Logger.With("job_id", req.JobID, "template_id", norm.TemplateID),
		ctx:     ctx,
		cancel:  cancel,
		pctx:    pctx,
		abort:   abort,
		changed: make(chan struct{}, 1),
		st:      state{phase: core.PhasePulling, progress: 5, durations: core.PhaseDurations{}, phaseStart: now},
	}
}

// execute is the build goroutine: report RUNNING, run the pipeline with a
// report loop beside it, then the terminal report.
func (r *run) execute() {
	defer r.e.finish(r)
	defer r.cancel()
	r.log.Info("build started", "image", r.norm.SourceImageRef, "writable_layer_size", r.norm.WritableLayerSize)
	var (
		res *pipeline.Result
		err error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("build panicked", "panic", p)
				err = fmt.Errorf("internal error: build panicked: %v", p)
			}
		}()
		// The loop reports RUNNING/PULLING/5 first, then follows the
		// pipeline; it is stopped (even after a panic) before the terminal
		// report so that no RUNNING report can follow BUILT or FAILED.
		loopCtx, stopLoop := context.WithCancel(r.ctx)
		loopDone := make(chan struct{})
		go func() {
			defer close(loopDone)
			r.loop(loopCtx)
		}()
		defer func() {
			stopLoop()
			<-loopDone
		}()
		ctx, stop := context.WithTimeoutCause(r.pctx, r.c.BuildTimeout, errBuildTimeout)
		defer stop()
		var in pipeline.Input
		if in, err = r.input(ctx); err == nil {
			res, err = r.e.Pipeline.Run(ctx, in, r.onEvent)
		}
		if err != nil && context.Cause(ctx) == errBuildTimeout {
			err = &BuildTimeoutError{Limit: r.c.BuildTimeout, Err: err}
		}
		if cause := context.Cause(r.pctx); err != nil && errors.Is(cause, ErrJobEnded) {
			err = cause
		}
	}()

	var reuse *reuseSignal
	if errors.As(err, &reuse) {
		r.mu.Lock()
		r.artifact, r.reused = reuse.artifact, true
		r.mu.Unlock()
		err = nil
	} else if r.isLockLost() {
		// Whatever the pipeline returned, a newer build may hold the lock
		// now: the bytes are not this build's to record READY.
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrLockLost, err)
		} else {
			err = fmt.Errorf("%w; the finished build is not recorded", ErrLockLost)
		}
	} else if err == nil {
		if res.ChunksErr != nil {
			r.log.Warn("artifact not published as chunks: nodes download it whole", "err", res.ChunksErr)
		}
		if late := res.ChunksLate; late != nil {
			log := r.log
			go func() {
				if err := <-late; err != nil {
					log.Warn("artifact not published as chunks: nodes download it whole", "err", err)
				} else {
					log.Info("artifact published as chunks after its build")
				}
			}()
		}
		err = r.markReady(res)
	}
	if err != nil {
		// FAILED only while the row still carries this build's claim
		// (markFailed): a newer build's claim is never overwritten, even
		// after the lock was lost. A row nobody claimed since is settled
		// now rather than left BUILDING, with no build at work, until the
		// reconciler's abandoned-row sweep (RunningStaleAfter, an hour).
		r.releaseClaim(err)
	}
	r.unlock()
	if err != nil {
		r.failed(err)
	} else {
		r.built()
	}
	r.done(res, err)
}

func (r *run) input(ctx context.Context) (pipeline.Input, error) {
	inj, err := r.injection(ctx)
	if err != nil {
		return pipeline.Input{}, err
	}
	return pipeline.Input{
		Image: ports.ImageRequest{
			Ref:      r.norm.SourceImageRef,
			Platform: r.norm.Platform,
			Username: r.norm.RegistryUsername,
			Password: r.norm.RegistryPassword,
		},
		Request:      r.spec,
		Inject:       inj,
		AfterResolve: r.afterResolve,
	}, nil
}

// injection is what the build adds to the image: the envd the request
// opts in to, and the CubeEgress root CA unless the request says
// with_cube_ca=false: the one the control plane sent, else this data
// plane's own (Executor.CubeCA, for an upstream master, which sends none).
// Without either the image is built without it, which the artifact row
// (cube_egress_ca_baked=false) and a log line say; a CA that is installed
// but broken fails the build.
func (r *run) injection(ctx context.Context) (pipeline.Injection, error) {
	var in pipeline.Injection
	if pipeline.WantsEnvd(r.norm) {
		in.Envd, in.EnvdClaimedSHA256 = r.req.EnvdData, r.req.EnvdSHA256
	}
	if !core.WantsCubeCA(r.norm) {
		return in, nil
	}
	switch {
	case r.req.CubeCA != nil:
		in.CA = r.req.CubeCA
	case r.e.CubeCA != nil:
		ca, err := r.e.CubeCA.CubeCA(ctx)
		switch {
		case err == nil:
			in.CA = ca
		case errors.Is(err, core.ErrNotFound):
			r.log.Warn("with_cube_ca=true but no CubeEgress root CA is installed: the image is built without it", "err", err)
		default:
			return in, fmt.Errorf("with_cube_ca=true: %w", err)
		}
	default:
		r.log.Warn("with_cube_ca=true but no CubeEgress root CA is configured: the image is built without it")
	}
	return in, nil
}

// onEvent records pipeline progress and wakes the report loop; it never
// blocks on the network, so a slow control plane cannot stall the build.
// The pipeline may call it from several goroutines.
func (r *run) onEvent(ev pipeline.Event) {
	r.mu.Lock()
	if ev.Resolved != nil {
		res := *ev.Resolved
		r.st.resolved = &res
	}
	var left core.Phase
	var took time.Duration
	if i := slices.Index(buildPhases, ev.Phase); i >= slices.Index(buildPhases, r.st.phase) {
		if ev.Phase != r.st.phase {
			now := r.e.now()
			took = now.Sub(r.st.phaseStart)
			r.st.durations[r.st.phase] += took
			left = r.st.phase
			r.st.phase, r.st.phaseStart = ev.Phase, now
		}
		r.st.progress = max(r.st.progress, ev.Progress)
	}
	if ev.Pull != (core.PullProgress{}) {
		r.st.pull = ev.Pull
	}
	r.mu.Unlock()
	if left != "" {
		// One line per phase: the job log's story of the build.
		r.log.Info("build phase finished", "phase", left, "took", took.Round(time.Millisecond), "next", ev.Phase)
	}
	r.wake()
}

func (r *run) wake() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *run) snapshot() state {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.durations = maps.Clone(r.st.durations)
	return st
}

// finalDurations are st's phase times with the current phase's, for a
// terminal report.
func (r *run) finalDurations(st state) core.PhaseDurations {
	d := maps.Clone(st.durations)
	d[st.phase] += r.e.now().Sub(st.phaseStart)
	return d
}

// loop keeps the control plane told until ctx ends: a report at once for
// a phase change, the resolved artifact or the artifact row's status, and
// at most one every ReportEvery for progress alone (pulled bytes, the ext4
// writer's share), so live progress reaches the master without Redis. It
// publishes throttled live progress to the ProgressSink when there is one.
// With an Owner, a goroutine beside it heartbeats every HeartbeatEvery
// (see heartbeat); without one, the loop re-reports every HeartbeatEvery.
func (r *run) loop(ctx context.Context) {
	if r.c.Owner != "" {
		// Beside the reports, never behind them: a report may retry for a
		// while when the master is away, the heartbeat must not wait.
		beats := make(chan struct{})
		defer func() { <-beats }()
		go func() {
			defer close(beats)
			r.beat(ctx)
		}()
	}
	heartbeat := time.NewTicker(r.c.HeartbeatEvery)
	defer heartbeat.Stop()
	var (
		reported    = state{phase: core.PhasePulling}
		reportedAt  time.Time
		reportOK    = true
		reportLater <-chan time.Time
		published   state
		havePub     bool
		lastPublish time.Time
		flush       <-chan time.Time
	)
	for first := true; ; first = false {
		beat, flushed, due := false, false, false
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-r.changed:
			case <-heartbeat.C:
				beat = true
			case <-reportLater:
				reportLater, due = nil, true
			case <-flush:
				flush, flushed = nil, true
			}
		}
		st := r.snapshot()
		now := r.e.now()
		newlyResolved := st.resolved != nil && reported.resolved == nil
		changed := first || newlyResolved || st.phase != reported.phase || st.artifactStatus != reported.artifactStatus
		// Without an owner the report is the heartbeat; with one, a beat
		// resends a report that failed (the master was away).
		resend := beat && (r.c.Owner == "" || !reportOK)
		progressed := st.progress != reported.progress || st.pull != reported.pull
		switch {
		case changed || resend || progressed && (due || now.Sub(reportedAt) >= r.c.ReportEvery):
			reportOK = r.report(ctx, ports.StatusReport{Update: r.runningUpdate(st)})
			reported, reportedAt, reportLater = st, now, nil
		case progressed && reportLater == nil:
			reportLater = time.After(r.c.ReportEvery - now.Sub(reportedAt))
		}
		if r.e.Progress == nil || (havePub && samePublished(st, published)) {
			continue
		}
		if !havePub || flushed || st.phase != published.phase || now.Sub(lastPublish) >= r.c.PublishEvery {
			lp := ports.LiveProgress{Phase: st.phase, Progress: st.progress, Pull: st.pull}
			if err := r.e.Progress.Publish(ctx, r.req.JobID, lp); err != nil && ctx.Err() == nil {
				r.log.Warn("publish live progress", "err", err)
			}
			published, havePub, lastPublish = st, true, now
		} else if flush == nil {
			flush = time.After(r.c.PublishEvery - now.Sub(lastPublish))
		}
	}
}

// errNotOurs stops a heartbeat whose job is no longer this build's.
var errNotOurs = errors.New("the job is no longer this build's")

// ErrJobEnded stops a build whose job ended without it (failed as
// abandoned by a liveness sweep that judged this process dead, or deleted):
// nothing would record what it builds.
var ErrJobEnded = errors.New("the job ended while its build was running")

// beat heartbeats every HeartbeatEvery until ctx ends.
func (r *run) beat(ctx context.Context) {
	t := time.NewTicker(r.c.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.heartbeat(ctx)
		}
	}
}

// heartbeat touches the job row, which moves its updated_at: the liveness
// sweeps of the other replicas and the master judge the build by it
// (core/liveness), whether or not the control plane answers reports. A job
// that is no longer active, or no longer this process's, stops the build.
func (r *run) heartbeat(ctx context.Context) {
	_, err := r.e.Store.Jobs().Update(ctx, r.req.JobID, func(j *core.Job) error {
		if !j.Status.Active() || j.BuildOwner != r.c.Owner {
			return fmt.Errorf("%w: %s/%s, owner %q", errNotOurs, j.Status, j.Phase, j.BuildOwner)
		}
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, errNotOurs), errors.Is(err, core.ErrNotFound):
		r.log.Warn("job ended elsewhere; stopping its build", "err", err)
		r.abort(fmt.Errorf("%w: %w", ErrJobEnded, err))
	case ctx.Err() == nil:
		r.log.Warn("build heartbeat not written", "err", err)
	}
}

func samePublished(a, b state) bool {
	return a.phase == b.phase && a.progress == b.progress && a.pull == b.pull
}

// runningUpdate is a RUNNING report of st; sent unchanged it is the
// heartbeat (the store moves updated_at on every applied update).
func (r *run) runningUpdate(st state) core.JobUpdate {
	u := core.Progress(core.JobRunning, st.phase, st.progress)
	if st.resolved != nil {
		u.ArtifactID = st.resolved.ArtifactID
		u.Fingerprint = st.resolved.Fingerprint
		u.SourceImageDigest = st.resolved.ImageDigest
	}
	u.ArtifactStatus = string(st.artifactStatus)
	if st.pull != (core.PullProgress{}) {
		p := st.pull
		u.Pull = &p
	}
	if len(st.durations) > 0 {
		u.PhaseDurations = st.durations
	}
	return u
}

// report sends one status report and says whether it arrived; a failure is
// logged, not fatal (the reporter retries, and the next report or the
// heartbeat sends the state again).
func (r *run) report(ctx context.Context, rep ports.StatusReport) bool {
	err := r.e.Reporter.Report(ctx, r.req.JobID, rep)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("status report failed", "status", rep.Update.Status, "phase", rep.Update.Phase, "err", err)
	}
	return err == nil
}

// finalCtx bounds terminal writes. It survives the build's cancellation
// (a shut-down build still reports FAILED) but not a Shutdown that gave up.
func (r *run) finalCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.e.final, r.c.FinalTimeout)
}

func (r *run) built() {
	st := r.snapshot()
	r.mu.Lock()
	a := *r.artifact
	r.mu.Unlock()
	digest := a.SourceImageDigest
	var inputs *core.BuildInputs
	if st.resolved != nil {
		digest = st.resolved.ImageDigest
		in := st.resolved.Inputs
		inputs = &in
	}
	p := 100
	u := core.JobUpdate{
		Status:            core.JobBuilt,
		Phase:             core.PhaseReady,
		Progress:          &p,
		ArtifactID:        a.ArtifactID,
		Fingerprint:       a.Fingerprint,
		SourceImageDigest: digest,
		ArtifactStatus:    string(core.ArtifactReady),
		PhaseDurations:    r.finalDurations(st),
	}
	if st.pull != (core.PullProgress{}) {
		pp := st.pull
		u.Pull = &pp
	}
	r.log.Info("build finished", "artifact_id", a.ArtifactID, "ext4_sha256", a.Ext4SHA256, "ext4_size_bytes", a.Ext4SizeBytes,
		"image_digest", digest)
	ctx, cancel := r.finalCtx()
	defer cancel()
	r.report(ctx, ports.StatusReport{Update: u, Artifact: &a, Inputs: inputs})
	r.clearProgress(ctx)
}

// failureMessage is the job's error_message for err.
func (r *run) failureMessage(err error) string {
	if r.e.root.Err() != nil {
		return "template center shutting down"
	}
	return err.Error()
}

// releaseClaim marks the row this build claimed FAILED, if it still
// carries the claim.
func (r *run) releaseClaim(err error) {
	r.mu.Lock()
	claimed := r.claimed
	var id string
	if r.st.resolved != nil {
		id = r.st.resolved.ArtifactID
	}
	r.mu.Unlock()
	if !claimed {
		return
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	released := r.markFailed(ctx, id, r.failureMessage(err))
	r.mu.Lock()
	r.released = released
	r.mu.Unlock()
}

func (r *run) failed(err error) {
	st := r.snapshot()
	msg := r.failureMessage(err)
	ctx, cancel := r.finalCtx()
	defer cancel()
	u := core.Fail(st.phase, msg)
	u.PhaseDurations = r.finalDurations(st)
	if st.resolved != nil {
		u.ArtifactID = st.resolved.ArtifactID
		u.Fingerprint = st.resolved.Fingerprint
		u.SourceImageDigest = st.resolved.ImageDigest
	}
	if st.pull != (core.PullProgress{}) {
		pp := st.pull
		u.Pull = &pp
	}
	r.mu.Lock()
	if r.released {
		u.ArtifactStatus = string(core.ArtifactFailed)
	}
	r.mu.Unlock()
	r.log.Warn("build failed", "phase", st.phase, "err", err)
	r.report(ctx, ports.StatusReport{Update: u})
	r.clearProgress(ctx)
}

func (r *run) clearProgress(ctx context.Context) {
	if r.e.Progress == nil {
		return
	}
	if err := r.e.Progress.Delete(ctx, r.req.JobID); err != nil {
		r.log.Warn("delete live progress", "err", err)
	}
}

func (r *run) done(res *pipeline.Result, err error) {
	if r.c.OnDone == nil {
		return
	}
	st := r.snapshot()
	o := Outcome{JobID: r.req.JobID, Err: err, Duration: r.e.now().Sub(r.start)}
	if st.resolved != nil {
		o.ArtifactID = st.resolved.ArtifactID
	}
	r.mu.Lock()
	o.Reused = r.reused
	r.mu.Unlock()
	if err != nil {
		o.Phase = st.phase
	} else if !o.Reused {
		o.Result = res
	}
	r.c.OnDone(o)
}
