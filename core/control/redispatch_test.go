package control_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestRedispatchNeverFailsAJobThatMovedOn: an identical create finds the
// job PENDING and quiet for longer than the redispatch delay and forwards
// it again; behind a balancer that forward reaches another data-plane
// replica, which finds the job already RUNNING (or BUILT: the first build
// finished meanwhile) and answers 404 "not pending", or 429 busy. The
// answer concerns a job that has moved on: the create must return the job
// as it is and leave it alone. Before, every answer but 409 failed the job
// (a healthy build, or a BUILT job in its resume) and the create answered
// with an error.
func TestRedispatchNeverFailsAJobThatMovedOn(t *testing.T) {
	notPending := func(id string) error {
		return fmt.Errorf("job %s is RUNNING, only PENDING jobs are built: %w", id, core.ErrNotFound)
	}
	for _, tc := range []struct {
		name string
		// moveOn plays the first build's reports landing while the second
		// forward is on its way; it returns the other replica's answer.
		moveOn     func(e *env, jobID string) error
		wantStatus core.JobStatus
	}{
		{"running, not pending", func(e *env, id string) error {
			e.running(id, fpA)
			return notPending(id)
		}, core.JobRunning},
		{"running, busy", func(e *env, id string) error {
			e.running(id, fpA)
			return fmt.Errorf("2 builds running, the limit: %w", core.ErrBusy)
		}, core.JobRunning},
		{"running, unreachable", func(e *env, id string) error {
			e.running(id, fpA)
			return fmt.Errorf("dial tcp: connection refused")
		}, core.JobRunning},
		{"built, not pending", func(e *env, id string) error {
			e.build(id, fpA)
			return notPending(id)
		}, core.JobReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			job := e.create(request("tpl-re"))
			e.clock.Advance(time.Minute) // quiet: the first build's reports are late
			e.disp.SubmitBuildFunc = func(_ context.Context, br ports.BuildRequest) error {
				return tc.moveOn(e, br.JobID)
			}
			again, err := e.svc.CreateFromImage(e.ctx, request("tpl-re"), baseURL)
			if err != nil {
				t.Errorf("resubmit answered %v; the job had moved on", err)
			}
			eq(t, "same job", again.JobID, job.JobID)
			eq(t, "forwards", len(e.disp.SubmitBuildCalls()), 2)
			e.wait()
			j := e.job(job.JobID)
			eq(t, "status", j.Status, tc.wantStatus)
			eq(t, "error message", j.ErrorMessage, "")
		})
	}
}

// TestRedispatchStillFailsAJobNobodyTook: the guard above must not hide a
// job that is still PENDING when the data plane refuses it: that job is
// failed with the reason, as before.
func TestRedispatchStillFailsAJobNobodyTook(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-nobody"))
	e.clock.Advance(time.Minute)
	e.set(func() { e.submitErr = fmt.Errorf("full: %w", core.ErrBusy) })
	_, err := e.svc.CreateFromImage(e.ctx, request("tpl-nobody"), baseURL)
	wantErrIs(t, err, core.ErrBusy)
	eq(t, "status", e.job(job.JobID).Status, core.JobFailed)
}

// running plays the data plane's first RUNNING report for job.
func (e *env) running(jobID, fp string) {
	e.t.Helper()
	u := core.Progress(core.JobRunning, core.PhasePulling, 5)
	u.ArtifactID, u.Fingerprint, u.SourceImageDigest = aidOf(fp), fp, digestFor(fp)
	if ok, err := e.svc.HandleStatusReport(e.ctx, jobID, ports.StatusReport{Update: u}); err != nil || !ok {
		e.t.Fatalf("RUNNING report: applied=%v err=%v", ok, err)
	}
}
