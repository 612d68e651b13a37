package control_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// signalLocker tells the test when someone starts waiting for a lock once
// armed, so a test can order "callback waits on the lock" before letting
// the holder go.
type signalLocker struct {
	ports.Locker
	armed   atomic.Bool
	entered chan string
}

func (l *signalLocker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	if l.armed.Load() {
		l.entered <- name
	}
	return l.Locker.Lock(ctx, name)
}

// startBuild creates tpl and reports it RUNNING without naming an artifact
// (a data plane that finds the artifact already built names it only in
// BUILT), so the job is no reference yet.
func (e *env) startBuild(tid string) *core.Job {
	e.t.Helper()
	job := e.create(request(tid))
	if ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, statusReport(core.Progress(core.JobRunning, core.PhaseUnpacking, 20))); err != nil || !ok {
		e.t.Fatalf("RUNNING report: applied=%v err=%v", ok, err)
	}
	return job
}

func builtReport(fp string) ports.StatusReport {
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID, u.ArtifactStatus, u.Fingerprint = aidOf(fp), "READY", fp
	return ports.StatusReport{Update: u, Artifact: artifactMeta(fp)}
}

// refusedBuild checks that a BUILT report was refused for an artifact being
// deleted: a conflict, the job FAILED with the reason, nothing bound.
func (e *env) refusedBuild(jobID string, applied bool, err error) {
	e.t.Helper()
	wantErrIs(e.t, err, core.ErrConflict)
	eq(e.t, "applied", applied, false)
	j := e.job(jobID)
	eq(e.t, "job status", j.Status, core.JobFailed)
	if !strings.Contains(j.ErrorMessage, "being deleted; redo to rebuild") {
		e.t.Errorf("job error = %q, want the being-deleted reason", j.ErrorMessage)
	}
	eq(e.t, "job artifact", j.ArtifactID, "")
}

func TestBuiltReportForArtifactBeingDeletedIsRefused(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	e.destroyFail["node-1"] = errors.New("node busy")
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatal(err)
	}
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactCleanupPending)

	job := e.startBuild("tpl-b")
	ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, builtReport(fpA))
	e.refusedBuild(job.JobID, ok, err)
	e.wait()
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactCleanupPending)
	eq(t, "CreateImage calls", len(e.createImageNodes()), 1) // tpl-a's only
	if n := len(e.replicas("tpl-b")); n != 0 {
		t.Errorf("%d replicas of tpl-b bound", n)
	}

	// Without metadata (the row holds it) the answer is the same.
	job2 := e.startBuild("tpl-c")
	u := builtReport(fpA)
	u.Artifact = nil
	ok, err = e.svc.HandleStatusReport(e.ctx, job2.JobID, u)
	e.refusedBuild(job2.JobID, ok, err)
}

func TestBuiltReportWaitsForDeleteAndSeesItsOutcome(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	job := e.startBuild("tpl-b")

	sl := &signalLocker{Locker: e.locker, entered: make(chan string, 1)}
	e.svc.Locker = sl
	inDestroy, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.agent.DestroyImageFunc = func(_ context.Context, n ports.Node, _ string) error {
		if n.ID == "node-2" {
			return errors.New("node busy") // the delete ends CLEANUP_PENDING
		}
		once.Do(func() { close(inDestroy) })
		<-release
		return nil
	}

	delErr := make(chan error, 1)
	go func() { delErr <- e.svc.Delete(e.ctx, "tpl-a", "") }()
	<-inDestroy // phase 2, artifact lock held
	sl.armed.Store(true)
	type result struct {
		ok  bool
		err error
	}
	cb := make(chan result, 1)
	go func() {
		ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, builtReport(fpA))
		cb <- result{ok, err}
	}()
	if name := <-sl.entered; !strings.Contains(name, aid) {
		t.Fatalf("callback waited for lock %q, want the artifact's", name)
	}
	sl.armed.Store(false)
	close(release)
	if err := <-delErr; err != nil {
		t.Fatalf("Delete: %v", err)
	}
	r := <-cb
	e.refusedBuild(job.JobID, r.ok, r.err)
	e.wait()
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactCleanupPending)
}

func TestDeletePhase3KeepForgetsDestroyedCopies(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	jobB := e.startBuild("tpl-b")

	// While phase 2 destroys the copies, tpl-b's job comes to name the
	// artifact: phase 3 finds a reference again.
	var once sync.Once
	destroy := e.agent.DestroyImageFunc
	e.agent.DestroyImageFunc = func(ctx context.Context, n ports.Node, image string) error {
		once.Do(func() {
			if _, err := e.store.Jobs().Update(context.Background(), jobB.JobID, func(j *core.Job) error {
				j.ArtifactID = aid
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
		return destroy(ctx, n, image)
	}
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatal(err)
	}
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactReady)
	eq(t, "DeleteArtifact calls", len(e.disp.DeleteArtifactCalls()), 0)
	eqSlice(t, "DestroyImage nodes", e.destroyNodes(), []string{"node-1", "node-2"})
	eq(t, "placements of destroyed copies", len(e.placementNodes(aid)), 0)

	// tpl-b's resume distributes the artifact again.
	if ok, err := e.svc.HandleStatusReport(e.ctx, jobB.JobID, builtReport(fpA)); err != nil || !ok {
		t.Fatalf("BUILT report: applied=%v err=%v", ok, err)
	}
	e.wait()
	eq(t, "tpl-b job", e.job(jobB.JobID).Status, core.JobReady)
	eqSlice(t, "placements", e.placementNodes(aid), []string{"node-1", "node-2"})
	for _, n := range []string{"node-1", "node-2"} {
		if !e.onNode[n][aid] {
			t.Errorf("%s did not get the artifact back", n)
		}
	}
}
