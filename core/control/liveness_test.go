package control_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// abandoned puts a template's build in the state a killed data plane
// leaves it: RUNNING in a build phase, owned by a process that no longer
// holds its owner lock.
func (e *env) abandoned(tid string) *core.Job {
	e.t.Helper()
	job := e.create(request(tid))
	running := core.Progress(core.JobRunning, core.PhaseUploading, 80)
	if ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, ports.StatusReport{Update: running}); err != nil || !ok {
		e.t.Fatalf("RUNNING report: %v %v", ok, err)
	}
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { j.BuildOwner = "tc-killed"; return nil }); err != nil {
		e.t.Fatal(err)
	}
	return job
}

// TestAbandonedBuildDoesNotBlockRedoOrDelete: redo and delete of a
// template whose data plane died mid-build go ahead at once: the job in
// their way is failed as abandoned instead of answering "conflict" until
// a reconciler gets to it.
func TestAbandonedBuildDoesNotBlockRedoOrDelete(t *testing.T) {
	t.Run("redo", func(t *testing.T) {
		e := newEnv(t, "node-1")
		old := e.abandoned("tpl-redo")
		redo, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "r1", TemplateID: "tpl-redo"})
		if err != nil {
			t.Fatalf("redo with an abandoned build in the way: %v", err)
		}
		e.wait()
		if j := e.job(old.JobID); j.Status != core.JobFailed || !strings.Contains(j.ErrorMessage, "tc-killed") {
			t.Errorf("abandoned job: %s %q; want FAILED naming its template center", j.Status, j.ErrorMessage)
		}
		if redo.JobID == old.JobID {
			t.Error("the redo returned the abandoned job")
		}
	})
	t.Run("delete", func(t *testing.T) {
		e := newEnv(t, "node-1")
		e.abandoned("tpl-del")
		if err := e.svc.Delete(e.ctx, "tpl-del", ""); err != nil {
			t.Fatalf("delete with an abandoned build in the way: %v", err)
		}
	})
	t.Run("create again", func(t *testing.T) {
		e := newEnv(t, "node-1")
		old := e.abandoned("tpl-again")
		again := e.create(request("tpl-again"))
		if again.JobID == old.JobID || again.Status != core.JobPending {
			t.Errorf("create again: job %s %s; want a new PENDING job", again.JobID, again.Status)
		}
	})
	t.Run("a live build still blocks", func(t *testing.T) {
		e := newEnv(t, "node-1")
		job := e.abandoned("tpl-live")
		if _, err := e.locker.Lock(e.ctx, "tc_owner_tc-killed"); err != nil { // its process is alive after all
			t.Fatal(err)
		}
		_, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "r1", TemplateID: "tpl-live"})
		var active *core.ActiveJobError
		if !errors.As(err, &active) || active.JobID != job.JobID {
			t.Fatalf("redo over a live build: %v; want *core.ActiveJobError", err)
		}
	})
}

// A node that was down for the whole job holds nothing of the template: a
// delete while it is still down goes ahead instead of failing on it.
func TestDeleteWithANodeThatWasDown(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.setHealthy("node-1")
	job := e.ready("tpl-down", fpA)
	eq(t, "template", job.TemplateStatus, string(core.TemplatePartiallyReady))
	e.cleanupFail["node-2"] = errors.New("dial node-2: connection refused")
	e.destroyFail["node-2"] = errors.New("dial node-2: connection refused")
	if err := e.svc.Delete(e.ctx, "tpl-down", ""); err != nil {
		t.Fatalf("delete with node-2 still down: %v", err)
	}
	for _, c := range e.agent.CleanupTemplateCalls() {
		if c.Node.ID == "node-2" {
			t.Error("the delete asked node-2, which never got the template, to remove it")
		}
	}
}
