package data_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

func TestSubmitValidation(t *testing.T) {
	envd := []byte("#!/bin/sh\n")
	sum := sha256.Sum256(envd)
	withEnvd := func() *core.FromImageRequest {
		r := fromImage("tpl-envd")
		r.ContainerOverrides = &core.ContainerOverrides{Annotations: map[string]string{pipeline.InjectEnvdAnnotation: "true"}}
		return r
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, w *world)
		req   ports.BuildRequest
		want  []error // every one must match; nil means accepted
	}{
		{"accepted", nil, buildReq("job-a", fromImage("tpl-a")), nil},
		{"accepted although the caller left defaults out and reordered ports",
			nil, buildReq("job-a", func() *core.FromImageRequest {
				r := fromImage("tpl-a")
				r.ExposedPorts = []int32{8080, 9000, 9000}
				r.InstanceType = "cubebox"
				return r
			}()), nil},
		{"accepted against a stored request written by an older writer", func(t *testing.T, w *world) {
			w.setJob(t, "job-a", func(j *core.Job) {
				j.RequestJSON = `{"writable_layer_size":"20Gi","source_image_ref":"registry.example/app:v1","registry_username":"bob","template_id":"tpl-a","exposed_ports":[9000,8080]}`
			})
		}, buildReq("job-a", fromImage("tpl-a")), nil},
		{"missing job id", nil, ports.BuildRequest{Request: fromImage("tpl-a")}, []error{core.ErrInvalidArgument}},
		{"missing request", nil, ports.BuildRequest{JobID: "job-a"}, []error{core.ErrInvalidArgument}},
		{"request without template id", nil, buildReq("job-a", func() *core.FromImageRequest {
			r := fromImage("")
			return r
		}()), []error{core.ErrInvalidArgument}},
		{"invalid request", nil, buildReq("job-a", func() *core.FromImageRequest {
			r := fromImage("tpl-a")
			r.WritableLayerSize = "lots"
			return r
		}()), []error{core.ErrInvalidArgument}},
		{"unknown job", nil, buildReq("job-x", fromImage("tpl-a")), []error{core.ErrNotFound}},
		{"job not pending", func(t *testing.T, w *world) { w.setJob(t, "job-a", func(j *core.Job) { j.Status = core.JobRunning }) },
			buildReq("job-a", fromImage("tpl-a")), []error{data.ErrNotPending, core.ErrNotFound}},
		{"built job is not rebuilt", func(t *testing.T, w *world) {
			w.setJob(t, "job-a", func(j *core.Job) { j.Status, j.Phase, j.ActiveKey = core.JobBuilt, core.PhaseReady, "" })
		},
			buildReq("job-a", fromImage("tpl-a")), []error{data.ErrNotPending}},
		{"request differs from the job's", nil, buildReq("job-a", func() *core.FromImageRequest {
			r := fromImage("tpl-a")
			r.SourceImageRef = "registry.example/app:v2"
			return r
		}()), []error{core.ErrInvalidArgument}},
		{"envd opt-in without the binary", func(*testing.T, *world) {}, buildReq("job-e", withEnvd()), []error{core.ErrInvalidArgument}},
		{"envd sha mismatch", nil, ports.BuildRequest{JobID: "job-e", Request: withEnvd(), EnvdData: envd, EnvdSHA256: strings.Repeat("0", 64)}, []error{core.ErrInvalidArgument}},
		{"envd accepted", nil, ports.BuildRequest{JobID: "job-e", Request: withEnvd(), EnvdData: envd, EnvdSHA256: hex.EncodeToString(sum[:])}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.addJob(t, "job-a", fromImage("tpl-a"))
			w.addJob(t, "job-e", withEnvd())
			if tc.setup != nil {
				tc.setup(t, w)
			}
			r := newReplica(t, w, data.ExecutorConfig{})
			var before core.FromImageRequest
			if tc.req.Request != nil {
				before = *tc.req.Request
			}
			err := r.exec.Submit(context.Background(), tc.req)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Submit: %v", err)
				}
				if o := r.wait(t); o.Err != nil {
					t.Fatalf("build: %v", o.Err)
				}
				return
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Fatalf("err = %v, want %v", err, want)
				}
			}
			if r.exec.Running() != 0 || len(w.reporter.ReportCalls()) != 0 {
				t.Fatal("a refused submit started a build or reported")
			}
			if tc.req.Request != nil && tc.req.Request.TemplateID != before.TemplateID {
				t.Fatal("Submit changed the caller's request")
			}
		})
	}
}

func TestSubmitInFlightAndCapacity(t *testing.T) {
	w := newWorld()
	// Different specs: builds of one spec would wait for each other's
	// fingerprint lock instead of running side by side.
	reqs := map[string]*core.FromImageRequest{}
	for i, id := range []string{"job-1", "job-2", "job-3"} {
		reqs[id] = fromImage("tpl-" + id)
		reqs[id].WritableLayerSize = fmt.Sprintf("%dGi", i+1)
		w.addJob(t, id, reqs[id])
	}
	r := newReplica(t, w, data.ExecutorConfig{MaxConcurrent: 2})
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, _ func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	})
	ctx := context.Background()
	if err := r.exec.Submit(ctx, buildReq("job-1", reqs["job-1"])); err != nil {
		t.Fatal(err)
	}
	if err := r.exec.Submit(ctx, buildReq("job-1", reqs["job-1"])); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("duplicate submit: err = %v, want ErrConflict", err)
	}
	if err := r.exec.Submit(ctx, buildReq("job-2", reqs["job-2"])); err != nil {
		t.Fatal(err)
	}
	if err := r.exec.Submit(ctx, buildReq("job-3", reqs["job-3"])); !errors.Is(err, core.ErrBusy) {
		t.Fatalf("third submit at cap 2: err = %v, want ErrBusy", err)
	}
	if got := r.exec.InFlight(); !slices.Equal(got, []string{"job-1", "job-2"}) || r.exec.Running() != 2 {
		t.Fatalf("InFlight = %v, Running = %d", got, r.exec.Running())
	}
	<-started
	<-started
	close(release)
	r.wait(t)
	r.wait(t)
	eventually(t, "in-flight set to empty", func() bool { return r.exec.Running() == 0 })
	// Capacity is free again, and job-3 is still PENDING.
	if err := r.exec.Submit(ctx, buildReq("job-3", reqs["job-3"])); err != nil {
		t.Fatalf("submit after the others finished: %v", err)
	}
	r.wait(t)
}

func TestBuildReportsInOrderAndRecordsTheArtifact(t *testing.T) {
	w := newWorld()
	req := fromImage("tpl-a")
	w.addJob(t, "job-a", req)
	r := newReplica(t, w, data.ExecutorConfig{})
	aid, fp := expectedArtifactID(t, req)

	seen := func(pred func(ports.StatusReport) bool) func() bool {
		return func() bool {
			return slices.ContainsFunc(w.reportsOf("job-a"), func(x report) bool { return pred(x.r) })
		}
	}
	// Hold the pipeline at each step until the matching report arrived, so
	// the test sees every report the build makes while it runs.
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		eventually(t, "report naming the artifact", seen(func(s ports.StatusReport) bool {
			return s.Update.ArtifactID == aid && s.Update.Fingerprint == fp && s.Update.SourceImageDigest == testDigest && s.Update.Phase == core.PhasePulling
		}))
		progress(ports.PullProgress{TotalBytes: 100, DownloadedBytes: 100, TotalLayers: 1, CompletedLayers: 1})
		return nil, nil
	})
	r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
		eventually(t, "BUILDING_EXT4 report", seen(func(s ports.StatusReport) bool { return s.Update.Phase == core.PhaseBuildingExt4 }))
		return writeImage(spec, tree)
	}

	if err := r.exec.Submit(context.Background(), buildReq("job-a", req)); err != nil {
		t.Fatal(err)
	}
	if o := r.wait(t); o.Err != nil || o.Reused || o.ArtifactID != aid || o.Result == nil {
		t.Fatalf("outcome = %+v", o)
	}

	reps := w.reportsOf("job-a")
	first, last := reps[0].r.Update, reps[len(reps)-1].r
	if first.Status != core.JobRunning || first.Phase != core.PhasePulling || *first.Progress != 5 {
		t.Fatalf("first report = %+v, want RUNNING/PULLING/5", first)
	}
	order := []core.Phase{core.PhasePulling, core.PhaseUnpacking, core.PhaseBuildingExt4, core.PhaseGeneratingJSON, core.PhaseUploading, core.PhaseReady}
	prev := 0
	for i, x := range reps {
		if x.err != nil {
			t.Fatalf("report %d (%+v) refused by the control plane: %v", i, x.r.Update, x.err)
		}
		at := slices.Index(order, x.r.Update.Phase)
		if at < prev {
			t.Fatalf("report %d went back to %s: %+v", i, x.r.Update.Phase, reps)
		}
		prev = at
		if x.r.Update.Status == core.JobBuilt && i != len(reps)-1 {
			t.Fatal("a report followed BUILT")
		}
	}
	u := last.Update
	if u.Status != core.JobBuilt || u.Phase != core.PhaseReady || *u.Progress != 100 || u.ArtifactID != aid ||
		u.Fingerprint != fp || u.SourceImageDigest != testDigest || u.ArtifactStatus != string(core.ArtifactReady) ||
		u.Pull == nil || u.Pull.DownloadedBytes != 100 {
		t.Fatalf("BUILT report = %+v", u)
	}

	a, ok := w.artifact(aid)
	if !ok || last.Artifact == nil || *last.Artifact != a {
		t.Fatalf("BUILT artifact %+v, row %+v", last.Artifact, a)
	}
	blob, _ := w.object(t, core.ArtifactObjectKey(aid))
	sum := sha256.Sum256(blob)
	if a.Status != core.ArtifactReady || a.Fingerprint != fp || a.Ext4SHA256 != hex.EncodeToString(sum[:]) ||
		a.Ext4SizeBytes != int64(len(blob)) || a.ObjectKey != core.ArtifactObjectKey(aid) || a.StorageBackend != "mem" ||
		a.SourceImageDigest != testDigest || a.SourceImageRef != req.SourceImageRef || a.WritableLayerSize != "20Gi" ||
		a.DownloadBaseURL != "http://tc.example:8090" || a.DownloadToken != "dk1.tok-1" || a.GCDeadline <= w.now.Unix() {
		t.Fatalf("artifact row = %+v", a)
	}
	// The builder that wrote the bytes is recorded, and the report names
	// it among the fingerprint's inputs, where the control plane reads it.
	if a.Builder != "fake/1" || last.Inputs == nil || last.Inputs.Builder != "fake/1" {
		t.Fatalf("builder: row %q, report inputs %+v; want fake/1 (the builder's Format)", a.Builder, last.Inputs)
	}
	if a.ImageConfigJSON != `{"Entrypoint":["/app"],"Cmd":["serve"],"Env":["A=1"],"WorkingDir":"/srv","User":"1000"}` {
		t.Fatalf("image config json = %s", a.ImageConfigJSON)
	}
	if j := w.job("job-a"); j.Status != core.JobBuilt || j.ArtifactID != aid || j.ArtifactStatus != "READY" {
		t.Fatalf("job row = %+v", j)
	}
	if req.RegistryPassword != "secret" {
		t.Fatal("the caller's request was changed")
	}
	if img := r.source.ResolveCalls()[0].Req; img.Username != "bob" || img.Password != "secret" || img.Platform != core.DefaultPlatform {
		t.Fatalf("image request = %+v", img)
	}
	if held := w.locker.heldNames(); len(held) != 0 {
		t.Fatalf("locks still held: %v", held)
	}
}

func TestBuildFailureReportsPhaseAndFailsTheArtifact(t *testing.T) {
	boom := errors.New("registry said 503")
	cases := []struct {
		name      string
		setup     func(r *replica, w *world)
		phase     core.Phase
		msg       string
		claimed   bool // the artifact row exists and must be FAILED
		published bool
	}{
		{"resolve", func(r *replica, w *world) {
			r.source.ResolveFunc = func(context.Context, ports.ImageRequest) (*ports.ResolvedImage, error) { return nil, boom }
		}, core.PhasePulling, "registry said 503", false, false},
		{"fetch", func(r *replica, w *world) {
			r.source.StreamLayersFunc = portsmock.Streamed(func(context.Context, ports.ImageRequest, *ports.ResolvedImage, func(ports.PullProgress)) ([]ports.LocalLayer, error) {
				return nil, boom
			})
		}, core.PhasePulling, "registry said 503", true, false},
		{"hostile layer", func(r *replica, w *world) {
			r.flattener.FlattenFunc = func(ctx context.Context, _ []ports.FlattenLayer, use func(ports.Tree) error) (ports.TreeStats, error) {
				return ports.TreeStats{}, &core.FieldError{Field: "layer 0 (sha256:abcd) entry ../../etc/passwd", Reason: "path escapes the root"}
			}
		}, core.PhaseBuildingExt4, "layer 0 (sha256:abcd) entry ../../etc/passwd: path escapes the root", true, false},
		{"publish", func(r *replica, w *world) {
			w.blob.putErr = boom
		}, core.PhaseUploading, "registry said 503", true, false},
		{"artifact row cannot be made READY", func(r *replica, w *world) {
			w.store.artifactUpdate = func(orig ports.ArtifactRepository, ctx context.Context, id string, fn func(*core.Artifact) error) (*core.Artifact, error) {
				return orig.Update(ctx, id, func(a *core.Artifact) error {
					if err := fn(a); err != nil {
						return err
					}
					if a.Status == core.ArtifactReady {
						return boom
					}
					return nil
				})
			}
		}, core.PhaseUploading, "registry said 503", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			req := fromImage("tpl-a")
			w.addJob(t, "job-a", req)
			r := newReplica(t, w, data.ExecutorConfig{})
			tc.setup(r, w)
			if err := r.exec.Submit(context.Background(), buildReq("job-a", req)); err != nil {
				t.Fatal(err)
			}
			o := r.wait(t)
			if o.Err == nil || o.Phase != tc.phase {
				t.Fatalf("outcome = %+v", o)
			}
			reps := w.reportsOf("job-a")
			last := reps[len(reps)-1].r.Update
			if last.Status != core.JobFailed || last.Phase != tc.phase || last.ErrorMessage == nil || !strings.Contains(*last.ErrorMessage, tc.msg) {
				t.Fatalf("terminal report = %+v (message %q), want FAILED/%s containing %q", last, deref(last.ErrorMessage), tc.phase, tc.msg)
			}
			j := w.job("job-a")
			if j.Status != core.JobFailed || j.Phase != tc.phase || j.ActiveKey != "" {
				t.Fatalf("job row = %+v", j)
			}
			aid, _ := expectedArtifactID(t, req)
			a, ok := w.artifact(aid)
			switch {
			case tc.claimed && (!ok || a.Status != core.ArtifactFailed || !strings.Contains(a.LastError, tc.msg) || last.ArtifactStatus != "FAILED"):
				t.Fatalf("artifact row = %+v (exists %v), report artifact status %q", a, ok, last.ArtifactStatus)
			case !tc.claimed && ok:
				t.Fatalf("artifact row created by a build that failed before the claim: %+v", a)
			}
			if _, ok := w.object(t, core.ArtifactObjectKey(aid)); !tc.published && ok {
				t.Fatal("bytes published by a failed build")
			}
			if len(w.locker.heldNames()) != 0 {
				t.Fatal("lock leaked")
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestBuildTimeoutFreesTheSlot: a registry that trickles bytes (or asks
// to be retried in a day) never trips the idle timeout; the build limit
// fails the job, releases its lock and frees its build slot.
func TestBuildTimeoutFreesTheSlot(t *testing.T) {
	w := newWorld()
	req := fromImage("tpl-slow")
	w.addJob(t, "job-slow", req)
	r := newReplica(t, w, data.ExecutorConfig{MaxConcurrent: 1, BuildTimeout: 50 * time.Millisecond})
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, _ func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		<-ctx.Done() // a pull that would go on for hours
		return nil, fmt.Errorf("fetch layer: %w", ctx.Err())
	})
	if err := r.exec.Submit(context.Background(), buildReq("job-slow", req)); err != nil {
		t.Fatal(err)
	}
	o := r.wait(t)
	var te *data.BuildTimeoutError
	if !errors.As(o.Err, &te) || !errors.Is(o.Err, context.DeadlineExceeded) || o.Phase != core.PhasePulling {
		t.Fatalf("outcome = %+v, want a BuildTimeoutError while pulling", o)
	}
	j := w.job("job-slow")
	if j.Status != core.JobFailed || !strings.Contains(j.ErrorMessage, "CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT") {
		t.Fatalf("job row = %s %q, want FAILED naming the setting", j.Status, j.ErrorMessage)
	}
	if len(w.locker.heldNames()) != 0 {
		t.Fatal("lock leaked")
	}
	eventually(t, "the build slot to be free", func() bool { return r.exec.Running() == 0 })
}
