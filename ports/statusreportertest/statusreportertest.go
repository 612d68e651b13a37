package statusreportertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Answer is how the harness's control plane answers one report that
// reaches its status handler.
type Answer int

const (
	// Accept applies the report.
	Accept Answer = iota
	// AcknowledgeStale acknowledges a duplicate or late report without
	// applying it (it is still delivered).
	AcknowledgeStale
	// FailTransient fails the way retrying may fix: the control plane's
	// database is briefly unavailable (an HTTP control plane answers 5xx).
	FailTransient
	// RefuseUnknownJob refuses the report: no such job (core.ErrNotFound).
	RefuseUnknownJob
	// RefuseTransition refuses the report: the job's state machine does
	// not allow it (core.ErrInvalidTransition).
	RefuseTransition
	// Hold keeps the report waiting until its request is cancelled or the
	// harness closes; it is not delivered.
	Hold
)

// Delivery is a report the control plane took.
type Delivery struct {
	JobID  string
	Report ports.StatusReport
}

// Harness serves a control plane for the reporter under test.
type Harness interface {
	// MakeReporter returns the StatusReporter under test, with the
	// credentials the control plane accepts.
	MakeReporter(ctx context.Context) (ports.StatusReporter, error)
	// MakeReporterWithWrongToken returns one whose token the control plane
	// refuses.
	MakeReporterWithWrongToken(ctx context.Context) (ports.StatusReporter, error)
	// Script sets the answers to the next reports that reach the status
	// handler, one each, in order; once they are used up it accepts.
	Script(answers ...Answer)
	// Delivered returns the reports answered Accept or AcknowledgeStale, in
	// order.
	Delivered() []Delivery
	// Attempts counts the requests that reached the control plane, refused
	// ones included.
	Attempts() int
	// Held counts the reports the control plane has started holding so far
	// (Answer Hold), released ones included.
	Held() int
	// Secrets returns every token involved; no error may contain one.
	Secrets() []string
	// Close releases what the harness opened, held reports included.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds each subtest, and with it every retry schedule and
// every wait for the control plane.
const testTimeout = 60 * time.Second

type env struct {
	ctx context.Context
	h   Harness
	r   ports.StatusReporter
	run string
}

// RunConformanceTests runs the suite against the reporter newHarness
// builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"DeliversEveryField", testDeliversEveryField},
		{"WrongTokenRefused", testWrongToken},
		{"TransientFailuresRetried", testTransientRetried},
		{"PersistentFailureGivesUp", testPersistentFailure},
		{"RefusalsNotRetried", testRefusals},
		{"BadJobIDRefusedBeforeSending", testBadJobIDs},
		{"StaleReportAcknowledged", testStale},
		{"CancelledBeforeSending", testCancelledBefore},
		{"CancelledWhileHeld", testCancelledWhileHeld},
		{"CancelledAfterAFailure", testCancelledAfterFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			r, err := h.MakeReporter(ctx)
			if err != nil {
				t.Fatalf("MakeReporter: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, r: r, run: randomHex(4)})
		})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func ptr[T any](v T) *T { return &v }

func (e *env) jobID() string { return "job-" + e.run + "-" + randomHex(4) }

// report sends r with reporter rep and checks the error for secrets.
func (e *env) report(t *testing.T, ctx context.Context, rep ports.StatusReporter, jobID string, r ports.StatusReport) error {
	t.Helper()
	err := rep.Report(ctx, jobID, r)
	if err != nil {
		msg := err.Error()
		for _, s := range e.h.Secrets() {
			if s != "" && strings.Contains(msg, s) {
				t.Errorf("error %q contains a token", msg)
			}
		}
	}
	return err
}

// delivered is the part of a report the contract says arrives.
type delivered struct {
	JobID                                                 string
	Status                                                core.JobStatus
	Phase                                                 core.Phase
	Progress                                              *int
	ErrorMessage                                          *string
	ArtifactID, Fingerprint, SourceImageDigest, ArtStatus string
	Pull                                                  *core.PullProgress
	PhaseDurations                                        core.PhaseDurations
	Artifact                                              *artifactMeta
	Inputs                                                *core.BuildInputs
}

type artifactMeta struct {
	ArtifactID, Fingerprint, SourceImageRef, SourceImageDigest, DownloadBaseURL string
	Ext4Path, Ext4SHA256                                                        string
	Ext4SizeBytes                                                               int64
	ImageConfigJSON, WritableLayerSize                                          string
	Status                                                                      core.ArtifactStatus
	StorageBackend, ObjectKey                                                   string
}

func project(jobID string, r ports.StatusReport) delivered {
	u := r.Update
	d := delivered{JobID: jobID, Status: u.Status, Phase: u.Phase, Progress: u.Progress, ErrorMessage: u.ErrorMessage,
		ArtifactID: u.ArtifactID, Fingerprint: u.Fingerprint, SourceImageDigest: u.SourceImageDigest,
		ArtStatus: u.ArtifactStatus, Pull: u.Pull, PhaseDurations: u.PhaseDurations, Inputs: r.Inputs}
	if a := r.Artifact; a != nil {
		d.Artifact = &artifactMeta{ArtifactID: a.ArtifactID, Fingerprint: a.Fingerprint, SourceImageRef: a.SourceImageRef,
			SourceImageDigest: a.SourceImageDigest, DownloadBaseURL: a.DownloadBaseURL, Ext4Path: a.Ext4Path,
			Ext4SHA256: a.Ext4SHA256, Ext4SizeBytes: a.Ext4SizeBytes, ImageConfigJSON: a.ImageConfigJSON,
			WritableLayerSize: a.WritableLayerSize, Status: a.Status, StorageBackend: a.StorageBackend, ObjectKey: a.ObjectKey}
	}
	return d
}

// wantDelivered checks that exactly these reports were delivered, in order.
func (e *env) wantDelivered(t *testing.T, want ...Delivery) {
	t.Helper()
	got := e.h.Delivered()
	if len(got) != len(want) {
		t.Fatalf("%d reports delivered, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := project(got[i].JobID, got[i].Report), project(want[i].JobID, want[i].Report)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("report %d arrived as\n%s\nwant\n%s", i, describe(g), describe(w))
		}
	}
}

// describe prints d with its pointers followed.
func describe(d delivered) string {
	show := func(p any) string {
		switch v := p.(type) {
		case *int:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *string:
			if v != nil {
				return fmt.Sprintf("%q", *v)
			}
		case *core.PullProgress:
			if v != nil {
				return fmt.Sprintf("%+v", *v)
			}
		case *artifactMeta:
			if v != nil {
				return fmt.Sprintf("%+v", *v)
			}
		case *core.BuildInputs:
			if v != nil {
				return fmt.Sprintf("%+v", *v)
			}
		}
		return "<nil>"
	}
	return fmt.Sprintf("job=%s status=%s phase=%s progress=%s error=%s artifact_id=%s fingerprint=%s digest=%s artifact_status=%s pull=%s durations=%v artifact=%s inputs=%s",
		d.JobID, d.Status, d.Phase, show(d.Progress), show(d.ErrorMessage), d.ArtifactID, d.Fingerprint,
		d.SourceImageDigest, d.ArtStatus, show(d.Pull), d.PhaseDurations, show(d.Artifact), show(d.Inputs))
}

const testSHA = "0f343b0931126a20f133d67c2b018a3b5b0ab2e3e5f3b8e1f6c3a6f8d2d1c0b9"

// builtReport is a BUILT report with every artifact field set.
func (e *env) builtReport() ports.StatusReport {
	aid := "rfs-" + e.run + "-" + randomHex(4)
	fp := randomHex(32)
	digest := "sha256:" + randomHex(32)
	return ports.StatusReport{
		Update: core.JobUpdate{Status: core.JobBuilt, Phase: core.PhaseUploading, Progress: ptr(90), ErrorMessage: ptr(""),
			ArtifactID: aid, Fingerprint: fp, SourceImageDigest: digest, ArtifactStatus: string(core.ArtifactReady)},
		Artifact: &core.Artifact{
			ArtifactID: aid, Fingerprint: fp, SourceImageRef: "registry.example/team/app:1.2", SourceImageDigest: digest,
			DownloadBaseURL: "http://master.example:8089", Ext4Path: "/data/cube/" + aid + "/" + aid + ".ext4",
			Ext4SHA256: testSHA, Ext4SizeBytes: 3 << 30,
			ImageConfigJSON:   `{"Env":["PATH=/usr/bin"],"Entrypoint":["/app"],"WorkingDir":"/srv"}`,
			WritableLayerSize: "20Gi", Status: core.ArtifactReady, StorageBackend: "s3", ObjectKey: aid + "/" + aid + ".ext4",
		},
		Inputs: &core.BuildInputs{SourceImageDigest: digest, CAFingerprint: randomHex(32), EnvdSHA256: randomHex(32),
			BuilderFormat: core.BuilderFormatVersion, Builder: "ext4stream/1"},
	}
}

func progress(p int) ports.StatusReport {
	return ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Phase: core.PhasePulling, Progress: ptr(p)}}
}

func testDeliversEveryField(t *testing.T, e *env) {
	for _, tc := range []struct {
		name string
		r    ports.StatusReport
	}{
		{"progress with pull counters", ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Phase: core.PhasePulling,
			Progress: ptr(12), Pull: &core.PullProgress{TotalBytes: 5 << 30, DownloadedBytes: 123456789, TotalLayers: 7,
				CompletedLayers: 3, SpeedBPS: 50 << 20}}}},
		{"phase durations", ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Phase: core.PhaseBuildingExt4,
			Progress: ptr(50), PhaseDurations: core.PhaseDurations{core.PhasePulling: 12345 * time.Millisecond, core.PhaseUnpacking: 0}}}},
		{"progress zero", progress(0)},
		{"phase only", ports.StatusReport{Update: core.JobUpdate{Phase: core.PhaseBuildingExt4}}},
		{"error message cleared", ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Phase: core.PhaseUnpacking,
			Progress: ptr(40), ErrorMessage: ptr("")}}},
		{"artifact ids without metadata", ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning,
			Phase: core.PhaseGeneratingJSON, Progress: ptr(70), ArtifactID: "rfs-" + e.run, Fingerprint: randomHex(32),
			SourceImageDigest: "sha256:" + randomHex(32), ArtifactStatus: string(core.ArtifactBuilding)}}},
		{"BUILT with artifact metadata", e.builtReport()},
		{"FAILED with a message", ports.StatusReport{Update: core.JobUpdate{Status: core.JobFailed, Phase: core.PhasePulling,
			Progress: ptr(5), ErrorMessage: ptr("pull registry.example/team/app:1.2: manifest unknown\n\t\"quoted\" ünïcode")}}},
		{"READY", ports.StatusReport{Update: core.JobUpdate{Status: core.JobReady, Phase: core.PhaseReady, Progress: ptr(100)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.h.Delivered()
			job := e.jobID()
			if err := e.report(t, e.ctx, e.r, job, tc.r); err != nil {
				t.Fatalf("Report: %v", err)
			}
			got := e.h.Delivered()
			if len(got) != len(before)+1 {
				t.Fatalf("%d reports delivered, want 1", len(got)-len(before))
			}
			g, w := project(got[len(got)-1].JobID, got[len(got)-1].Report), project(job, tc.r)
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("report arrived as\n%s\nwant\n%s", describe(g), describe(w))
			}
		})
	}
}

func testWrongToken(t *testing.T, e *env) {
	bad, err := e.h.MakeReporterWithWrongToken(e.ctx)
	if err != nil {
		t.Fatalf("MakeReporterWithWrongToken: %v", err)
	}
	for _, r := range []ports.StatusReport{progress(10), e.builtReport()} {
		before := e.h.Attempts()
		if err := e.report(t, e.ctx, bad, e.jobID(), r); err == nil {
			t.Fatalf("Report %s with a wrong token succeeded", r.Update.Status)
		}
		if n := e.h.Attempts() - before; n != 1 {
			t.Errorf("a refused token took %d attempts, want 1 (a refusal is not retried)", n)
		}
	}
	e.wantDelivered(t)
	// The right token still works.
	job, r := e.jobID(), progress(11)
	if err := e.report(t, e.ctx, e.r, job, r); err != nil {
		t.Fatalf("Report with the right token: %v", err)
	}
	e.wantDelivered(t, Delivery{job, r})
}

func testTransientRetried(t *testing.T, e *env) {
	var want []Delivery
	for _, tc := range []struct {
		name     string
		failures int
		r        ports.StatusReport
	}{
		{"progress after one failure", 1, progress(20)},
		{"progress after two failures", 2, progress(21)},
		{"BUILT after three failures", 3, e.builtReport()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answers := make([]Answer, tc.failures)
			for i := range answers {
				answers[i] = FailTransient
			}
			e.h.Script(answers...)
			before := e.h.Attempts()
			job := e.jobID()
			if err := e.report(t, e.ctx, e.r, job, tc.r); err != nil {
				t.Fatalf("Report after %d transient failures: %v", tc.failures, err)
			}
			if n := e.h.Attempts() - before; n != tc.failures+1 {
				t.Errorf("%d attempts, want %d", n, tc.failures+1)
			}
			want = append(want, Delivery{job, tc.r})
			e.wantDelivered(t, want...)
		})
	}
}

// persistent is more failures than any reporter may try.
const persistent = 1000

func testPersistentFailure(t *testing.T, e *env) {
	answers := make([]Answer, persistent)
	for i := range answers {
		answers[i] = FailTransient
	}
	e.h.Script(answers...)
	err := e.report(t, e.ctx, e.r, e.jobID(), progress(30))
	if err == nil {
		t.Fatal("Report succeeded although every attempt failed")
	}
	if e.ctx.Err() != nil {
		t.Fatalf("Report only gave up when the subtest's time ran out: %v", err)
	}
	if n := e.h.Attempts(); n < 2 || n >= persistent {
		t.Errorf("%d attempts; want a retry and a bound", n)
	}
	e.wantDelivered(t)
}

func testRefusals(t *testing.T, e *env) {
	for _, tc := range []struct {
		name   string
		answer Answer // scripted; a malformed report may never reach the handler
		r      ports.StatusReport
		want   error // a sentinel the error must wrap, or nil for any error
	}{
		{"unknown job", RefuseUnknownJob, progress(40), core.ErrNotFound},
		{"refused transition", RefuseTransition, ports.StatusReport{Update: core.JobUpdate{Status: core.JobReady}}, nil},
		{"unknown artifact status", Accept, ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning,
			ArtifactStatus: "SHINY"}}, nil},
		{"unknown status", Accept, ports.StatusReport{Update: core.JobUpdate{Status: "DONE-ISH"}}, nil},
		{"unknown phase", Accept, ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Phase: "DREAMING"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.h.Script(tc.answer)
			before := e.h.Attempts()
			err := e.report(t, e.ctx, e.r, e.jobID(), tc.r)
			if err == nil {
				t.Fatal("Report of a refused report succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Report = %v, want an error wrapping %v", err, tc.want)
			}
			if n := e.h.Attempts() - before; n > 1 {
				t.Errorf("a refusal took %d attempts, want at most 1", n)
			}
			e.wantDelivered(t)
			e.h.Script() // an unused answer must not leak into the next case
		})
	}
}

func testBadJobIDs(t *testing.T, e *env) {
	for _, tc := range []struct{ name, id string }{
		{"empty", ""},
		{"slash", "job/1"},
		{"dot-dot", "../job"},
		{"space", "job 1"},
		{"query", "job?x=1"},
		{"too long", strings.Repeat("j", 129)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.h.Attempts()
			err := e.report(t, e.ctx, e.r, tc.id, progress(45))
			if !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("Report(%q) = %v, want an error wrapping core.ErrInvalidArgument", tc.id, err)
			}
			if n := e.h.Attempts() - before; n != 0 {
				t.Errorf("Report(%q) sent %d requests", tc.id, n)
			}
		})
	}
	e.wantDelivered(t)
}

func testStale(t *testing.T, e *env) {
	e.h.Script(AcknowledgeStale)
	job, r := e.jobID(), progress(50)
	before := e.h.Attempts()
	if err := e.report(t, e.ctx, e.r, job, r); err != nil {
		t.Fatalf("Report of an acknowledged stale report: %v", err)
	}
	if n := e.h.Attempts() - before; n != 1 {
		t.Errorf("an acknowledged report took %d attempts, want 1", n)
	}
	e.wantDelivered(t, Delivery{job, r})
}

func testCancelledBefore(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	for _, r := range []ports.StatusReport{progress(60), e.builtReport()} {
		if err := e.report(t, ctx, e.r, e.jobID(), r); !errors.Is(err, context.Canceled) {
			t.Errorf("Report with a cancelled context = %v, want an error wrapping context.Canceled", err)
		}
	}
	e.wantDelivered(t)
}

// cancelWhen runs Report in the background, cancels it once ready says so,
// and checks that it returns an error wrapping context.Canceled.
func (e *env) cancelWhen(t *testing.T, r ports.StatusReport, ready func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.r.Report(ctx, e.jobID(), r) }()
	// Poll the harness; this only waits, it asserts nothing about time.
	for !ready() {
		select {
		case err := <-done:
			t.Fatalf("Report returned before it could be cancelled: %v", err)
		case <-e.ctx.Done():
			t.Fatal("the control plane never saw the report")
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Report after cancel = %v, want an error wrapping context.Canceled", err)
		}
		for _, s := range e.h.Secrets() {
			if s != "" && strings.Contains(err.Error(), s) {
				t.Errorf("error %q contains a token", err)
			}
		}
	case <-e.ctx.Done():
		t.Fatal("Report ignored the cancellation of its context")
	}
	e.wantDelivered(t)
}

func testCancelledWhileHeld(t *testing.T, e *env) {
	for _, r := range []ports.StatusReport{progress(70), e.builtReport()} {
		held := e.h.Held()
		e.h.Script(Hold)
		e.cancelWhen(t, r, func() bool { return e.h.Held() > held })
	}
}

func testCancelledAfterFailure(t *testing.T, e *env) {
	// The cancel comes once the first attempt reached the control plane:
	// during it, in the wait after its failure, or during the second
	// attempt, which is held so that no attempt can succeed first.
	for _, r := range []ports.StatusReport{progress(80), e.builtReport()} {
		before := e.h.Attempts()
		e.h.Script(FailTransient, Hold)
		e.cancelWhen(t, r, func() bool { return e.h.Attempts() > before })
		e.h.Script()
	}
}
