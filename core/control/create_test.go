package control_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
	"github.com/cubesandbox/templatecenter/testkit/testca"
)

func TestCreateFromImageDispatch(t *testing.T) {
	boom := errors.New("connection refused")
	tests := []struct {
		name       string
		submitErr  error
		wantErr    error // nil: success
		wantStatus core.JobStatus
		wantMsg    string
	}{
		{"accepted", nil, nil, core.JobPending, ""},
		{"already in flight", core.ErrConflict, nil, core.JobPending, ""},
		{"busy", core.ErrBusy, core.ErrBusy, core.JobFailed, "the data plane is at capacity"},
		{"down", boom, boom, core.JobFailed, "forward build to the data plane: connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			e.submitErr = tc.submitErr
			req := request("tpl-d")
			job, err := e.svc.CreateFromImage(e.ctx, req, "master:8089")
			if tc.wantErr == nil && err != nil {
				t.Fatalf("CreateFromImage: %v", err)
			}
			if tc.wantErr != nil {
				wantErrIs(t, err, tc.wantErr)
			}
			if job == nil {
				t.Fatal("no job returned")
			}
			j := e.job(job.JobID)
			eq(t, "status", j.Status, tc.wantStatus)
			if !strings.Contains(j.ErrorMessage, tc.wantMsg) {
				t.Errorf("message %q lacks %q", j.ErrorMessage, tc.wantMsg)
			}
			if tc.wantStatus == core.JobFailed && j.ActiveKey != "" {
				t.Error("failed job still blocks the template")
			}
			calls := e.disp.SubmitBuildCalls()
			if len(calls) != 1 {
				t.Fatalf("SubmitBuild calls = %d", len(calls))
			}
			br := calls[0].Req
			eq(t, "job id", br.JobID, job.JobID)
			eq(t, "download base", br.DownloadBaseURL, "http://master:8089")
			eq(t, "password forwarded", br.Request.RegistryPassword, "s3cret")
			if br.EnvdData != nil {
				t.Error("envd sent without opt-in")
			}
		})
	}
}

func TestCreateFromImageIdempotentResubmit(t *testing.T) {
	e := newEnv(t, "node-1")
	first := e.create(request("tpl-idem"))
	second := e.create(request("tpl-idem"))
	eq(t, "same job", second.JobID, first.JobID)
	eq(t, "SubmitBuild calls", len(e.disp.SubmitBuildCalls()), 1)

	other := request("tpl-idem")
	other.WritableLayerSize = "30Gi"
	_, err := e.svc.CreateFromImage(e.ctx, other, baseURL)
	wantErrIs(t, err, core.ErrAttemptInProgress)

	// A BUILT job is never forwarded again.
	e.build(first.JobID, fpA)
	e.wait()
	_, err = e.svc.CreateFromImage(e.ctx, request("tpl-idem"), baseURL)
	wantErrIs(t, err, core.ErrDuplicateTemplate)
	eq(t, "SubmitBuild calls", len(e.disp.SubmitBuildCalls()), 1)
}

func TestCreateFromImageEnvd(t *testing.T) {
	binary := []byte("\x7fELF envd")
	sum := sha256.Sum256(binary)
	optIn := func(tid string) *core.FromImageRequest {
		r := request(tid)
		r.ContainerOverrides = &core.ContainerOverrides{Annotations: map[string]string{core.AnnotationInjectEnvd: "true"}}
		return r
	}

	t.Run("sent with its sha256", func(t *testing.T) {
		e := newEnv(t, "node-1")
		e.svc.Envd = &portsmock.EnvdSourceMock{EnvdFunc: func(context.Context) ([]byte, error) { return binary, nil }}
		e.create(optIn("tpl-envd"))
		br := e.disp.SubmitBuildCalls()[0].Req
		eq(t, "envd data", string(br.EnvdData), string(binary))
		eq(t, "envd sha", br.EnvdSHA256, hex.EncodeToString(sum[:]))
	})
	t.Run("not configured", func(t *testing.T) {
		e := newEnv(t, "node-1")
		_, err := e.svc.CreateFromImage(e.ctx, optIn("tpl-envd"), baseURL)
		wantErrIs(t, err, core.ErrInvalidArgument)
		if _, err := e.store.Jobs().Latest(e.ctx, "tpl-envd"); !errors.Is(err, core.ErrNotFound) {
			t.Error("a job was created although envd is not available")
		}
	})
	t.Run("uploaded wins over the configured one", func(t *testing.T) {
		e := newEnv(t, "node-1")
		e.svc.Envd = &portsmock.EnvdSourceMock{EnvdFunc: func(context.Context) ([]byte, error) { return []byte("\x7fELF configured"), nil }}
		upload := []byte("\x7fELF uploaded envd")
		upSum := sha256.Sum256(upload)
		if _, err := e.svc.CreateFromImageWithEnvd(e.ctx, optIn("tpl-up"), baseURL, upload); err != nil {
			t.Fatal(err)
		}
		br := e.disp.SubmitBuildCalls()[0].Req
		eq(t, "envd data", string(br.EnvdData), string(upload))
		eq(t, "envd sha", br.EnvdSHA256, hex.EncodeToString(upSum[:]))
		eq(t, "configured source read", len(e.svc.Envd.(*portsmock.EnvdSourceMock).EnvdCalls()), 0)
	})
	t.Run("uploaded without a configured one", func(t *testing.T) {
		e := newEnv(t, "node-1")
		if _, err := e.svc.CreateFromImageWithEnvd(e.ctx, optIn("tpl-up"), baseURL, binary); err != nil {
			t.Fatal(err)
		}
		eq(t, "envd data", string(e.disp.SubmitBuildCalls()[0].Req.EnvdData), string(binary))
	})
	t.Run("upload refused", func(t *testing.T) {
		for name, tc := range map[string]struct {
			req    *core.FromImageRequest
			upload []byte
			msg    string
		}{
			"without the opt-in": {request("tpl-x"), binary, "does not opt in"},
			"not ELF":            {optIn("tpl-x"), []byte("#!/bin/sh\n"), "not an ELF"},
			"empty":              {optIn("tpl-x"), []byte{}, "empty"},
			"too large":          {optIn("tpl-x"), append([]byte("\x7fELF"), make([]byte, core.MaxEnvdBytes)...), "at most"},
		} {
			e := newEnv(t, "node-1")
			_, err := e.svc.CreateFromImageWithEnvd(e.ctx, tc.req, baseURL, tc.upload)
			var fe *core.FieldError
			if !errors.As(err, &fe) || fe.Field != "envd" || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s: err = %v, want an envd field error saying %q", name, err, tc.msg)
			}
			eq(t, name+": SubmitBuild calls", len(e.disp.SubmitBuildCalls()), 0)
		}
	})
	t.Run("load fails", func(t *testing.T) {
		e := newEnv(t, "node-1")
		e.svc.Envd = &portsmock.EnvdSourceMock{EnvdFunc: func(context.Context) ([]byte, error) { return nil, errors.New("no such file") }}
		job, err := e.svc.CreateFromImage(e.ctx, optIn("tpl-envd"), baseURL)
		if err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("err = %v", err)
		}
		eq(t, "status", e.job(job.JobID).Status, core.JobFailed)
		eq(t, "SubmitBuild calls", len(e.disp.SubmitBuildCalls()), 0)
	})
}

func TestCreateFromImageRejectsBadInput(t *testing.T) {
	e := newEnv(t, "node-1")
	resources := func(r *core.Resource) func(*core.FromImageRequest) {
		return func(req *core.FromImageRequest) { req.ContainerOverrides = &core.ContainerOverrides{Resources: r} }
	}
	tests := []struct {
		name  string
		mut   func(r *core.FromImageRequest)
		field string // "": any field
	}{
		{"no image", func(r *core.FromImageRequest) { r.SourceImageRef = "" }, ""},
		{"mount over /", func(r *core.FromImageRequest) {
			r.ContainerOverrides = &core.ContainerOverrides{VolumeMounts: []byte(`[{"name":"x","container_path":"/"}]`)}
		}, ""},
		{"security context not an object", func(r *core.FromImageRequest) {
			r.ContainerOverrides = &core.ContainerOverrides{SecurityContext: []byte(`[1]`)}
		}, ""},
		{"bad alias", func(r *core.FromImageRequest) { r.Alias = "Has Space" }, ""},
		// cubemastercli --cpu -5 sends "-5m".
		{"negative cpu", resources(&core.Resource{CPU: "-5m", Mem: "2000Mi"}), "container_overrides.resources.cpu"},
		{"zero cpu", resources(&core.Resource{CPU: "0m"}), "container_overrides.resources.cpu"},
		{"memory not a quantity", resources(&core.Resource{CPU: "2", Mem: "lots"}), "container_overrides.resources.mem"},
		{"negative limit", resources(&core.Resource{CPU: "1", Limit: &core.Resource{Mem: "-1Gi"}}), "container_overrides.resources.limit.mem"},
		{"unknown node", func(r *core.FromImageRequest) { r.DistributionScope = []string{"node-1", "node-9"} }, "distribution_scope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := request("tpl-bad")
			tc.mut(r)
			_, err := e.svc.CreateFromImage(e.ctx, r, baseURL)
			wantErrIs(t, err, core.ErrInvalidArgument)
			var fe *core.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %v does not name the field", err)
			} else if tc.field != "" && fe.Field != tc.field {
				t.Errorf("error %v names %s, want %s", err, fe.Field, tc.field)
			}
		})
	}
	if _, err := e.store.Jobs().Latest(e.ctx, "tpl-bad"); !errors.Is(err, core.ErrNotFound) {
		t.Error("a refused request left a job")
	}
	// Quantities a node takes, and a scope naming a node by id or IP, pass.
	ok := request("tpl-good")
	ok.ContainerOverrides = &core.ContainerOverrides{Resources: &core.Resource{CPU: "500m", Mem: "2Gi", Limit: &core.Resource{CPU: "1.5", Mem: "2048Mi"}}}
	ok.DistributionScope = []string{"node-1", node("node-1").IP}
	if _, err := e.svc.CreateFromImage(e.ctx, ok, baseURL); err != nil {
		t.Fatalf("a valid request was refused: %v", err)
	}
	eq(t, "SubmitBuild calls (the valid request's only)", len(e.disp.SubmitBuildCalls()), 1)
}

// The control plane and the data plane must agree on the opt-in key.
func TestEnvdAnnotationMatchesBuilder(t *testing.T) {
	eq(t, "annotation", core.AnnotationInjectEnvd, pipeline.InjectEnvdAnnotation)
}

// TestResubmitRedispatchesAPendingJob: a master died between writing a
// PENDING job and forwarding it to the data plane. An identical resubmit
// must forward it again; before, it returned the job untouched and the
// template stayed wedged until the data plane's reconciler failed the job.
func TestResubmitRedispatchesAPendingJob(t *testing.T) {
	e := newEnv(t, "node-1")
	res, err := e.svc.SubmitFromImage(e.ctx, request("tpl-wedged")) // inserted, never forwarded
	if err != nil || !res.Created {
		t.Fatalf("submit: %+v, %v", res, err)
	}
	eq(t, "forwarded so far", len(e.disp.SubmitBuildCalls()), 0)
	e.clock.Advance(time.Minute)
	job, err := e.svc.CreateFromImage(e.ctx, request("tpl-wedged"), baseURL)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "same job", job.JobID, res.Job.JobID)
	calls := e.disp.SubmitBuildCalls()
	if len(calls) != 1 || calls[0].Req.JobID != job.JobID {
		t.Fatalf("the PENDING job was not forwarded again (%d calls)", len(calls))
	}
	eq(t, "password forwarded", calls[0].Req.Request.RegistryPassword, "s3cret")
	// The data plane already having it is fine.
	e.submitErr = fmt.Errorf("in flight: %w", core.ErrConflict)
	if again, err := e.svc.CreateFromImage(e.ctx, request("tpl-wedged"), baseURL); err != nil || again.Status != core.JobPending {
		t.Fatalf("resubmit while in flight: %+v, %v", again, err)
	}
}

// TestResubmitLeavesAReuseRedoAlone: a redo that reuses its artifact is a
// PENDING REDO job in a post-build phase with the create's stored request,
// so re-posting the original request finds it as "the same request". Once
// it is older than the redispatch delay (here: its resume waits for the
// artifact's lock), the resubmit must neither send it to the data plane
// (there is nothing to build) nor fail it when the data plane is busy;
// before, it did both.
func TestResubmitLeavesAReuseRedoAlone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		submitErr error
	}{
		{"data plane idle", nil},
		{"data plane at capacity", fmt.Errorf("full: %w", core.ErrBusy)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			e.ready("tpl-r", fpA)
			// Another template's resume holds the artifact's lock.
			l, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
			if err != nil {
				t.Fatal(err)
			}
			redo, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "redo-1", TemplateID: "tpl-r"})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "redo status", redo.Status, core.JobPending)
			if !redo.Phase.PostBuild() {
				t.Fatalf("redo phase %s: the artifact was not reused", redo.Phase)
			}
			before := len(e.disp.SubmitBuildCalls())
			e.clock.Advance(20 * time.Second)
			e.set(func() { e.submitErr = tc.submitErr })

			job, err := e.svc.CreateFromImage(e.ctx, request("tpl-r"), baseURL)
			if err != nil {
				t.Fatalf("resubmit: %v", err)
			}
			eq(t, "resubmit returns the redo", job.JobID, redo.JobID)
			eq(t, "builds sent to the data plane", len(e.disp.SubmitBuildCalls())-before, 0)
			eq(t, "redo status after the resubmit", e.job(redo.JobID).Status, core.JobPending)

			_ = l.Unlock(e.ctx)
			e.wait()
			eq(t, "redo status at the end", e.job(redo.JobID).Status, core.JobReady)
		})
	}
}

// TestDispatchSendsTheCubeCA: a build that wants the CubeEgress CA
// (with_cube_ca, the default) gets the one this master serves; none
// installed sends none (the data plane may have its own); a broken one
// fails the job before the data plane sees it; with_cube_ca=false never
// reads it.
func TestDispatchSendsTheCubeCA(t *testing.T) {
	ca := testca.PEM(1)
	off := false
	tests := []struct {
		name    string
		src     func(context.Context) ([]byte, error)
		withCA  *bool
		wantCA  []byte
		wantErr string
	}{
		{name: "installed", src: func(context.Context) ([]byte, error) { return ca, nil }, wantCA: ca},
		{name: "not installed", src: func(context.Context) ([]byte, error) { return nil, fmt.Errorf("x: %w", core.ErrNotFound) }},
		{name: "broken", src: func(context.Context) ([]byte, error) { return nil, fmt.Errorf("x: %w", core.ErrInvalidArgument) }, wantErr: "with_cube_ca=true"},
		{name: "not wanted", src: func(context.Context) ([]byte, error) { t.Error("CA read"); return ca, nil }, withCA: &off},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			e.svc.CubeCA = &portsmock.CubeCASourceMock{CubeCAFunc: tc.src}
			req := request("tpl-ca")
			req.WithCubeCA = tc.withCA
			job, err := e.svc.CreateFromImage(e.ctx, req, baseURL)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				eq(t, "job status", e.job(job.JobID).Status, core.JobFailed)
				eq(t, "SubmitBuild calls", len(e.disp.SubmitBuildCalls()), 0)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "CA sent", string(e.disp.SubmitBuildCalls()[0].Req.CubeCA), string(tc.wantCA))
		})
	}
}

// TestTemplateSaysWhetherTheCAIsBaked: the template answer carries the
// artifact's CubeEgress CA fields, and a note when the request wanted the
// CA and the image has none.
func TestTemplateSaysWhetherTheCAIsBaked(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-plain", fpA)
	info, err := e.svc.GetTemplate(e.ctx, "tpl-plain")
	if err != nil {
		t.Fatal(err)
	}
	if info.CubeEgressCABaked || !strings.Contains(info.CubeEgressCANote, "not baked") {
		t.Fatalf("no CA: baked %v note %q", info.CubeEgressCABaked, info.CubeEgressCANote)
	}

	off := false
	req := request("tpl-off")
	req.WithCubeCA = &off
	job := e.create(req)
	e.build(job.JobID, fpB)
	e.wait()
	if info, _ = e.svc.GetTemplate(e.ctx, "tpl-off"); info.CubeEgressCANote != "" {
		t.Fatalf("with_cube_ca=false still noted: %q", info.CubeEgressCANote)
	}

	caFP := strings.Repeat("c", 64)
	job = e.create(request("tpl-ca"))
	// The CA's fingerprint is one of the build's inputs: the report's
	// fingerprint is the job's request built with it.
	inputs := &core.BuildInputs{SourceImageDigest: digestA, CAFingerprint: caFP, BuilderFormat: core.BuilderFormatVersion, Builder: testBuilder}
	c := *request("tpl-ca")
	n, err := core.NormalizeFromImageRequest(&c, nil)
	if err != nil {
		t.Fatal(err)
	}
	fpC, err := core.FingerprintOf(n, *inputs)
	if err != nil {
		t.Fatal(err)
	}
	running := core.Progress(core.JobRunning, core.PhaseUnpacking, 20)
	running.ArtifactID, running.Fingerprint, running.SourceImageDigest = aidOf(fpC), fpC, digestA
	e.svc.HandleStatusReport(e.ctx, job.JobID, ports.StatusReport{Update: running})
	built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	built.ArtifactID, built.ArtifactStatus, built.Fingerprint = aidOf(fpC), "READY", fpC
	meta := artifactMeta(fpC)
	meta.CubeEgressCABaked, meta.CubeEgressCAFingerprint, meta.CubeEgressCATargetsWritten = true, caFP, 2
	if ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, ports.StatusReport{Update: built, Artifact: meta, Inputs: inputs}); err != nil || !ok {
		t.Fatalf("BUILT: %v %v", ok, err)
	}
	e.wait()
	info, err = e.svc.GetTemplate(e.ctx, "tpl-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !info.CubeEgressCABaked || info.CubeEgressCAFingerprint != caFP || info.CubeEgressCATargetsWritten != 2 || info.CubeEgressCANote != "" {
		t.Fatalf("baked: %+v", info)
	}
}
