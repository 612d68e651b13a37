package control_test

import (
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestRedoModeFollowsTheScope pins the documented divergence from
// upstream: a redo without nodes targets the create's distribution scope
// (mode NODES) and answers ALL, over every healthy node, only when that
// scope is empty, as upstream always does.
func TestRedoModeFollowsTheScope(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-all", fpA)
	job, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-all"})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "mode without any scope", job.RedoMode, core.RedoAll)
	eqSlice(t, "targets", job.RedoScope, []string{"node-1", "node-2"})
	e.wait()

	scoped := request("tpl-scoped")
	scoped.DistributionScope = []string{"node-2"}
	job = e.create(scoped)
	e.build(job.JobID, fpB)
	e.wait()
	job, err = e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-scoped"})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "mode with the create's scope", job.RedoMode, core.RedoNodes)
	eqSlice(t, "targets", job.RedoScope, []string{"node-2"})
	e.wait()
}
