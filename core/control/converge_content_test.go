package control_test

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestConvergenceNeverRebuilds: convergence only ever adds nodes to a
// template with the artifact the template uses. When that artifact's bytes
// are gone (lost, or failed by the scrub) and the image's tag has moved, a
// rebuild would produce another artifact, mark every other node's READY
// replica FAILED ("redo this node") and switch the template to new image
// content, all without anyone asking. Convergence must leave such a
// template alone. Before, its redo rebuilt from the tag.
func TestConvergenceNeverRebuilds(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.setHealthy("node-1")
	e.ready("tpl-c", fpA)
	e.disp.ArtifactExistsFunc = func(context.Context, *core.Artifact) (bool, error) { return false, nil }
	e.setHealthy("node-1", "node-2")

	started, err := e.svc.Converge(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range started {
		if j.Phase.PostBuild() {
			continue
		}
		// What the rebuild leads to: the moved tag builds another artifact.
		e.build(j.JobID, fpB)
	}
	e.wait()
	eq(t, "convergence jobs started", len(started), 0)
	eq(t, "builds sent to the data plane", len(e.disp.SubmitBuildCalls()), 1) // the create's
	e.contentKept("tpl-c", fpA)
}

// TestConvergenceUsesTheTemplatesArtifact: a person's redo rebuilt the
// template and its build failed, so the latest job names no artifact while
// the template is still READY on its artifact. Convergence brings that
// artifact to the new node; before, it took the failed job as its model
// and rebuilt from the tag.
func TestConvergenceUsesTheTemplatesArtifact(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.setHealthy("node-1")
	e.ready("tpl-u", fpA)
	present := false
	e.disp.ArtifactExistsFunc = func(context.Context, *core.Artifact) (bool, error) { return present, nil }
	redo, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "redo-u", TemplateID: "tpl-u"})
	if err != nil {
		t.Fatal(err)
	}
	if redo.Phase.PostBuild() {
		t.Fatal("the redo reused the artifact; want a rebuild")
	}
	buildFails(e, redo.JobID)
	present = true
	e.setHealthy("node-1", "node-2")

	started, err := e.svc.Converge(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range started {
		if !j.Phase.PostBuild() {
			e.build(j.JobID, fpB)
		}
	}
	e.wait()
	eq(t, "builds sent to the data plane", len(e.disp.SubmitBuildCalls()), 2) // the create's and the redo's
	if len(started) != 1 {
		t.Fatalf("convergence started %d jobs, want 1", len(started))
	}
	eq(t, "convergence job", e.job(started[0].JobID).Status, core.JobReady)
	e.contentKept("tpl-u", fpA)
	if r := e.replicas("tpl-u")["node-2"]; r == nil || r.Status != core.ReplicaReady || r.ArtifactID != aidOf(fpA) {
		t.Errorf("node-2 = %+v, want READY with %s", r, aidOf(fpA))
	}
}

// TestConvergenceJobWhoseArtifactWentAwayFails: the convergence redo was
// accepted with the artifact READY, and the artifact went away before its
// resume took the artifact's lock. A person's redo turns into a rebuild
// then; a convergence redo must fail instead (and back off), never build.
func TestConvergenceJobWhoseArtifactWentAwayFails(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.setHealthy("node-1")
	e.ready("tpl-g", fpA)
	e.setHealthy("node-1", "node-2")
	l, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
	if err != nil {
		t.Fatal(err)
	}
	started, err := e.svc.Converge(e.ctx)
	if err != nil || len(started) != 1 {
		t.Fatalf("Converge = %d, %v", len(started), err)
	}
	if _, err := e.store.Artifacts().Update(e.ctx, aidOf(fpA), func(a *core.Artifact) error {
		a.Status, a.LastError = core.ArtifactFailed, "stored bytes rotted"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(e.ctx)
	e.wait()
	if j := e.job(started[0].JobID); j.Status == core.JobPending && !j.Phase.PostBuild() {
		e.build(j.JobID, fpB) // what the rebuild leads to
		e.wait()
	}
	eq(t, "convergence job", e.job(started[0].JobID).Status, core.JobFailed)
	eq(t, "builds sent to the data plane", len(e.disp.SubmitBuildCalls()), 1)
	e.contentKept("tpl-g", fpA)
}

// contentKept checks that the template still uses fp's artifact and that
// node-1 still serves it.
func (e *env) contentKept(tid, fp string) {
	e.t.Helper()
	d := e.def(tid)
	eq(e.t, "definition's artifact", d.RootfsArtifactID, aidOf(fp))
	if r := e.replicas(tid)["node-1"]; r == nil || r.Status != core.ReplicaReady || r.ArtifactID != aidOf(fp) {
		e.t.Errorf("node-1 = %+v, want READY with %s", r, aidOf(fp))
	}
}
