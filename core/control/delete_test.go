package control_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// gone asserts that the template has no rows left.
func (e *env) gone(tid string) {
	e.t.Helper()
	if _, err := e.store.Templates().GetDefinition(e.ctx, tid); !errors.Is(err, core.ErrNotFound) {
		e.t.Errorf("definition of %s still there (err=%v)", tid, err)
	}
	if n := len(e.replicas(tid)); n != 0 {
		e.t.Errorf("%d replicas of %s left", n, tid)
	}
	if js, _ := e.store.Jobs().ListByTemplate(e.ctx, tid); len(js) != 0 {
		e.t.Errorf("%d jobs of %s left", len(js), tid)
	}
}

func TestDeleteSharedArtifactKeepsOtherTemplate(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	e.ready("tpl-b", fpA) // same spec: the same artifact
	aid := aidOf(fpA)
	e.clock.Advance(time.Hour)

	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.gone("tpl-a")
	eq(t, "DestroyImage calls", len(e.agent.DestroyImageCalls()), 0)
	eq(t, "DeleteArtifact calls", len(e.disp.DeleteArtifactCalls()), 0)
	a := e.artifact(aid)
	eq(t, "artifact status", a.Status, core.ArtifactReady)
	eq(t, "gc deadline renewed", a.GCDeadline, e.clock.Now().Add(control.DefaultArtifactTTL).Unix())
	eqSlice(t, "placements kept", e.placementNodes(aid), []string{"node-1", "node-2"})
	// CleanupTemplate ran for tpl-a's replicas only.
	for _, c := range e.agent.CleanupTemplateCalls() {
		if c.TemplateID != "tpl-a" {
			t.Errorf("CleanupTemplate for %s", c.TemplateID)
		}
	}

	// The other template still resolves and its nodes keep the artifact.
	if _, err := e.svc.ResolveTemplate(e.ctx, "tpl-b"); err != nil {
		t.Errorf("tpl-b no longer resolves: %v", err)
	}
	for _, n := range []string{"node-1", "node-2"} {
		if !e.onNode[n][aid] {
			t.Errorf("%s lost the shared artifact", n)
		}
	}
}

func TestDeleteLastOwnerCleansEverything(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	e.ready("tpl-b", fpA)
	aid := aidOf(fpA)
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Delete(e.ctx, "tpl-b", "cubebox"); err != nil {
		t.Fatal(err)
	}
	e.gone("tpl-b")
	eqSlice(t, "DestroyImage nodes", e.destroyNodes(), []string{"node-1", "node-2"})
	calls := e.disp.DeleteArtifactCalls()
	if len(calls) != 1 || calls[0].ArtifactID != aid {
		t.Fatalf("DeleteArtifact calls = %v, want one for %s", calls, aid)
	}
	eq(t, "placements", len(e.placementNodes(aid)), 0)
	if _, err := e.store.Artifacts().Get(e.ctx, aid); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("artifact row left (err=%v)", err)
	}
	for _, n := range []string{"node-1", "node-2"} {
		if e.onNode[n][aid] {
			t.Errorf("%s still holds the artifact", n)
		}
	}
	wantErrIs(t, e.svc.Delete(e.ctx, "tpl-b", ""), core.ErrNotFound)
}

func TestDeletePhase2FailureLeavesCleanupPendingForGC(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	e.destroyFail["node-2"] = errors.New("node busy")

	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.gone("tpl-a")
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactCleanupPending)
	eq(t, "DeleteArtifact calls", len(e.disp.DeleteArtifactCalls()), 0)
	eqSlice(t, "placements kept for the retry", e.placementNodes(aid), []string{"node-1", "node-2"})

	// GC while the node still fails: nothing more happens.
	if n, err := e.svc.GC(e.ctx); err != nil || n != 0 {
		t.Fatalf("GC = %d, %v", n, err)
	}
	delete(e.destroyFail, "node-2")
	n, err := e.svc.GC(e.ctx)
	if err != nil || n != 1 {
		t.Fatalf("GC = %d, %v; want 1 artifact cleaned", n, err)
	}
	eq(t, "DeleteArtifact calls", len(e.disp.DeleteArtifactCalls()), 1)
	eq(t, "placements", len(e.placementNodes(aid)), 0)
	if e.onNode["node-2"][aid] {
		t.Error("node-2 still holds the artifact")
	}
}

func TestGCCollectsOrphansPastDeadline(t *testing.T) {
	e := newEnv(t, "node-1")
	// An artifact whose template rows vanished (an old delete without
	// reference counting) next to one a template uses.
	e.ready("tpl-orphan", fpA)
	e.ready("tpl-live", fpB)
	if _, err := e.store.Jobs().DeleteByTemplate(e.ctx, "tpl-orphan"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Templates().DeleteReplicas(e.ctx, "tpl-orphan"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Templates().DeleteDefinition(e.ctx, "tpl-orphan"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.svc.GC(e.ctx); err != nil || n != 0 {
		t.Fatalf("GC before the deadline = %d, %v", n, err)
	}
	e.clock.Advance(control.DefaultArtifactTTL + time.Minute)
	n, err := e.svc.GC(e.ctx)
	if err != nil || n != 1 {
		t.Fatalf("GC = %d, %v; want the orphan", n, err)
	}
	calls := e.disp.DeleteArtifactCalls()
	if len(calls) != 1 || calls[0].ArtifactID != aidOf(fpA) {
		t.Errorf("DeleteArtifact = %v", calls)
	}
	// The referenced artifact only had its deadline renewed.
	b := e.artifact(aidOf(fpB))
	eq(t, "live artifact", b.Status, core.ArtifactReady)
	eq(t, "renewed", b.GCDeadline, e.clock.Now().Add(control.DefaultArtifactTTL).Unix())
}

func TestDeleteStuckJob(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-stuck"))

	// Fresh: the build may be running.
	err := e.svc.Delete(e.ctx, "tpl-stuck", "")
	wantErrIs(t, err, core.ErrAttemptInProgress)

	// No report for longer than StaleAfter: the data plane died.
	e.clock.Advance(control.DefaultStaleAfter + time.Minute)
	if err := e.svc.Delete(e.ctx, "tpl-stuck", ""); err != nil {
		t.Fatalf("Delete of a stuck template: %v", err)
	}
	e.gone("tpl-stuck")
	// A late report for the deleted job finds nothing.
	_, err = e.svc.HandleStatusReport(e.ctx, job.JobID, statusReport(core.Progress(core.JobRunning, core.PhasePulling, 5)))
	wantErrIs(t, err, core.ErrNotFound)
}

func TestDeleteStuckBuiltJobWithLiveResumeIsRefused(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-built"))
	if err := e.store.Artifacts().Create(e.ctx, artifactMeta(fpA)); err != nil {
		t.Fatal(err)
	}
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID, u.Fingerprint = aidOf(fpA), fpA
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { return j.Apply(u) }); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	l, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
	if err != nil {
		t.Fatal(err)
	}
	wantErrIs(t, e.svc.Delete(e.ctx, "tpl-built", ""), core.ErrAttemptInProgress)
	_ = l.Unlock(e.ctx)
	if err := e.svc.Delete(e.ctx, "tpl-built", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.gone("tpl-built")
	// Nothing else used the artifact: handed to the data plane.
	eq(t, "DeleteArtifact calls", len(e.disp.DeleteArtifactCalls()), 1)
}

func TestDeleteAbortsWhenNodeCleanupFails(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	e.cleanupFail["node-2"] = errors.New("cubelet unavailable")
	err := e.svc.Delete(e.ctx, "tpl-a", "")
	if err == nil {
		t.Fatal("Delete succeeded although a node kept the template")
	}
	eq(t, "definition kept", e.def("tpl-a").TemplateID, "tpl-a")
	eq(t, "replicas kept", len(e.replicas("tpl-a")), 2)
	eq(t, "artifact untouched", e.artifact(aidOf(fpA)).Status, core.ArtifactReady)
	eq(t, "no DestroyImage", len(e.agent.DestroyImageCalls()), 0)

	delete(e.cleanupFail, "node-2")
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatalf("retried Delete: %v", err)
	}
	e.gone("tpl-a")
}

func TestDeleteWithVanishedNode(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	e.set(func() { delete(e.known, "node-2"); e.healthy = e.healthy[:1] })
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.gone("tpl-a")
	eqSlice(t, "DestroyImage nodes", e.destroyNodes(), []string{"node-1"})
	eq(t, "DeleteArtifact calls", len(e.disp.DeleteArtifactCalls()), 1)
}
