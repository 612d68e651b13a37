package data

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// LockName is the session lock that makes one reconcile tick run on one
// replica at a time.
const LockName = "tc_reconcile_v1"

// Defaults of ReconcilerConfig (env CUBE_TEMPLATE_CENTER_RECONCILE_*, Go durations).
const (
	DefaultInterval            = 10 * time.Minute
	DefaultScanLimit           = 200
	DefaultPendingStaleAfter   = 10 * time.Minute
	DefaultPullingStaleAfter   = 30 * time.Minute
	DefaultRunningStaleAfter   = time.Hour
	DefaultCleanupPendingAfter = 5 * time.Minute
	DefaultScratchMaxAge       = 6 * time.Hour
)

// buildPhases are the phases the data plane owns while a job is PENDING or
// RUNNING. Post-build phases belong to the control plane's resume pipeline
// and MIGRATING to its migrate jobs; the reconciler never touches those.
var (
	pendingPhases = []core.Phase{"", core.PhasePulling, core.PhaseUnpacking, core.PhaseBuildingExt4, core.PhaseGeneratingJSON, core.PhaseUploading}
	runningPhases = []core.Phase{core.PhaseUnpacking, core.PhaseBuildingExt4, core.PhaseGeneratingJSON, core.PhaseUploading}
)

// ReconcilerConfig tunes the reconciler. Zero durations and limits take the defaults.
type ReconcilerConfig struct {
	Disabled bool
	Interval time.Duration
	// ScanLimit caps the rows read per tier and tick.
	ScanLimit int
	// PendingStaleAfter: a PENDING job no build picked up.
	PendingStaleAfter time.Duration
	// PullingStaleAfter: a RUNNING job in PULLING without a report.
	PullingStaleAfter time.Duration
	// RunningStaleAfter: a RUNNING job in another build phase without a
	// report.
	RunningStaleAfter time.Duration
	// CleanupPendingAfter: a CLEANUP_PENDING artifact the control plane's
	// delete did not finish.
	CleanupPendingAfter time.Duration
	// DeleteArtifact is the data plane's deleter (Deleter.Delete); nil
	// disables the CLEANUP_PENDING backstop.
	DeleteArtifact func(ctx context.Context, artifactID string) error
	// ScratchDir, when set, is swept of build-* directories untouched for
	// ScratchMaxAge (default 6h) when Run starts and on every tick.
	ScratchDir    string
	ScratchMaxAge time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c ReconcilerConfig) withDefaults() ReconcilerConfig {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.Interval, DefaultInterval)
	set(&c.PendingStaleAfter, DefaultPendingStaleAfter)
	set(&c.PullingStaleAfter, DefaultPullingStaleAfter)
	set(&c.RunningStaleAfter, DefaultRunningStaleAfter)
	set(&c.CleanupPendingAfter, DefaultCleanupPendingAfter)
	set(&c.ScratchMaxAge, DefaultScratchMaxAge)
	if c.ScanLimit <= 0 {
		c.ScanLimit = DefaultScanLimit
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Reconciler sweeps stale jobs and stuck artifact deletions.
type Reconciler struct {
	Store  ports.Store
	Locker ports.Locker
	Clock  ports.Clock // optional; time.Now
	Config ReconcilerConfig
}

// Report says what one tick did.
type Report struct {
	// Skipped is true when another replica held the reconcile lock; nothing
	// else was done.
	Skipped bool
	// Failed lists the jobs this tick moved to FAILED.
	Failed []string
	// MovedOn counts stale candidates that changed between the scan and the
	// guarded update (a late progress report, another reconciler).
	MovedOn int
	// Deleted lists CLEANUP_PENDING artifacts the deleter removed;
	// DeleteErrors counts those it could not, and Kept those still
	// referenced or still placed on nodes (left to the control plane).
	Deleted      []string
	DeleteErrors int
	Kept         int
	// ScratchRemoved counts removed scratch directories.
	ScratchRemoved int
	// AbandonedArtifacts lists PENDING or BUILDING artifact rows failed
	// because no build holds them any more (their builder died).
	AbandonedArtifacts []string
}

// tier is one staleness rule.
type tier struct {
	status core.JobStatus
	phases []core.Phase
	after  time.Duration
	msg    string
}

func (r *Reconciler) tiers(c ReconcilerConfig) []tier {
	return []tier{
		{core.JobPending, pendingPhases, c.PendingStaleAfter,
			fmt.Sprintf("build was never started: job stayed PENDING for more than %s (template center unavailable or restarted); retry the template", c.PendingStaleAfter)},
		{core.JobRunning, []core.Phase{core.PhasePulling}, c.PullingStaleAfter,
			fmt.Sprintf("build abandoned while pulling the source image: no progress report for %s (template center restarted or lost); retry the template", c.PullingStaleAfter)},
		{core.JobRunning, runningPhases, c.RunningStaleAfter,
			fmt.Sprintf("build abandoned: no progress report for %s (template center restarted or lost); retry the template", c.RunningStaleAfter)},
	}
}

func (r *Reconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

// errMovedOn aborts a guarded update whose job is no longer the one scanned.
var errMovedOn = errors.New("job changed since the scan")

// RunOnce runs one tick: the scratch sweep, then, under the reconcile
// session lock, the three staleness tiers and the CLEANUP_PENDING backstop.
// Another replica holding the lock is not an error: the report says
// Skipped. Per-row failures are logged and counted; the error is for a
// failure that stopped the tick (lock or scan).
func (r *Reconciler) RunOnce(ctx context.Context) (Report, error) {
	c := r.Config.withDefaults()
	var rep Report
	if c.ScratchDir != "" {
		n, err := SweepScratch(c.ScratchDir, c.ScratchMaxAge, r.now())
		rep.ScratchRemoved = n
		if err != nil {
			c.Logger.Warn("sweep build scratch", "dir", c.ScratchDir, "err", err)
		}
	}
	lk, err := r.Locker.TryLock(ctx, LockName)
	if errors.Is(err, core.ErrLocked) {
		rep.Skipped = true
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("reconcile lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := lk.Unlock(uctx); err != nil {
			c.Logger.Warn("release reconcile lock", "err", err)
		}
	}()

	// Ages are judged against the store's clock, which stamped the rows;
	// the reconciler's host may run ahead of or behind it.
	now := r.now()
	if t, err := r.Store.Now(ctx); err == nil {
		now = t
	}
	for _, t := range r.tiers(c) {
		if err := r.sweepTier(ctx, c, t, now, &rep); err != nil {
			return rep, err
		}
	}
	if err := r.sweepAbandonedArtifacts(ctx, c, now, &rep); err != nil {
		return rep, err
	}
	if c.DeleteArtifact != nil {
		if err := r.cleanupBackstop(ctx, c, now, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (r *Reconciler) sweepTier(ctx context.Context, c ReconcilerConfig, t tier, now time.Time, rep *Report) error {
	cutoff := now.Add(-t.after)
	jobs, err := r.Store.Jobs().ListStale(ctx, ports.StaleQuery{
		Statuses:      []core.JobStatus{t.status},
		Phases:        t.phases,
		UpdatedBefore: cutoff,
		Limit:         c.ScanLimit,
	})
	if err != nil {
		return fmt.Errorf("scan stale %s jobs: %w", t.status, err)
	}
	for _, scanned := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := r.Store.Jobs().Update(ctx, scanned.JobID, func(j *core.Job) error {
			// The store's compare-and-set guards the write; this re-check
			// makes a retried round (after a concurrent report) give up
			// instead of failing a job that just showed signs of life.
			if j.Status != scanned.Status || j.Phase != scanned.Phase || !j.UpdatedAt.Equal(scanned.UpdatedAt) {
				return errMovedOn
			}
			return j.Apply(core.Fail(j.Phase, t.msg))
		})
		switch {
		case err == nil:
			rep.Failed = append(rep.Failed, scanned.JobID)
			c.Logger.Warn("failed stale job", "job_id", scanned.JobID, "template_id", scanned.TemplateID,
				"status", scanned.Status, "phase", scanned.Phase, "updated_at", scanned.UpdatedAt)
		case errors.Is(err, errMovedOn), errors.Is(err, core.ErrStaleUpdate), errors.Is(err, core.ErrNotFound):
			rep.MovedOn++
		default:
			c.Logger.Error("fail stale job", "job_id", scanned.JobID, "err", err)
		}
	}
	return nil
}

// cleanupBackstop finishes deletions the control plane started but did not
// hand to the deleter (a lost notification, a crash after phase 3), and
// deletions a deleter left half done (DELETING). A row
// still referenced or still placed on nodes is left alone: deleting it
// would break a template or lose track of node copies, and the control
// plane's delete or GC owns those.
func (r *Reconciler) cleanupBackstop(ctx context.Context, c ReconcilerConfig, now time.Time, rep *Report) error {
	var arts []*core.Artifact
	// DELETING rows that old belong to a deleter that crashed or could not
	// delete the row after the bytes.
	for _, st := range []core.ArtifactStatus{core.ArtifactCleanupPending, core.ArtifactDeleting} {
		got, err := r.Store.Artifacts().ListByStatus(ctx, st, now.Add(-c.CleanupPendingAfter), c.ScanLimit)
		if err != nil {
			return fmt.Errorf("scan %s artifacts: %w", st, err)
		}
		arts = append(arts, got...)
	}
	for _, a := range arts {
		if err := ctx.Err(); err != nil {
			return err
		}
		refs, err := r.Store.Artifacts().CountReferences(ctx, a.ArtifactID, "")
		if err != nil {
			rep.DeleteErrors++
			c.Logger.Error("count artifact references", "artifact_id", a.ArtifactID, "err", err)
			continue
		}
		placed, err := r.Store.Placements().List(ctx, a.ArtifactID)
		if err != nil {
			rep.DeleteErrors++
			c.Logger.Error("list artifact placements", "artifact_id", a.ArtifactID, "err", err)
			continue
		}
		if refs > 0 || len(placed) > 0 {
			rep.Kept++
			c.Logger.Info("CLEANUP_PENDING artifact kept for the control plane", "artifact_id", a.ArtifactID, "references", refs, "placements", len(placed))
			continue
		}
		if err := c.DeleteArtifact(ctx, a.ArtifactID); err != nil {
			rep.DeleteErrors++
			c.Logger.Error("delete CLEANUP_PENDING artifact", "artifact_id", a.ArtifactID, "err", err)
			continue
		}
		rep.Deleted = append(rep.Deleted, a.ArtifactID)
	}
	return nil
}

// Run sweeps once at once and then every Interval until ctx ends; it
// returns nil at once when the reconciler is disabled.
func (r *Reconciler) Run(ctx context.Context) error {
	c := r.Config.withDefaults()
	if c.Disabled {
		c.Logger.Info("reconciler disabled")
		return nil
	}
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		rep, err := r.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.Logger.Error("reconcile tick", "err", err)
		case len(rep.Failed) > 0 || len(rep.Deleted) > 0 || rep.ScratchRemoved > 0:
			c.Logger.Info("reconcile tick", "failed_jobs", len(rep.Failed), "deleted_artifacts", len(rep.Deleted), "scratch_removed", rep.ScratchRemoved)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sweepAbandonedArtifacts fails artifact rows a build claimed (PENDING,
// BUILDING) and then left: older than RunningStaleAfter and with no build
// holding the spec's fingerprint lock. A failed row is rebuilt by the next
// build of its spec and collected by GC otherwise; left alone, it would
// only ever be reclaimed by such a build.
func (r *Reconciler) sweepAbandonedArtifacts(ctx context.Context, c ReconcilerConfig, now time.Time, rep *Report) error {
	cutoff := now.Add(-c.RunningStaleAfter)
	for _, st := range []core.ArtifactStatus{core.ArtifactPending, core.ArtifactBuilding} {
		rows, err := r.Store.Artifacts().ListByStatus(ctx, st, cutoff, c.ScanLimit)
		if err != nil {
			return fmt.Errorf("scan %s artifacts: %w", st, err)
		}
		for _, a := range rows {
			if a.Fingerprint == "" {
				continue
			}
			lk, err := r.Locker.TryLock(ctx, LockPrefix+a.Fingerprint)
			if errors.Is(err, core.ErrLocked) {
				continue // a build is at work on it
			}
			if err != nil {
				return fmt.Errorf("fingerprint lock of %s: %w", a.ArtifactID, err)
			}
			msg := fmt.Sprintf("build abandoned: the row stayed %s for more than %s with no build at work; the next build of this spec rebuilds it", st, c.RunningStaleAfter)
			_, err = r.Store.Artifacts().Update(ctx, a.ArtifactID, func(cur *core.Artifact) error {
				if cur.Status != st || !cur.UpdatedAt.Equal(a.UpdatedAt) {
					return errMovedOn
				}
				cur.Status, cur.LastError = core.ArtifactFailed, msg
				return nil
			})
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_ = lk.Unlock(uctx)
			cancel()
			switch {
			case err == nil:
				rep.AbandonedArtifacts = append(rep.AbandonedArtifacts, a.ArtifactID)
				c.Logger.Warn("abandoned artifact row failed", "artifact_id", a.ArtifactID, "was", st)
			case errors.Is(err, errMovedOn), errors.Is(err, core.ErrNotFound):
			default:
				c.Logger.Warn("fail abandoned artifact row", "artifact_id", a.ArtifactID, "err", err)
			}
		}
	}
	return nil
}
