package cubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestStatusCallback(t *testing.T) {
	builtBody := `{"status":"BUILT","phase":"READY","progress":100,"artifact_id":"rfs-1","artifact_status":"READY",` +
		`"ext4_sha256":"` + sha + `","ext4_size_bytes":4096.0,"ext4_path":"/data/rfs-1/rfs-1.ext4","template_status":"READY","evil":1}`
	tests := []struct {
		name        string
		path        string
		body        string
		hdr         map[string]string
		applied     bool
		err         error
		want        int
		wantApplied *bool
		wantCalled  bool
	}{
		{name: "applied", body: builtBody, applied: true, want: 200, wantApplied: ptr(true), wantCalled: true},
		{name: "stale acknowledged", body: `{"status":"RUNNING","phase":"PULLING"}`, applied: false, want: 200, wantApplied: ptr(false), wantCalled: true},
		{name: "stale as error acknowledged", body: `{"status":"RUNNING"}`, err: fmt.Errorf("job: %w", core.ErrStaleUpdate), want: 200, wantApplied: ptr(false), wantCalled: true},
		{name: "unknown job", body: `{"status":"RUNNING"}`, err: fmt.Errorf("job job-1: %w", core.ErrNotFound), want: 404, wantCalled: true},
		{name: "refused transition", body: `{"status":"READY"}`, err: &core.TransitionError{JobID: "job-1", From: core.JobPending, To: core.JobReady}, want: 409, wantCalled: true},
		{name: "store down", body: `{"status":"RUNNING"}`, err: fmt.Errorf("x: %w", core.ErrStoreNotInitialized), want: 503, wantCalled: true},
		{name: "internal error hidden", body: `{"status":"RUNNING"}`, err: errors.New("mysql 10.9.9.9 gone"), want: 500, wantCalled: true},
		{name: "bad status", body: `{"status":"DONE"}`, want: 400},
		{name: "bad json", body: `{"status":`, want: 400},
		{name: "empty body", body: ``, want: 400},
		{name: "oversized", body: `{"error_message":"` + strings.Repeat("x", 2<<20) + `"}`, want: 413},
		{name: "bad job id", path: "/internal/template/jobs/..%2f..%2fx/status", body: `{"status":"RUNNING"}`, want: 400},
		{name: "no token", body: builtBody, hdr: map[string]string{}, want: 401},
		{name: "wrong token", body: builtBody, hdr: map[string]string{auth.Header: "forged"}, want: 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := &services{applied: tc.applied, err: tc.err}
			h := newServer(t, svc, "")
			path := tc.path
			if path == "" {
				path = "/internal/template/jobs/job-1/status"
			}
			hdr := tc.hdr
			if hdr == nil {
				hdr = tokenHdr()
			}
			rec := do(h, "POST", path, tc.body, hdr)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body.String())
			}
			m := decodeMap(t, rec.Body.Bytes())
			if tc.wantApplied != nil && (m["status"] != "ok" || m["applied"] != *tc.wantApplied) {
				t.Fatalf("body %v", m)
			}
			if tc.want != 200 && m["error"] == nil {
				t.Fatalf("error body %v", m)
			}
			if strings.Contains(rec.Body.String(), "10.9.9.9") {
				t.Fatal("internal detail leaked")
			}
			if (len(svc.calls) == 1) != tc.wantCalled {
				t.Fatalf("service calls %v", svc.calls)
			}
			if tc.name == "applied" {
				r := svc.reports[0]
				if svc.last != "job-1" || r.Update.Status != core.JobBuilt || r.Artifact == nil || r.Artifact.Ext4SizeBytes != 4096 ||
					r.Update.TemplateStatus != "" || strings.Contains(r.Update.ResultJSON, "evil") {
					t.Fatalf("service got %+v / %+v", r.Update, r.Artifact)
				}
			}
		})
	}
}

func TestStatusCallbackFailsClosed(t *testing.T) {
	h, err := New(Config{Reports: &services{applied: true}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, hdr := range []map[string]string{nil, {auth.Header: ""}, {auth.Header: "x"}} {
		if rec := do(h, "POST", "/internal/template/jobs/job-1/status", `{"status":"RUNNING"}`, hdr); rec.Code != 503 {
			t.Fatalf("no secret configured: %d", rec.Code)
		}
	}
	h, _ = New(Config{Reports: &services{applied: true}, InsecureNoToken: true})
	if rec := do(h, "POST", "/internal/template/jobs/job-1/status", `{"status":"RUNNING"}`, nil); rec.Code != 200 {
		t.Fatalf("insecure opt-in: %d", rec.Code)
	}
}

func TestStatusCallbackMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := metrics.New(reg, metrics.ControlPlane)
	svc := &services{applied: true}
	h, _ := New(Config{Token: testToken, Reports: svc, Metrics: m, Gatherer: reg})
	do(h, "POST", "/internal/template/jobs/job-1/status", `{"status":"RUNNING"}`, tokenHdr())
	do(h, "POST", "/internal/template/jobs/job-1/status", `{"status":"NOPE"}`, tokenHdr())
	rec := do(h, "GET", "/metrics", "", nil)
	for _, want := range []string{`cube_template_status_callbacks_total{result="applied"} 1`, `cube_template_status_callbacks_total{result="rejected"} 1`,
		`route="/internal/template/jobs/{job_id}/status"`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func ptr(b bool) *bool { return &b }

// blockingReports holds a report until the request's context ends, then
// fails the way the store does when its caller went away.
type blockingReports struct {
	entered, done chan struct{}
}

func (b blockingReports) HandleStatusReport(ctx context.Context, jobID string, _ ports.StatusReport) (bool, error) {
	close(b.entered)
	defer close(b.done)
	<-ctx.Done()
	return false, fmt.Errorf("report job %s: update job %s: %w", jobID, jobID, ctx.Err())
}

// TestStatusCallbackAbandonedBySender: a data plane that hangs up on a
// progress report it no longer needs (its build ended) is not a master
// failure: nothing is logged at ERROR, the metric says abandoned.
func TestStatusCallbackAbandonedBySender(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	reg := prometheus.NewRegistry()
	m, _ := metrics.New(reg, metrics.ControlPlane)
	rep := blockingReports{entered: make(chan struct{}), done: make(chan struct{})}
	h, err := New(Config{Token: testToken, Reports: rep, Metrics: m, Gatherer: reg,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/internal/template/jobs/job-1/status", strings.NewReader(`{"status":"RUNNING","phase":"PULLING"}`))
	req.Header.Set(auth.Header, testToken)
	go func() { <-rep.entered; cancel() }()
	if _, err := srv.Client().Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("request: %v, want it cancelled", err)
	}
	<-rep.done
	// The handler logs after HandleStatusReport returns; /metrics is served
	// by the same handler once the callback's Instrument has recorded it.
	if got := waitForMetric(t, h, `cube_template_status_callbacks_total{`); !strings.Contains(got, `cube_template_status_callbacks_total{result="abandoned"} 1`) {
		t.Errorf("callback metrics, want one abandoned:\n%s", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("an abandoned callback was logged as an error:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// waitForMetric polls /metrics until it shows want (the handler counts
// after the service returned, on the server's goroutine) and returns it.
func waitForMetric(t *testing.T, h http.Handler, want string) string {
	t.Helper()
	for i := 0; ; i++ {
		if rec := do(h, "GET", "/metrics", "", nil); strings.Contains(rec.Body.String(), want) {
			return rec.Body.String()
		} else if i == 500 {
			t.Fatalf("metrics never showed %s:\n%s", want, rec.Body.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
