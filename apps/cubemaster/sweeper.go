package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cubesandbox/templatecenter/core/control"
)

// sweepStaleAfter is how long a BUILT (or mid-resume) job must have gone
// without an update before the sweeper replays its resume. It is well
// beyond the moment between a callback and its background resume taking
// the artifact's lock, so the sweeper never races a live callback.
const sweepStaleAfter = 2 * time.Minute

// sweeper runs the BUILT-job sweeper, the stale-migrate sweep and the artifact GC every interval
// (and once at start, so jobs a previous process left behind are picked up
// without waiting a full period).
type sweeper struct {
	svc      *control.Service
	interval time.Duration
	log      *slog.Logger
}

// run loops until stop is closed. A pass is never cancelled half-way: it
// replays resumes, and a cancelled resume would fail its job, so a pass
// runs on its own context (bounded by the resume timeout) and stop only
// prevents the next one. The caller waits for run to return, with its own
// deadline.
func (s *sweeper) run(stop <-chan struct{}) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.pass()
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func (s *sweeper) pass() {
	timeout := s.svc.Config.ResumeTimeout
	if timeout <= 0 {
		timeout = control.DefaultResumeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := s.svc.SweepBuilt(ctx, sweepStaleAfter)
	switch {
	case err != nil:
		s.log.Warn("BUILT sweep finished with failures", "resumed", n, "err", err)
	case n > 0:
		s.log.Info("BUILT sweep resumed jobs", "resumed", n)
	}
	n, err = s.svc.SweepMigrations(ctx, control.DefaultMigrateStaleAfter)
	switch {
	case err != nil:
		s.log.Warn("migrate sweep finished with failures", "failed_jobs", n, "err", err)
	case n > 0:
		s.log.Info("migrate sweep failed stale jobs", "failed_jobs", n)
	}
	n, err = s.svc.GC(ctx)
	switch {
	case err != nil:
		s.log.Warn("artifact GC finished with failures", "deleted", n, "err", err)
	case n > 0:
		s.log.Info("artifact GC deleted artifacts", "deleted", n)
	}
}
