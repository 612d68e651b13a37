package data_test

import (
	"context"
	"errors"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// blockPull makes the pull wait until release is closed or the build's
// context ends.
func (r *replica) blockPull(release <-chan struct{}) {
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, _ func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	})
}

// A build writes its process's instance id into its job and touches the
// row while it runs, whatever the control plane answers: the liveness
// sweeps judge it by that.
func TestBuildOwnsAndHeartbeatsItsJob(t *testing.T) {
	w := newWorld()
	w.addJob(t, "job-1", fromImage("tpl-1"))
	r := newReplica(t, w, data.ExecutorConfig{Owner: "tc-me", HeartbeatEvery: 5 * time.Millisecond})
	release := make(chan struct{})
	r.blockPull(release)
	if err := r.exec.Submit(context.Background(), buildReq("job-1", fromImage("tpl-1"))); err != nil {
		t.Fatal(err)
	}
	eq(t, "owner", w.job("job-1").BuildOwner, "tc-me")
	w.mu.Lock()
	w.now = w.now.Add(time.Minute)
	later := w.now
	w.mu.Unlock()
	eventually(t, "a heartbeat after the clock moved", func() bool { return !w.job("job-1").UpdatedAt.Before(later) })
	close(release)
	r.wait(t)
}

// Another process's job is not taken.
func TestSubmitRefusesAJobAnotherProcessTook(t *testing.T) {
	w := newWorld()
	w.addJob(t, "job-1", fromImage("tpl-1"))
	w.setJob(t, "job-1", func(j *core.Job) { j.BuildOwner = "tc-other" })
	r := newReplica(t, w, data.ExecutorConfig{Owner: "tc-me"})
	err := r.exec.Submit(context.Background(), buildReq("job-1", fromImage("tpl-1")))
	if !errors.Is(err, core.ErrConflict) {
		t.Fatalf("Submit: %v, want core.ErrConflict", err)
	}
	if r.exec.Running() != 0 {
		t.Fatal("the refused build runs")
	}
}

// A build whose job was ended elsewhere (failed as abandoned by a sweep
// that judged this process dead) stops at its next heartbeat.
func TestBuildStopsWhenItsJobEndedElsewhere(t *testing.T) {
	w := newWorld()
	w.addJob(t, "job-1", fromImage("tpl-1"))
	r := newReplica(t, w, data.ExecutorConfig{Owner: "tc-me", HeartbeatEvery: 5 * time.Millisecond})
	r.blockPull(make(chan struct{}))
	if err := r.exec.Submit(context.Background(), buildReq("job-1", fromImage("tpl-1"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the build running", func() bool { return w.job("job-1").Status == core.JobRunning })
	w.setJob(t, "job-1", func(j *core.Job) { _ = j.Apply(core.Fail(j.Phase, "build abandoned: test")) })
	o := r.wait(t)
	if !errors.Is(o.Err, data.ErrJobEnded) {
		t.Fatalf("outcome %v, want data.ErrJobEnded", o.Err)
	}
}

// Pulled bytes reach the control plane while the pull runs, through the
// status reports alone (no progress sink: no Redis), at most one report
// per ReportEvery.
func TestPullProgressIsReportedWhileItPulls(t *testing.T) {
	w := newWorld()
	w.addJob(t, "job-1", fromImage("tpl-1"))
	r := newReplica(t, w, data.ExecutorConfig{ReportEvery: 10 * time.Millisecond})
	r.exec.Progress = nil
	seen := func(n int64) bool {
		for _, rep := range w.reportsOf("job-1") {
			if p := rep.r.Update.Pull; p != nil && p.DownloadedBytes == n && rep.r.Update.Status == core.JobRunning {
				return true
			}
		}
		return false
	}
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		for _, n := range []int64{10, 50, 90} {
			w.mu.Lock()
			w.now = w.now.Add(time.Second)
			w.mu.Unlock()
			progress(ports.PullProgress{TotalBytes: 100, DownloadedBytes: n, TotalLayers: 1})
			eventually(t, "a report of the bytes pulled so far", func() bool { return seen(n) })
		}
		progress(ports.PullProgress{TotalBytes: 100, DownloadedBytes: 100, TotalLayers: 1, CompletedLayers: 1})
		return localLayers(), nil
	})
	if err := r.exec.Submit(context.Background(), buildReq("job-1", fromImage("tpl-1"))); err != nil {
		t.Fatal(err)
	}
	if o := r.wait(t); o.Err != nil {
		t.Fatal(o.Err)
	}
	if j := w.job("job-1"); j.Status != core.JobBuilt || j.PhaseDurations[core.PhasePulling] != 3*time.Second {
		t.Errorf("job %s, durations %v; want BUILT with PULLING 3s (as the data plane's clock measured it)", j.Status, j.PhaseDurations)
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func localLayers() []ports.LocalLayer {
	return []ports.LocalLayer{{Descriptor: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip}, Path: "/layers/1"}}
}

// The heartbeat does not wait behind reports: with the master away (a
// report that hangs), the job row is still touched.
func TestHeartbeatGoesOnWhileTheMasterIsAway(t *testing.T) {
	w := newWorld()
	w.addJob(t, "job-1", fromImage("tpl-1"))
	away := make(chan struct{})
	w.reporter.ReportFunc = func(ctx context.Context, _ string, _ ports.StatusReport) error {
		select {
		case <-away:
		case <-ctx.Done():
		}
		return errors.New("master away")
	}
	r := newReplica(t, w, data.ExecutorConfig{Owner: "tc-me", HeartbeatEvery: 5 * time.Millisecond})
	release := make(chan struct{})
	r.blockPull(release)
	if err := r.exec.Submit(context.Background(), buildReq("job-1", fromImage("tpl-1"))); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.now = w.now.Add(time.Minute)
	later := w.now
	w.mu.Unlock()
	eventually(t, "a heartbeat while every report hangs", func() bool { return !w.job("job-1").UpdatedAt.Before(later) })
	close(away)
	close(release)
	r.wait(t)
}
