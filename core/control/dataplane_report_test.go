package control_test

import (
	"context"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestDataPlaneReportsEndAtBuilt: once a job is BUILT the master's resume
// owns it; a report from the data plane (which carries no run number) can
// no longer end it. A second build of the same job (started by a second
// forward) that fails with "template center shutting down", or a forged
// report, arrives while the master distributes. It must be acknowledged
// and ignored, and the job must still end READY with a READY template.
// Before, FAILED passed in any phase: the job ended FAILED while the
// resume went on, leaving no definition or one PENDING for good.
func TestDataPlaneReportsEndAtBuilt(t *testing.T) {
	for _, tc := range []struct {
		name string
		// at stops the job where the report arrives; it returns a function
		// that lets the job go on.
		at func(e *env, jobID string) (resume func())
	}{
		{"BUILT, resume waiting for the artifact's lock", func(e *env, jobID string) func() {
			l, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
			if err != nil {
				e.t.Fatal(err)
			}
			e.build(jobID, fpA)
			return func() { _ = l.Unlock(e.ctx) }
		}},
		{"RUNNING/DISTRIBUTING", func(e *env, jobID string) func() {
			in, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			e.agent.CreateImageFunc = func(context.Context, ports.Node, core.NodeArtifact) error {
				once.Do(func() { close(in) })
				<-release
				return nil
			}
			e.build(jobID, fpA)
			<-in
			return func() { close(release) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			job := e.create(request("tpl-dp"))
			resume := tc.at(e, job.JobID)
			late := []core.JobUpdate{
				core.Fail(core.PhaseUploading, "template center shutting down"),
				core.Progress(core.JobRunning, core.PhaseUploading, 60),
			}
			for _, u := range late {
				ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, statusReport(u))
				if err != nil || ok {
					t.Errorf("%s report after BUILT: applied=%v err=%v; want acknowledged, not applied", u.Status, ok, err)
				}
			}
			resume()
			e.wait()
			j := e.job(job.JobID)
			eq(t, "job status", j.Status, core.JobReady)
			if d, err := e.store.Templates().GetDefinition(e.ctx, "tpl-dp"); err != nil || d.Status != core.TemplateReady {
				t.Errorf("definition = %+v, %v; want READY", d, err)
			}
		})
	}
}

// TestDataPlaneReportsStillEndABuild: the same reports during the build
// itself are the data plane's to make.
func TestDataPlaneReportsStillEndABuild(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-dpf"))
	e.running(job.JobID, fpA)
	ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, statusReport(core.Fail(core.PhaseUnpacking, "registry said no")))
	if err != nil || !ok {
		t.Fatalf("FAILED during the build: applied=%v err=%v", ok, err)
	}
	eq(t, "status", e.job(job.JobID).Status, core.JobFailed)
}

// TestDataPlaneCannotReportAReuseRedo: a redo that reuses its artifact is
// PENDING in a post-build phase and never goes to the data plane; a
// data-plane report for it (BUILT or FAILED) is not applied.
func TestDataPlaneCannotReportAReuseRedo(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-rr", fpA)
	l, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
	if err != nil {
		t.Fatal(err)
	}
	redo, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "redo-rr", TemplateID: "tpl-rr"})
	if err != nil {
		t.Fatal(err)
	}
	built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	built.ArtifactID, built.Fingerprint = aidOf(fpA), fpA
	for _, r := range []ports.StatusReport{
		statusReport(core.Fail(core.PhaseUploading, "forged")),
		{Update: built, Artifact: artifactMeta(fpA), Inputs: inputsOf(fpA)},
	} {
		ok, err := e.svc.HandleStatusReport(e.ctx, redo.JobID, r)
		if err != nil || ok {
			t.Errorf("%s report for a reuse redo: applied=%v err=%v", r.Update.Status, ok, err)
		}
	}
	_ = l.Unlock(e.ctx)
	e.wait()
	eq(t, "redo status", e.job(redo.JobID).Status, core.JobReady)
}
