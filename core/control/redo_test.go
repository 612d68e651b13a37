package control_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

func TestRedoFailedOnlyAfterNodeWasDown(t *testing.T) {
	e := newEnv(t, "node-1", "node-2", "node-3")
	e.createFail["node-2"] = errors.New("node unreachable")
	first := e.ready("tpl-redo", fpA)
	eq(t, "first template status", first.TemplateStatus, string(core.TemplatePartiallyReady))
	createdBefore := len(e.agent.CreateImageCalls())
	snapsBefore := len(e.agent.AppSnapshotCalls())

	delete(e.createFail, "node-2") // the node is back
	job, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "r1", TemplateID: "tpl-redo", FailedOnly: true})
	if err != nil {
		t.Fatalf("Redo: %v", err)
	}
	eq(t, "operation", job.Operation, core.OpRedo)
	eq(t, "mode", job.RedoMode, core.RedoFailedOnly)
	eqSlice(t, "scope", job.RedoScope, []string{"node-2"})
	eq(t, "resume phase", job.ResumePhase, core.PhaseDistributing)
	eq(t, "attempt", job.AttemptNo, 2)
	eq(t, "retry of", job.RetryOfJobID, first.JobID)
	eq(t, "request_json is this template's", job.RequestJSON, first.RequestJSON)
	e.wait()

	j := e.job(job.JobID)
	eq(t, "redo status", j.Status, core.JobReady)
	eq(t, "template status", j.TemplateStatus, string(core.TemplateReady))
	eq(t, "definition status", e.def("tpl-redo").Status, core.TemplateReady)
	calls := e.agent.CreateImageCalls()[createdBefore:]
	if len(calls) != 1 || calls[0].Node.ID != "node-2" {
		t.Errorf("redo distributed to %d nodes, want node-2 only", len(calls))
	}
	snaps := e.agent.AppSnapshotCalls()[snapsBefore:]
	if len(snaps) != 1 || snaps[0].Node.ID != "node-2" {
		t.Errorf("redo snapshotted %d nodes, want node-2 only", len(snaps))
	}
	// A DISTRIBUTING redo drops the node's old copy first.
	eqSlice(t, "DestroyImage nodes", e.destroyNodes(), []string{"node-2"})
	eqSlice(t, "placements", e.placementNodes(aidOf(fpA)), []string{"node-1", "node-2", "node-3"})

	// Nothing failed any more.
	_, err = e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-redo", FailedOnly: true})
	wantErrIs(t, err, core.ErrInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "no failed replicas") {
		t.Errorf("err = %v", err)
	}
}

func TestRedoResnapshotsAndKeepsToken(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.snapFail["node-1"] = errors.New("boot timeout")
	first := e.ready("tpl-snap", fpA)
	eq(t, "first", first.TemplateStatus, string(core.TemplatePartiallyReady))
	token := e.artifact(aidOf(fpA)).DownloadToken
	delete(e.snapFail, "node-1")

	job, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-snap", DistributionScope: []string{"node-1"}})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "mode", job.RedoMode, core.RedoNodes)
	eq(t, "resume phase", job.ResumePhase, core.PhaseSnapshotting)
	e.wait()
	eq(t, "status", e.job(job.JobID).Status, core.JobReady)
	eq(t, "template", e.def("tpl-snap").Status, core.TemplateReady)
	eq(t, "token kept", e.artifact(aidOf(fpA)).DownloadToken, token)
	eq(t, "no copy destroyed", len(e.agent.DestroyImageCalls()), 0)
}

func TestRedoRebuildWhenBytesAreGone(t *testing.T) {
	e := newEnv(t, "node-1")
	first := e.ready("tpl-gone", fpA)
	var asked []string
	e.disp.ArtifactExistsFunc = func(_ context.Context, a *core.Artifact) (bool, error) {
		asked = append(asked, a.ArtifactID)
		return false, nil
	}
	job, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "r2", TemplateID: "tpl-gone", DownloadBaseURL: "master:8089", RegistryPassword: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	eqSlice(t, "asked about", asked, []string{aidOf(fpA)})
	eq(t, "operation", job.Operation, core.OpRedo)
	eq(t, "resume phase", job.ResumePhase, core.PhaseBuildingExt4)
	eq(t, "phase", job.Phase, core.PhasePulling)
	eq(t, "status", job.Status, core.JobPending)
	eq(t, "request_json", job.RequestJSON, first.RequestJSON)
	calls := e.disp.SubmitBuildCalls()
	if len(calls) != 2 {
		t.Fatalf("SubmitBuild calls = %d, want the create and the rebuild", len(calls))
	}
	br := calls[1].Req
	eq(t, "job", br.JobID, job.JobID)
	eq(t, "template", br.Request.TemplateID, "tpl-gone")
	eq(t, "image", br.Request.SourceImageRef, "registry.local/app:1")
	eq(t, "password", br.Request.RegistryPassword, "pw")
	eq(t, "base", br.DownloadBaseURL, "http://master:8089")

	// The data plane rebuilds and the resume runs as for a create.
	e.build(job.JobID, fpA)
	e.wait()
	j := e.job(job.JobID)
	eq(t, "rebuild status", j.Status, core.JobReady)
	eq(t, "template", j.TemplateStatus, string(core.TemplateReady))
}

func TestRedoRebuildAfterPullFailure(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-pull"))
	if _, err := e.svc.HandleStatusReport(e.ctx, job.JobID, statusReport(core.Fail(core.PhasePulling, "manifest unknown"))); err != nil {
		t.Fatal(err)
	}
	// Upstream refused this redo; here it rebuilds.
	redo, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-pull"})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "resume phase", redo.ResumePhase, core.PhaseBuildingExt4)
	eq(t, "SubmitBuild calls", len(e.disp.SubmitBuildCalls()), 2)
}

func TestRedoRefusals(t *testing.T) {
	e := newEnv(t, "node-1")
	_, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-none"})
	wantErrIs(t, err, core.ErrNotFound)
	_, err = e.svc.Redo(e.ctx, control.RedoRequest{})
	wantErrIs(t, err, core.ErrTemplateIDRequired)

	job := e.create(request("tpl-busy"))
	_, err = e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-busy"})
	wantErrIs(t, err, core.ErrAttemptInProgress)

	// BUILT still blocks: its resume is pending.
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID = aidOf(fpA)
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { return j.Apply(u) }); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-busy"})
	wantErrIs(t, err, core.ErrAttemptInProgress)
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { return j.Apply(core.Fail(core.PhaseDistributing, "x")) }); err != nil {
		t.Fatal(err)
	}

	e.setHealthy()
	_, err = e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-busy"})
	wantErrIs(t, err, core.ErrNoTemplateNodes)

	e.setHealthy("node-1")
	_, err = e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-busy", DistributionScope: []string{"node-7"}})
	wantErrIs(t, err, core.ErrNoTemplateNodes)
	_, err = e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-busy", DistributionScope: []string{" "}})
	wantErrIs(t, err, core.ErrInvalidArgument)
}

func TestDetermineRedoResumePhase(t *testing.T) {
	failedAt := func(phase string) []*core.Replica {
		return []*core.Replica{{NodeID: "a", Status: core.ReplicaReady}, {NodeID: "b", Status: core.ReplicaFailed, LastErrorPhase: phase}}
	}
	tests := []struct {
		latest   core.Phase
		replicas []*core.Replica
		want     core.Phase
	}{
		{"", nil, core.PhaseBuildingExt4},
		{core.PhasePulling, nil, core.PhaseBuildingExt4},
		{core.PhaseUnpacking, nil, core.PhaseBuildingExt4},
		{core.PhaseBuildingExt4, nil, core.PhaseBuildingExt4},
		{core.PhaseGeneratingJSON, nil, core.PhaseBuildingExt4},
		{core.PhaseUploading, nil, core.PhaseBuildingExt4},
		{core.PhaseDistributing, nil, core.PhaseDistributing},
		{core.PhaseCreatingTemplate, nil, core.PhaseSnapshotting},
		{core.PhaseSnapshotting, nil, core.PhaseSnapshotting},
		{core.PhaseRegistering, nil, core.PhaseSnapshotting},
		{core.PhaseReady, failedAt("DISTRIBUTING"), core.PhaseDistributing},
		{core.PhaseReady, failedAt("SNAPSHOTTING"), core.PhaseSnapshotting},
		{core.PhaseReady, nil, core.PhaseSnapshotting},
	}
	for _, tc := range tests {
		if got := control.DetermineRedoResumePhase(tc.latest, tc.replicas); got != tc.want {
			t.Errorf("DetermineRedoResumePhase(%q) = %s, want %s", tc.latest, got, tc.want)
		}
	}
}

func TestRedoNeverDestroysACopyAnotherTemplateUses(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	e.createFail["node-2"] = errors.New("transient")
	b := e.ready("tpl-b", fpA) // same artifact; node-2 failed for tpl-b only
	eq(t, "tpl-b", b.TemplateStatus, string(core.TemplatePartiallyReady))
	delete(e.createFail, "node-2")

	job, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-b", FailedOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "resume phase", job.ResumePhase, core.PhaseDistributing)
	e.wait()
	eq(t, "redo", e.job(job.JobID).Status, core.JobReady)
	eq(t, "DestroyImage calls", len(e.agent.DestroyImageCalls()), 0)
	if _, err := e.svc.ResolveTemplate(e.ctx, "tpl-a"); err != nil {
		t.Errorf("tpl-a broken: %v", err)
	}
}

// TestRedoWhenANodeDropsBeforeTheResume: a mode-ALL redo resolved both
// nodes; node-2 goes down before the resume runs. The redo must still
// bring node-1 up and record node-2's replica FAILED, not fail the job.
func TestRedoWhenANodeDropsBeforeTheResume(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.snapFail["node-1"] = errors.New("boot timeout")
	e.ready("tpl-drop", fpA)
	delete(e.snapFail, "node-1")

	// Hold the artifact's lock so the redo's resume waits while node-2
	// leaves the directory.
	lock, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
	if err != nil {
		t.Fatal(err)
	}
	job, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-drop"})
	if err != nil {
		t.Fatal(err)
	}
	eqSlice(t, "scope", job.RedoScope, []string{"node-1", "node-2"})
	e.setHealthy("node-1")
	if err := lock.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wait()

	j := e.job(job.JobID)
	eq(t, "redo status", j.Status, core.JobReady)
	eq(t, "template status", j.TemplateStatus, string(core.TemplatePartiallyReady))
	reps := e.replicas("tpl-drop")
	eq(t, "node-1", reps["node-1"].Status, core.ReplicaReady)
	eq(t, "node-2", reps["node-2"].Status, core.ReplicaFailed)
	if !strings.Contains(reps["node-2"].ErrorMessage, "not healthy") {
		t.Errorf("node-2 replica says %q", reps["node-2"].ErrorMessage)
	}
	eq(t, "expected nodes", j.ExpectedNodeCount, 2)
	eq(t, "failed nodes", j.FailedNodeCount, 1)
}

// TestRedoRebuildsWhenItsArtifactGoesAway: a redo decided to reuse the READY
// artifact, but before its resume ran the artifact's deletion finished.
// The redo must fall back to a rebuild; before, it failed with "not found"
// (and a BUILDING row would have been distributed as READY).
func TestRedoRebuildsWhenItsArtifactGoesAway(t *testing.T) {
	for _, tc := range []struct {
		name  string
		apply func(t *testing.T, e *env, aid string)
	}{
		{"deleted", func(t *testing.T, e *env, aid string) {
			if err := e.store.Artifacts().Delete(e.ctx, aid); err != nil {
				t.Fatal(err)
			}
		}},
		{"being deleted", func(t *testing.T, e *env, aid string) {
			if _, err := e.store.Artifacts().Update(e.ctx, aid, func(a *core.Artifact) error { a.Status = core.ArtifactCleanupPending; return nil }); err != nil {
				t.Fatal(err)
			}
		}},
		{"being rebuilt", func(t *testing.T, e *env, aid string) {
			if _, err := e.store.Artifacts().Update(e.ctx, aid, func(a *core.Artifact) error { a.Status = core.ArtifactBuilding; return nil }); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			e.snapFail["node-1"] = errors.New("boot timeout")
			e.ready("tpl-gone", fpA)
			delete(e.snapFail, "node-1")
			aid := aidOf(fpA)

			lock, err := e.locker.Lock(e.ctx, "tc_resume_"+aid)
			if err != nil {
				t.Fatal(err)
			}
			job, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-gone", DownloadBaseURL: "master:8089"})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "decided to reuse", job.ResumePhase, core.PhaseSnapshotting)
			builds := len(e.disp.SubmitBuildCalls())
			tc.apply(t, e, aid)
			if err := lock.Unlock(e.ctx); err != nil {
				t.Fatal(err)
			}
			e.wait()

			j := e.job(job.JobID)
			eq(t, "job status", j.Status, core.JobPending)
			eq(t, "job phase", j.Phase, core.PhasePulling)
			eq(t, "resume phase", j.ResumePhase, core.PhaseBuildingExt4)
			calls := e.disp.SubmitBuildCalls()
			if len(calls) != builds+1 || calls[len(calls)-1].Req.JobID != job.JobID {
				t.Fatalf("the redo was not sent to the data plane as a rebuild (%d builds)", len(calls)-builds)
			}
			if e.artifactStatus(aid) == core.ArtifactReady {
				t.Error("the redo made the artifact READY without a build")
			}
		})
	}
}

func (e *env) artifactStatus(aid string) core.ArtifactStatus {
	a, err := e.store.Artifacts().Get(e.ctx, aid)
	if err != nil {
		return ""
	}
	return a.Status
}
