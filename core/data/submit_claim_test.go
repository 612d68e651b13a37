package data_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// TestSecondReplicaDoesNotBuildATakenJob: the control plane forwards a
// PENDING job twice (its first answer was lost, or an identical create
// found the job still PENDING because the build's first RUNNING report
// had not reached the master yet), and behind a balancer the second
// forward reaches another replica. That replica must see the job as taken
// and refuse it ("not pending"), so one build runs. Before, acceptance
// read the row alone, which still said PENDING until the first build's
// report landed: two builds of one job ran, and the slower one's report
// could end a job the other had finished.
func TestSecondReplicaDoesNotBuildATakenJob(t *testing.T) {
	w := newWorld()
	req := fromImage("tpl-twice")
	w.addJob(t, "job-1", req)
	// The master does not hear from the first build yet.
	release := make(chan struct{})
	apply := w.reporter.ReportFunc
	w.reporter.ReportFunc = func(ctx context.Context, jobID string, r ports.StatusReport) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return apply(ctx, jobID, r)
	}
	r1 := newReplica(t, w, data.ExecutorConfig{})
	r2 := newReplica(t, w, data.ExecutorConfig{})
	ctx := context.Background()
	if err := r1.exec.Submit(ctx, buildReq("job-1", req)); err != nil {
		t.Fatal(err)
	}
	err := r2.exec.Submit(ctx, buildReq("job-1", req))
	var np *data.NotPendingError
	if !errors.As(err, &np) || !errors.Is(err, core.ErrNotFound) {
		t.Errorf("second replica: err = %v, want *NotPendingError (404)", err)
	}
	close(release)
	o := r1.wait(t)
	if o.Err != nil {
		t.Fatalf("the first build failed: %v", o.Err)
	}
	eq(t, "job status", w.job("job-1").Status, core.JobBuilt)
	eq(t, "builds started by the second replica", len(r2.source.ResolveCalls()), 0)
}

// TestSubmitRefusedAtCapacityLeavesTheJobPending: taking the job happens
// only once the build has a slot, so a refusal (busy) leaves the job
// PENDING for the next forward.
func TestSubmitRefusedAtCapacityLeavesTheJobPending(t *testing.T) {
	w := newWorld()
	a, b := fromImage("tpl-a"), fromImage("tpl-b")
	b.WritableLayerSize = "30Gi"
	w.addJob(t, "job-a", a)
	w.addJob(t, "job-b", b)
	r := newReplica(t, w, data.ExecutorConfig{MaxConcurrent: 1})
	hold := make(chan struct{})
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, _ func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil, errors.New("stopped")
	})
	ctx := context.Background()
	if err := r.exec.Submit(ctx, buildReq("job-a", a)); err != nil {
		t.Fatal(err)
	}
	if err := r.exec.Submit(ctx, buildReq("job-b", b)); !errors.Is(err, core.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
	eq(t, "refused job", w.job("job-b").Status, core.JobPending)
	close(hold)
	r.wait(t)
}
