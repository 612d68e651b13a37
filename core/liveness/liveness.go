package liveness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// DefaultTimeout is how long a build job may go without a heartbeat before
// it is failed (CUBE_TEMPLATE_BUILD_LIVENESS_TIMEOUT). With the sweep every
// sixth of it, a job whose data plane hung is failed within about a minute
// and three quarters; one whose data plane exited, within a sweep.
const DefaultTimeout = 90 * time.Second

// DefaultScanLimit caps the jobs one sweep reads.
const DefaultScanLimit = 500

// HeartbeatEvery is how often a running build touches its job row for a
// liveness timeout: six beats per timeout, so a late beat or two (a slow
// database, a pause of the process) never fails a live build.
func HeartbeatEvery(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return max(timeout/6, 100*time.Millisecond)
}

// OwnerLockName is the session lock a data-plane process holds for as long
// as it runs under its instance id. The lock is what tells the others the
// process is alive: a process that exits, however it exits, loses its
// database session and with it the lock.
func OwnerLockName(instance string) string { return "tc_owner_" + instance }

// BuildPhase reports whether a job is the data plane's: PENDING or RUNNING
// in a build phase. Post-build phases belong to the control plane's resume
// and MIGRATING to its migrate jobs; liveness never judges those.
func BuildPhase(j *core.Job) bool {
	return j.Status.Active() && !j.Phase.PostBuild() && j.Phase != core.PhaseMigrating && j.Operation != core.OpMigrate
}

// Judge decides whether build jobs were abandoned and fails those that
// were. A build job is abandoned when
//
//   - its owner (the data-plane process that accepted it, core.Job.BuildOwner)
//     no longer holds its owner lock: the process exited (or lost its
//     database session). This is decided at once; or
//   - its row was not touched for Timeout: the build stopped heartbeating
//     (a hung process, one cut off from the database, an owner of an older
//     version that does not hold the lock, or a PENDING job no data plane
//     ever took).
//
// Every replica of the data plane and the master run the same Judge; the
// guarded update makes exactly one of them fail a job.
type Judge struct {
	Store  ports.Store
	Locker ports.Locker
	Clock  ports.Clock // optional; time.Now
	// Timeout defaults to DefaultTimeout; ScanLimit to DefaultScanLimit.
	Timeout   time.Duration
	ScanLimit int
	// Self, when set, is the instance id of the calling data-plane process:
	// its own jobs are judged by the heartbeat alone (it holds the lock it
	// would test).
	Self string
	// Who names the caller in the log ("templatecenter", "cubemaster").
	Who    string
	Logger *slog.Logger // optional; slog.Default()
}

func (j *Judge) timeout() time.Duration {
	if j.Timeout <= 0 {
		return DefaultTimeout
	}
	return j.Timeout
}

func (j *Judge) log() *slog.Logger {
	if j.Logger != nil {
		return j.Logger
	}
	return slog.Default()
}

func (j *Judge) now(ctx context.Context) time.Time {
	// Ages are judged with the database's clock, which stamped the rows.
	if t, err := j.Store.Now(ctx); err == nil {
		return t
	}
	if j.Clock != nil {
		return j.Clock.Now()
	}
	return time.Now()
}

// locksShared reports whether the locker's locks are seen by every
// process (a database's); an in-process locker (SQLite's one-process mode)
// cannot tell whether another process holds its owner lock.
func (j *Judge) locksShared() bool {
	l, ok := j.Locker.(ports.ProcessLocal)
	return !ok || !l.ProcessLocal()
}

// owners caches, within one pass, whether an owner's process is alive.
type owners map[string]bool

// ownerAlive reports whether the process named instance holds its owner
// lock. Taking the lock means nobody held it: it is released at once.
func (j *Judge) ownerAlive(ctx context.Context, seen owners, instance string) (bool, error) {
	if alive, ok := seen[instance]; ok {
		return alive, nil
	}
	lk, err := j.Locker.TryLock(ctx, OwnerLockName(instance))
	switch {
	case errors.Is(err, core.ErrLocked):
		seen[instance] = true
		return true, nil
	case err != nil:
		return false, fmt.Errorf("owner lock of %s: %w", instance, err)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_ = lk.Unlock(uctx)
	cancel()
	seen[instance] = false
	return false, nil
}

// verdict says why job is abandoned, or "" when it is not (or is no build
// job at all).
func (j *Judge) verdict(ctx context.Context, seen owners, job *core.Job, now time.Time) (string, error) {
	if !BuildPhase(job) {
		return "", nil
	}
	if job.BuildOwner != "" && job.BuildOwner != j.Self && j.locksShared() {
		alive, err := j.ownerAlive(ctx, seen, job.BuildOwner)
		if err != nil {
			return "", err
		}
		if !alive {
			return fmt.Sprintf("build abandoned: the template center that ran it (%s) stopped; retry the template", job.BuildOwner), nil
		}
	}
	if age := now.Sub(job.UpdatedAt); age > j.timeout() {
		if job.BuildOwner == "" && job.Status == core.JobPending {
			return fmt.Sprintf("build was never started: no template center took the job within %s; retry the template", j.timeout()), nil
		}
		return fmt.Sprintf("build abandoned: no heartbeat from its template center for %s (it hung or lost the database); retry the template", age.Round(time.Second)), nil
	}
	return "", nil
}

// errMovedOn aborts the guarded update of a job that changed since it was
// judged.
var errMovedOn = errors.New("job changed since it was judged")

// fail fails job with msg unless it changed since it was read. It reports
// whether this call failed it.
func (j *Judge) fail(ctx context.Context, job *core.Job, msg string) (bool, error) {
	_, err := j.Store.Jobs().Update(ctx, job.JobID, func(cur *core.Job) error {
		if cur.Status != job.Status || cur.Phase != job.Phase || cur.BuildOwner != job.BuildOwner || !cur.UpdatedAt.Equal(job.UpdatedAt) {
			return errMovedOn
		}
		return cur.Apply(core.Fail(cur.Phase, msg))
	})
	switch {
	case err == nil:
		j.log().Warn("failed abandoned build job", "job_id", job.JobID, "template_id", job.TemplateID, "status", job.Status,
			"phase", job.Phase, "owner", job.BuildOwner, "updated_at", job.UpdatedAt, "by", j.Who, "reason", msg)
		return true, nil
	case errors.Is(err, errMovedOn), errors.Is(err, core.ErrStaleUpdate), errors.Is(err, core.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("fail abandoned job %s: %w", job.JobID, err)
}

// FailIfAbandoned fails job if it is an abandoned build job and reports
// whether it is no longer active (failed by this call or meanwhile by
// another). Redo, delete and create call it on the active job that stands
// in their way, so a template whose data plane died is freed at once.
func (j *Judge) FailIfAbandoned(ctx context.Context, job *core.Job) (bool, error) {
	msg, err := j.verdict(ctx, owners{}, job, j.now(ctx))
	if err != nil || msg == "" {
		return false, err
	}
	if _, err := j.fail(ctx, job, msg); err != nil {
		return false, err
	}
	cur, err := j.Store.Jobs().Get(ctx, job.JobID)
	if errors.Is(err, core.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return !cur.Status.Active(), nil
}

// FailRestarted fails the active build jobs of previous, an earlier run of
// the calling data plane (its work directory names it): that process is
// gone, so its builds are failed at once, whatever locks can tell. When
// previous still holds its owner lock, another running process uses the
// same work directory: nothing is failed and the error says so.
func (j *Judge) FailRestarted(ctx context.Context, previous string) ([]string, error) {
	if previous == "" || previous == j.Self {
		return nil, nil
	}
	if j.locksShared() {
		alive, err := j.ownerAlive(ctx, owners{}, previous)
		if err != nil {
			return nil, err
		}
		if alive {
			return nil, fmt.Errorf("template center %s, which used this work directory before, is still running: give every replica a work directory of its own", previous)
		}
	}
	jobs, err := j.activeBuilds(ctx)
	if err != nil {
		return nil, err
	}
	var failed []string
	var errs []error
	for _, job := range jobs {
		if job.BuildOwner != previous || !BuildPhase(job) {
			continue
		}
		msg := fmt.Sprintf("build abandoned: its template center (%s) restarted; retry the template", previous)
		ok, err := j.fail(ctx, job, msg)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			failed = append(failed, job.JobID)
		}
	}
	return failed, errors.Join(errs...)
}

func (j *Judge) activeBuilds(ctx context.Context) ([]*core.Job, error) {
	limit := j.ScanLimit
	if limit <= 0 {
		limit = DefaultScanLimit
	}
	jobs, err := j.Store.Jobs().ListStale(ctx, ports.StaleQuery{
		Statuses: []core.JobStatus{core.JobPending, core.JobRunning},
		Phases:   []core.Phase{"", core.PhasePulling, core.PhaseUnpacking, core.PhaseBuildingExt4, core.PhaseGeneratingJSON, core.PhaseUploading},
		Limit:    limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list active build jobs: %w", err)
	}
	return jobs, nil
}

// Sweep judges every active build job once and fails the abandoned ones.
// It returns the jobs it failed; a job whose owner's lock cannot be
// tested is left for the next sweep and its error joined.
func (j *Judge) Sweep(ctx context.Context) ([]string, error) {
	jobs, err := j.activeBuilds(ctx)
	if err != nil {
		return nil, err
	}
	now := j.now(ctx)
	seen := owners{}
	var failed []string
	var errs []error
	for _, job := range jobs {
		if err := ctx.Err(); err != nil {
			return failed, err
		}
		msg, err := j.verdict(ctx, seen, job, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if msg == "" {
			continue
		}
		ok, err := j.fail(ctx, job, msg)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			failed = append(failed, job.JobID)
		}
	}
	return failed, errors.Join(errs...)
}

// Run sweeps at once and then every sixth of the timeout until ctx ends.
func (j *Judge) Run(ctx context.Context) {
	t := time.NewTicker(HeartbeatEvery(j.timeout()))
	defer t.Stop()
	for {
		if _, err := j.Sweep(ctx); err != nil && ctx.Err() == nil {
			j.log().Warn("liveness sweep", "by", j.Who, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Owner holds a data-plane process's owner lock for as long as it runs.
type Owner struct {
	// ID is the process's instance id (what its jobs' BuildOwner says).
	ID string

	cancel context.CancelFunc
	done   chan struct{}
}

// HoldOwner takes the owner lock of instance and keeps it until Release:
// a lock that is lost (the database session died) is taken again as soon
// as the database answers. It returns once the lock is first held, or with
// ctx's error.
func HoldOwner(ctx context.Context, locker ports.Locker, instance string, log *slog.Logger) (*Owner, error) {
	if log == nil {
		log = slog.Default()
	}
	name := OwnerLockName(instance)
	lk, err := locker.Lock(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("owner lock %s: %w", name, err)
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o := &Owner{ID: instance, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for {
			select {
			case <-hctx.Done():
				uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = lk.Unlock(uctx)
				cancel()
				return
			case <-lk.Lost():
			}
			log.Warn("owner lock lost; the other replicas and the master may fail this process's builds as abandoned", "lock", name)
			for {
				next, err := locker.Lock(hctx, name)
				if err == nil {
					lk = next
					log.Info("owner lock taken again", "lock", name)
					break
				}
				if hctx.Err() != nil {
					return
				}
				select {
				case <-hctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return o, nil
}

// Release gives the owner lock up (at shutdown, after the builds ended).
func (o *Owner) Release() {
	if o == nil {
		return
	}
	o.cancel()
	<-o.done
}
