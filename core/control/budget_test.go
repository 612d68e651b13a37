package control_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// stuckBuilt makes tid's job BUILT with fp's artifact, as if its resume
// never ran.
func (e *env) stuckBuilt(tid, fp string) *core.Job {
	e.t.Helper()
	job := e.create(request(tid))
	if err := e.store.Artifacts().Create(e.ctx, artifactMeta(fp)); err != nil {
		e.t.Fatal(err)
	}
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID, u.Fingerprint = aidOf(fp), fp
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { return j.Apply(u) }); err != nil {
		e.t.Fatal(err)
	}
	return job
}

// budgetProbe makes CreateImage record how much of its context's budget is
// left, optionally after taking some time itself.
type budgetProbe struct {
	mu   sync.Mutex
	left map[string]time.Duration // artifact id -> time left at CreateImage
	slow map[string]time.Duration // artifact id -> how long CreateImage takes
}

func (e *env) probeBudgets() *budgetProbe {
	p := &budgetProbe{left: map[string]time.Duration{}, slow: map[string]time.Duration{}}
	e.agent.CreateImageFunc = func(ctx context.Context, _ ports.Node, art core.NodeArtifact) error {
		dl, ok := ctx.Deadline()
		p.mu.Lock()
		if ok {
			p.left[art.ArtifactID] = time.Until(dl)
		} else {
			p.left[art.ArtifactID] = time.Duration(1 << 62)
		}
		d := p.slow[art.ArtifactID]
		p.mu.Unlock()
		time.Sleep(d)
		return nil
	}
	return p
}

func (p *budgetProbe) leftFor(aid string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left[aid]
}

// TestSweepGivesEveryJobItsOwnBudget: one sweep pass replays two jobs one
// after the other; the second must not inherit what the first used of a
// shared budget (before, the pass had one ResumeTimeout for all jobs and a
// backlog ended in "context deadline exceeded").
func TestSweepGivesEveryJobItsOwnBudget(t *testing.T) {
	e := newEnv(t, "node-1")
	e.svc.Config.ResumeTimeout = 2 * time.Second
	p := e.probeBudgets()
	a := e.stuckBuilt("tpl-first", fpA)
	b := e.stuckBuilt("tpl-second", fpB)
	p.slow[aidOf(fpA)] = 1500 * time.Millisecond // the first replay takes most of a budget
	e.clock.Advance(time.Hour)
	e.svc.SweepOnce(e.ctx)
	eq(t, "first", e.job(a.JobID).Status, core.JobReady)
	eq(t, "second", e.job(b.JobID).Status, core.JobReady)
	if left := p.leftFor(aidOf(fpB)); left < time.Second {
		t.Fatalf("the second job's resume had %v of its 2s budget left: it shares the first one's", left)
	}
}

// TestResumeBudgetStartsWithTheWork: a callback's resume that first waits
// for its artifact's lock (another template distributing it) gets its
// whole budget once it holds the lock.
func TestResumeBudgetStartsWithTheWork(t *testing.T) {
	e := newEnv(t, "node-1")
	e.svc.Config.ResumeTimeout = 2 * time.Second
	p := e.probeBudgets()
	lock, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
	if err != nil {
		t.Fatal(err)
	}
	job := e.create(request("tpl-queued"))
	e.build(job.JobID, fpA) // its resume now waits for the lock
	time.Sleep(1500 * time.Millisecond)
	if err := lock.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wait()
	eq(t, "status", e.job(job.JobID).Status, core.JobReady)
	if left := p.leftFor(aidOf(fpA)); left < time.Second {
		t.Fatalf("the resume had %v of its 2s budget left after waiting for the lock", left)
	}
}
