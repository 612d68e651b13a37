package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// SweepBuilt replays the resume pipeline for jobs stuck after their build
// (the upstream master's image-job reconciler): BUILT jobs, and jobs left
// in a post-build phase (RUNNING, or a PENDING redo) by a process that
// died, not updated for olderThan. A job whose artifact lock is held (a
// resume at work) is skipped. It returns how many jobs it resumed; the
// errors of failed resumes are joined (those jobs are FAILED with the
// reason).
func (s *Service) SweepBuilt(ctx context.Context, olderThan time.Duration) (int, error) {
	before := s.storeNow(ctx).Add(-olderThan)
	batch := s.cfg().Batch
	built, err := s.Store.Jobs().ListStale(ctx, ports.StaleQuery{Statuses: []core.JobStatus{core.JobBuilt}, UpdatedBefore: before, Limit: batch})
	if err != nil {
		return 0, err
	}
	mid, err := s.Store.Jobs().ListStale(ctx, ports.StaleQuery{
		Statuses:      []core.JobStatus{core.JobPending, core.JobRunning},
		Phases:        []core.Phase{core.PhaseDistributing, core.PhaseCreatingTemplate, core.PhaseSnapshotting, core.PhaseRegistering},
		UpdatedBefore: before,
		Limit:         batch,
	})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	seen := map[string]bool{}
	for _, j := range append(built, mid...) {
		if seen[j.JobID] || !resumable(j) {
			continue
		}
		seen[j.JobID] = true
		ran, err := s.resume(ctx, j.JobID, true)
		if errors.Is(err, core.ErrLocked) {
			continue
		}
		if ran {
			n++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// DefaultMigrateStaleAfter is how long an active migrate job may go without
// an update before SweepMigrations fails it.
const DefaultMigrateStaleAfter = 10 * time.Minute

// errSkipSweep aborts the guarded update of a job that moved on.
var errSkipSweep = errors.New("job moved on")

// SweepMigrations fails MIGRATE jobs left active (PENDING/RUNNING in
// MIGRATING) by a process that died, not updated for olderThan. A job whose
// artifact lock is held (a migrate at work) is skipped, and the update is
// guarded: a job that became terminal or was updated meanwhile is left
// alone. It returns how many jobs it failed.
func (s *Service) SweepMigrations(ctx context.Context, olderThan time.Duration) (int, error) {
	before := s.storeNow(ctx).Add(-olderThan)
	stale, err := s.Store.Jobs().ListStale(ctx, ports.StaleQuery{
		Statuses: []core.JobStatus{core.JobPending, core.JobRunning}, Phases: []core.Phase{core.PhaseMigrating},
		UpdatedBefore: before, Limit: s.cfg().Batch,
	})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, j := range stale {
		if j.Operation != core.OpMigrate {
			continue
		}
		lock, err := s.Locker.TryLock(ctx, resumeLockName(j.ArtifactID))
		if errors.Is(err, core.ErrLocked) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		msg := fmt.Sprintf("migrate made no progress for %s (its master stopped?); submit migrate again", olderThan)
		_, err = s.Store.Jobs().Update(ctx, j.JobID, func(cur *core.Job) error {
			if !cur.Status.Active() || cur.Phase != core.PhaseMigrating || !cur.UpdatedAt.Before(before) {
				return errSkipSweep
			}
			return cur.Apply(core.Fail(core.PhaseMigrating, msg))
		})
		s.unlock(ctx, lock)
		switch {
		case err == nil:
			n++
			s.log().Warn("stale migrate job failed", "job", j.JobID, "template", j.TemplateID)
		case !errors.Is(err, errSkipSweep) && !isNotFound(err):
			errs = append(errs, fmt.Errorf("fail stale migrate job %s: %w", j.JobID, err))
		}
	}
	return n, errors.Join(errs...)
}

// sweepStaleAfter is how long a BUILT (or mid-resume) job must have gone
// without an update before the sweep replays its resume. It is well beyond
// the moment between a callback and its background resume taking the
// artifact's lock, so the sweep never races a live callback.
const sweepStaleAfter = 2 * time.Minute

// RunSweeps runs every control-plane sweep each interval until stop is
// closed, starting with one pass at once so jobs a previous process left
// behind are picked up without waiting a full period. A pass is never
// cancelled half-way: it replays resumes, and a cancelled resume would fail
// its job, so a pass runs on its own context and stop only prevents the
// next one. The caller waits for RunSweeps to return, with its own
// deadline.
func (s *Service) RunSweeps(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.SweepOnce(context.Background())
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// SweepOnce runs one pass of every sweep: BUILT replay, stale migrates,
// artifact GC, the replica check and convergence, each logged. The pass itself has no deadline: every job it
// replays gets its own budget when its work starts (Config.ResumeTimeout),
// and every node call is bounded by the node agent.
func (s *Service) SweepOnce(ctx context.Context) {
	n, err := s.SweepBuilt(ctx, sweepStaleAfter)
	switch {
	case err != nil:
		s.log().Warn("BUILT sweep finished with failures", "resumed", n, "err", err)
	case n > 0:
		s.log().Info("BUILT sweep resumed jobs", "resumed", n)
	}
	n, err = s.SweepMigrations(ctx, DefaultMigrateStaleAfter)
	switch {
	case err != nil:
		s.log().Warn("migrate sweep finished with failures", "failed_jobs", n, "err", err)
	case n > 0:
		s.log().Info("migrate sweep failed stale jobs", "failed_jobs", n)
	}
	n, err = s.GC(ctx)
	switch {
	case err != nil:
		s.log().Warn("artifact GC finished with failures", "deleted", n, "err", err)
	case n > 0:
		s.log().Info("artifact GC deleted artifacts", "deleted", n)
	}
	// Before convergence, which redoes a replica the check found gone in
	// the same pass.
	marked, err := s.CheckReplicas(ctx)
	switch {
	case err != nil:
		s.log().Warn("replica check finished with failures", "marked_failed", len(marked), "err", err)
	case len(marked) > 0:
		s.log().Info("replica check found replicas gone from their nodes", "marked_failed", len(marked))
	}
	started, err := s.Converge(ctx)
	switch {
	case err != nil:
		s.log().Warn("convergence pass finished with failures", "started", len(started), "err", err)
	case len(started) > 0:
		s.log().Info("convergence started jobs", "started", len(started))
	}
}
