package control_test

import (
	"errors"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestRetriedCreateReleasesTheOldAlias: a create claims its alias with its
// job; when that attempt fails and the template is created again, the new
// attempt's request decides the alias. The name the failed attempt claimed
// must be released: otherwise it keeps sending sandboxes to the template
// while GET shows another alias or none, and no other template can take
// it. Before, a submit claimed the new alias but never released the old
// one, a definition that had an alias kept it, and a synchronous create
// deleted a FAILED definition without releasing its alias.
func TestRetriedCreateReleasesTheOldAlias(t *testing.T) {
	for _, tc := range []struct {
		name string
		// failFirst ends the first attempt (alias "old"): before its
		// definition exists, or with a FAILED definition.
		failFirst func(e *env, jobID string)
		retry     string // the retry's alias ("": none)
	}{
		{"build failed, retried with another alias", buildFails, "new"},
		{"build failed, retried without an alias", buildFails, ""},
		{"template FAILED, retried with another alias", snapshotFails, "new"},
		{"template FAILED, retried without an alias", snapshotFails, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			first := request("tpl-x")
			first.Alias = "old"
			job := e.create(first)
			tc.failFirst(e, job.JobID)

			retry := request("tpl-x")
			retry.Alias = tc.retry
			job2 := e.create(retry)
			e.build(job2.JobID, fpA)
			e.wait()
			eq(t, "retry", e.job(job2.JobID).Status, core.JobReady)
			eq(t, "alias", e.def("tpl-x").Alias, tc.retry)
			e.noAlias("old")
			if tc.retry != "" {
				if def, err := e.svc.ResolveTemplate(e.ctx, tc.retry); err != nil || def.TemplateID != "tpl-x" {
					t.Errorf("%q resolves to %v, %v", tc.retry, def, err)
				}
			}
		})
	}
}

// TestSynchronousCreateReleasesTheReplacedAlias: a synchronous create that
// replaces a FAILED definition drops that definition's alias with it.
func TestSynchronousCreateReleasesTheReplacedAlias(t *testing.T) {
	e := newEnv(t, "node-1")
	first := request("tpl-s")
	first.Alias = "old"
	job := e.create(first)
	snapshotFails(e, job.JobID)
	if _, err := e.svc.CreateTemplate(e.ctx, control.CreateTemplateRequest{Raw: sandboxCreate("tpl-s"), TemplateID: "tpl-s"}); err != nil {
		t.Fatal(err)
	}
	eq(t, "status", e.def("tpl-s").Status, core.TemplateReady)
	eq(t, "alias", e.def("tpl-s").Alias, "")
	e.noAlias("old")
}

// noAlias checks that name names no template and another template may
// take it.
func (e *env) noAlias(name string) {
	e.t.Helper()
	if h, _, err := e.store.Names().Holder(e.ctx, name); !errors.Is(err, core.ErrNotFound) {
		e.t.Errorf("%q is still held by %s (%v)", name, h, err)
	}
	if def, err := e.svc.ResolveTemplate(e.ctx, name); !errors.Is(err, core.ErrNotFound) {
		e.t.Errorf("%q still resolves (to %s): %v", name, def.TemplateID, err)
	}
	e.ready("tpl-other-"+name, fpB)
	if _, err := e.svc.SetAlias(e.ctx, "tpl-other-"+name, &name); err != nil {
		e.t.Errorf("another template cannot take %q: %v", name, err)
	}
}

// buildFails plays the data plane failing the build.
func buildFails(e *env, jobID string) {
	e.t.Helper()
	e.running(jobID, fpA)
	if ok, err := e.svc.HandleStatusReport(e.ctx, jobID, statusReport(core.Fail(core.PhaseUnpacking, "registry said no"))); err != nil || !ok {
		e.t.Fatalf("FAILED report: %v %v", ok, err)
	}
}

// snapshotFails builds the job and fails the snapshot on every node: the
// definition ends FAILED, with the request's alias.
func snapshotFails(e *env, jobID string) {
	e.t.Helper()
	e.set(func() { e.snapFail["node-1"] = errors.New("snapshot broke") })
	e.build(jobID, fpA)
	e.wait()
	e.set(func() { delete(e.snapFail, "node-1") })
	if d := e.def(e.job(jobID).TemplateID); d.Status != core.TemplateFailed || d.Alias != "old" {
		e.t.Fatalf("first attempt left %s with alias %q, want FAILED with old", d.Status, d.Alias)
	}
}
