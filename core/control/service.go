package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/liveness"
	"github.com/cubesandbox/templatecenter/ports"
)

// Defaults of Config.
const (
	DefaultDistributionWorkers = 16
	DefaultArtifactTTL         = 7 * 24 * time.Hour
	DefaultStaleAfter          = 10 * time.Minute
	DefaultResumeTimeout       = 30 * time.Minute
	DefaultLockWait            = 30 * time.Minute
	DefaultBatch               = 200
	DefaultConvergeBackoff     = 10 * time.Minute
	DefaultConvergeAtOnce      = 4
	DefaultReplicaCheckAtOnce  = 32
)

// Config tunes the Service. Zero values take the defaults above.
type Config struct {
	// DistributionWorkers bounds the parallel node RPCs of one job
	// (CreateImage, AppSnapshot, DestroyImage). Upstream uses 4, which
	// sends a template to 8 nodes in two waves: each node's download is
	// bound by its own disk and network, so more at once finishes sooner;
	// the data plane's serving bandwidth is shared whatever the number.
	DistributionWorkers int
	// ArtifactTTL is how long an artifact without references survives
	// before GC removes it (gc_deadline = now + ArtifactTTL, renewed
	// whenever the artifact is used).
	ArtifactTTL time.Duration
	// DownloadBaseURL, when set, is the base URL nodes download artifacts
	// from (http://host:port), overriding the base URL recorded from the
	// create request. Set it when the API address clients use is not one
	// nodes can reach.
	DownloadBaseURL string
	// NodeDownloadBaseURL, when set, is the base of the download URL every
	// node is sent, instead of the artifact's: a node-local cache that
	// fetches from the master itself (nodeagent --cache-listen).
	NodeDownloadBaseURL string
	// SnapshotDir is passed to AppSnapshot; "" lets the node choose.
	SnapshotDir string
	// StaleAfter is how long an active (or BUILT) job must have gone
	// without an update before Delete may fail it instead of refusing.
	StaleAfter time.Duration
	// ResumeTimeout bounds the work of one resume or migrate job. The
	// budget starts when the work does: once the job holds its artifact's
	// lock, never shared with other jobs of a sweep pass.
	ResumeTimeout time.Duration
	// ConvergeDisabled turns off convergence: READY templates no longer
	// reach healthy in-scope nodes that lack them on their own (a node
	// that was down, or one that joined later); redo still does.
	ConvergeDisabled bool
	// ConvergeBackoff is how long convergence leaves a template alone
	// after one of its convergence jobs failed.
	ConvergeBackoff time.Duration
	// ConvergeAtOnce bounds the convergence jobs one pass starts.
	ConvergeAtOnce int
	// ReplicaCheckDisabled turns the replica check off (CheckReplicas);
	// ReplicaCheckAtOnce bounds the replicas one pass checks.
	ReplicaCheckDisabled bool
	ReplicaCheckAtOnce   int
	// LockWait bounds how long a background job waits for its artifact's
	// lock (another template may be distributing the same artifact).
	LockWait time.Duration
	// Batch bounds how many rows one GC or sweep pass looks at.
	Batch int
	// DownloadTokens turns an artifact row's stored seed into the token
	// nodes download with (core.DownloadTokens: derived from the callback
	// token, which the data plane checks it with). The zero value hands
	// out the stored value, as upstream did.
	DownloadTokens core.DownloadTokens
	// BuildLiveness is how long a build job may go without a heartbeat
	// from its data plane before it is failed (core/liveness; default
	// liveness.DefaultTimeout). The master judges builds too, so a job
	// whose only data plane died is freed without it.
	BuildLiveness time.Duration
	// PlacementPolicy is the configuration's placement policy
	// (CUBE_MASTER_PLACEMENT_POLICY_FILE); one set through the API takes
	// its place. nil: every template everywhere.
	PlacementPolicy *core.PlacementPolicy
	// PlacementAtOnce bounds the actions of one placement pass;
	// PlacementDecisionsKept the decisions the store keeps per template.
	PlacementAtOnce        int
	PlacementDecisionsKept int
	// MasterName names this master in the decisions it records.
	MasterName string
}

func (c Config) withDefaults() Config {
	if c.DistributionWorkers <= 0 {
		c.DistributionWorkers = DefaultDistributionWorkers
	}
	if c.ArtifactTTL <= 0 {
		c.ArtifactTTL = DefaultArtifactTTL
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.ResumeTimeout <= 0 {
		c.ResumeTimeout = DefaultResumeTimeout
	}
	if c.LockWait <= 0 {
		c.LockWait = DefaultLockWait
	}
	if c.ConvergeBackoff <= 0 {
		c.ConvergeBackoff = DefaultConvergeBackoff
	}
	if c.ConvergeAtOnce <= 0 {
		c.ConvergeAtOnce = DefaultConvergeAtOnce
	}
	if c.ReplicaCheckAtOnce <= 0 {
		c.ReplicaCheckAtOnce = DefaultReplicaCheckAtOnce
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.PlacementAtOnce <= 0 {
		c.PlacementAtOnce = DefaultPlacementAtOnce
	}
	if c.PlacementDecisionsKept <= 0 {
		c.PlacementDecisionsKept = DefaultPlacementDecisionsKept
	}
	if c.BuildLiveness <= 0 {
		c.BuildLiveness = liveness.DefaultTimeout
	}
	return c
}

// liveness is the judge of the data plane's build jobs (core/liveness).
func (s *Service) liveness() *liveness.Judge {
	return &liveness.Judge{Store: s.Store, Locker: s.Locker, Clock: s.Clock, Timeout: s.cfg().BuildLiveness,
		ScanLimit: s.cfg().Batch, Who: "cubemaster", Logger: s.log()}
}

// RunLiveness fails abandoned build jobs until ctx ends: a sweep at once,
// then every sixth of Config.BuildLiveness (core/liveness). The master
// runs it beside the data plane's replicas, so a template whose only data
// plane died is freed all the same.
func (s *Service) RunLiveness(ctx context.Context) { s.liveness().Run(ctx) }

// freeAbandoned fails job when it is a build its data plane abandoned and
// reports whether it is no longer active: create, redo and delete then go
// ahead instead of answering that the job is in the way.
func (s *Service) freeAbandoned(ctx context.Context, job *core.Job) bool {
	free, err := s.liveness().FailIfAbandoned(ctx, job)
	if err != nil {
		s.log().Warn("could not judge whether the job in the way was abandoned", "job", job.JobID, "err", err)
		return false
	}
	return free
}

// Service is the control plane's template service. Store, Locker, Nodes,
// Agent, DataPlane and IDs are required; Clock defaults to the system
// clock. Progress and Logger are optional; without Envd, requests that opt
// in to envd injection without uploading one are refused; without CubeCA
// the data plane bakes its own CubeEgress root CA, if it has one; without
// Legacy, migrate finds no local copies. A Service must not be copied
// after first use (it tracks its background resumes).
type Service struct {
	Store     ports.Store
	Locker    ports.Locker
	Nodes     ports.NodeDirectory
	Agent     ports.NodeAgent
	DataPlane ports.DataPlane
	Envd      ports.EnvdSource
	// CubeCA is the CubeEgress root CA this master serves on /cube/ca,
	// sent with every build that wants it baked (with_cube_ca).
	CubeCA ports.CubeCASource
	Legacy ports.LegacyArtifacts
	// Sealer seals the registry credentials of a request so that a redo
	// can rebuild a private image; without it they are not kept.
	Sealer   ports.Sealer
	IDs      ports.IDs
	Clock    ports.Clock
	Progress ports.ProgressSink
	Config   Config
	Logger   *slog.Logger
	// ObservePlacement, when set, is told every placement decision (the
	// master's wiring counts them in a metric).
	ObservePlacement func(core.PlacementDecision)

	bg            sync.WaitGroup
	replicaCursor replicaCursor
}

// Wait blocks until every background resume started so far has returned
// (tests, graceful shutdown) or ctx ends.
func (s *Service) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Service) cfg() Config { return s.Config.withDefaults() }

func (s *Service) log() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// storeNow is the store's clock, which stamps every row: ages of rows are
// judged against it, not against this host's clock (see ports.Store.Now).
// If the store cannot tell, this host's clock stands in.
func (s *Service) storeNow(ctx context.Context) time.Time {
	if t, err := s.Store.Now(ctx); err == nil {
		return t
	}
	return s.now()
}

func (s *Service) now() time.Time {
	if s.Clock != nil {
		return s.Clock.Now()
	}
	return time.Now()
}

// gcDeadline is the unix second an unreferenced artifact may be collected:
// the store's now plus the TTL, so that every master writes and judges
// deadlines by one clock whatever its host's says. Call it before, not
// inside, a store update (it may ask the store).
func (s *Service) gcDeadline(ctx context.Context) int64 {
	return s.storeNow(ctx).Add(s.cfg().ArtifactTTL).Unix()
}

// resumeLockName is the per-artifact lock that serializes registration,
// distribution and cleanup of one artifact across processes, so the
// callback, the sweeper, redo and delete never interleave on it.
func resumeLockName(artifactID string) string { return "tc_resume_" + artifactID }

// detached returns a context that survives the caller's cancellation (a
// finished HTTP request, a resume that hit its timeout) for the few writes
// that record an outcome, bounded by d.
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// goBackground runs fn on its own goroutine with a detached, bounded
// context and panic recovery; Wait waits for it.
func (s *Service) goBackground(ctx context.Context, what string, fn func(ctx context.Context) error) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		// The job applies its own budgets (lock wait, then work); this
		// bound only stops a runaway.
		bctx, cancel := detached(ctx, s.cfg().LockWait+s.cfg().ResumeTimeout)
		defer cancel()
		defer func() {
			if r := recover(); r != nil {
				s.log().Error("background task panicked", "task", what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			}
		}()
		if err := fn(bctx); err != nil {
			s.log().Warn("background task failed", "task", what, "err", err)
		}
	}()
}

// unlock releases l even when ctx is already done.
func (s *Service) unlock(ctx context.Context, l ports.Lock) {
	uctx, cancel := detached(ctx, 10*time.Second)
	defer cancel()
	if err := l.Unlock(uctx); err != nil {
		s.log().Warn("unlock failed", "lock", l.Name(), "err", err)
	}
}

// fanOut calls fn for 0..n-1 on at most workers goroutines (one when
// workers <= 0) and waits. It is the control plane's one bounded fan-out:
// every call to many nodes goes through it, bounded by
// Config.DistributionWorkers. It takes no context: every call is made,
// each with the caller's context, so each node's outcome is recorded.
func fanOut(n, workers int, fn func(i int)) {
	if workers <= 0 {
		workers = 1
	}
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}

// isNotFound is errors.Is(err, core.ErrNotFound).
func isNotFound(err error) bool { return errors.Is(err, core.ErrNotFound) }

// lockArtifact takes the artifact's lock: at once or not at all with try,
// else waiting at most Config.LockWait.
func (s *Service) lockArtifact(ctx context.Context, artifactID string, try bool) (ports.Lock, error) {
	name := resumeLockName(artifactID)
	if try {
		return s.Locker.TryLock(ctx, name)
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg().LockWait)
	defer cancel()
	return s.Locker.Lock(lctx, name)
}

// lockTemplate takes the template's lock (waiting at most Config.LockWait):
// it serializes everything that writes a template's jobs, definition and
// replicas as a whole (create, redo, migrate, synchronous create, delete).
func (s *Service) lockTemplate(ctx context.Context, templateID string) (ports.Lock, error) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg().LockWait)
	defer cancel()
	return s.Locker.Lock(lctx, templateLockName(templateID))
}

// errLockLost is why work stops when the lock protecting it is lost. It
// wraps core.ErrConflict: the caller may retry.
var errLockLost = fmt.Errorf("the lock protecting this work was lost (its database session died); another master may hold it now, so this one stopped and left the job to the sweep: %w", core.ErrConflict)

// whileHeld returns ctx cancelled (with errLockLost as the cause) once l is
// lost: the work it protects stops before it writes anything more.
func whileHeld(ctx context.Context, l ports.Lock) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-l.Lost():
			cancel(errLockLost)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// lockLost reports whether ctx was cancelled because its lock was lost.
func lockLost(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errLockLost) }

// stillHeld returns errLockLost once l is lost, read from l itself (the
// watcher of whileHeld cancels a moment later), else ctx's error: the
// check a holder makes before a write the lock protects.
func stillHeld(ctx context.Context, l ports.Lock) error {
	select {
	case <-l.Lost():
		return errLockLost
	default:
	}
	if lockLost(ctx) {
		return errLockLost
	}
	return ctx.Err()
}

// holdTemplate takes the template's lock (lockTemplate) and returns ctx
// cancelled once the lock is lost (whileHeld), the lock, and done, which
// stops the watch and releases the lock. Everything that writes a
// template as a whole runs under it.
func (s *Service) holdTemplate(ctx context.Context, templateID string) (context.Context, ports.Lock, func(), error) {
	lock, err := s.lockTemplate(ctx, templateID)
	if err != nil {
		return ctx, nil, nil, err
	}
	wctx, release := whileHeld(ctx, lock)
	return wctx, lock, func() {
		release()
		s.unlock(ctx, lock)
	}, nil
}

// runFence is the run number a resume or migrate took for its job; the
// job writes of the run carry it (see core.Job.Fence).
type runFence struct {
	jobID string
	fence int64
}

type fenceKey struct{}

// claimRun gives the job the next run number, under the job's lock, and
// returns the job and ctx carrying the number: every job write made with
// that ctx is refused (core.ErrFenced) once a later run has claimed the
// job, so a run whose lock was lost and taken over can no longer publish.
func (s *Service) claimRun(ctx context.Context, jobID string) (*core.Job, context.Context, error) {
	job, err := s.Store.Jobs().Update(ctx, jobID, func(j *core.Job) error {
		j.Fence++
		return nil
	})
	if err != nil {
		return nil, ctx, fmt.Errorf("claim job %s: %w", jobID, err)
	}
	return job, context.WithValue(ctx, fenceKey{}, runFence{jobID: jobID, fence: job.Fence}), nil
}

// fenceOf is the run number ctx carries for jobID, or 0.
func fenceOf(ctx context.Context, jobID string) int64 {
	if f, ok := ctx.Value(fenceKey{}).(runFence); ok && f.jobID == jobID {
		return f.fence
	}
	return 0
}

// fenced runs fn in a transaction that first checks that the run of ctx
// still holds its job: a write that publishes (the definition's status)
// lands only for the current run.
func (s *Service) fenced(ctx context.Context, jobID string, fn func(ctx context.Context, r ports.Repos) error) error {
	f := fenceOf(ctx, jobID)
	return s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		if f != 0 {
			if _, err := r.Jobs().Update(ctx, jobID, func(j *core.Job) error {
				if j.Fence != f {
					return fmt.Errorf("job %s: run %d writes, run %d holds it: %w", jobID, f, j.Fence, core.ErrFenced)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return fn(ctx, r)
	})
}

// upsertReplica writes a replica row for the run of ctx (fenced): the
// rows are what sandboxes are scheduled by, so a run that a later run has
// superseded must not write them.
func (s *Service) upsertReplica(ctx context.Context, jobID string, r *core.Replica) error {
	return s.fenced(ctx, jobID, func(ctx context.Context, repos ports.Repos) error {
		return repos.Templates().UpsertReplica(ctx, r)
	})
}
