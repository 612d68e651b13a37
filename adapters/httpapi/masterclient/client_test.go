package masterclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const token = "cb-token"

// master fails the first failures requests with failStatus, then answers
// finalStatus.
type master struct {
	mu          sync.Mutex
	failures    int
	failStatus  int
	finalStatus int
	calls       int
	reports     []ports.StatusReport
	paths       []string
	tokens      []string
}

func (m *master) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	m.paths = append(m.paths, r.URL.Path)
	m.tokens = append(m.tokens, r.Header.Get(auth.Header))
	if m.calls <= m.failures {
		wire.WriteError(w, m.failStatus, "transient")
		return
	}
	rep, err := wire.DecodeStatusReport(r.Body)
	if err != nil {
		wire.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	m.reports = append(m.reports, rep)
	status := m.finalStatus
	if status == 0 {
		status = http.StatusOK
	}
	if status != http.StatusOK {
		wire.WriteError(w, status, "final")
		return
	}
	wire.WriteJSON(w, http.StatusOK, wire.StatusOK{Status: "ok", Applied: true})
}

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func progress() ports.StatusReport {
	return ports.StatusReport{Update: core.Progress(core.JobRunning, core.PhasePulling, 10)}
}

func built() ports.StatusReport {
	p := 100
	return ports.StatusReport{Update: core.JobUpdate{Status: core.JobBuilt, Phase: core.PhaseReady, Progress: &p, ArtifactID: "rfs-1"},
		Artifact: &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Ext4SizeBytes: 4096}}
}

const (
	ms500 = 500 * time.Millisecond
	s1    = time.Second
	s2    = 2 * time.Second
	s4    = 4 * time.Second
	s5    = 5 * time.Second
)

func TestReportRetries(t *testing.T) {
	tests := []struct {
		name       string
		m          *master
		report     ports.StatusReport
		wantCalls  int
		wantSleeps []time.Duration
		wantErr    error // nil: success
	}{
		{name: "first try", m: &master{}, report: progress(), wantCalls: 1},
		{name: "two 503 then ok", m: &master{failures: 2, failStatus: 503}, report: progress(), wantCalls: 3, wantSleeps: []time.Duration{ms500, s1}},
		{name: "429 retried", m: &master{failures: 1, failStatus: 429}, report: progress(), wantCalls: 2, wantSleeps: []time.Duration{ms500}},
		{name: "progress gives up after 6", m: &master{failures: 100, failStatus: 500}, report: progress(), wantCalls: 6,
			wantSleeps: []time.Duration{ms500, s1, s2, s4, s5}, wantErr: errors.New("any")},
		{name: "terminal gives up after 12, backoff capped", m: &master{failures: 100, failStatus: 502}, report: built(), wantCalls: 12,
			wantSleeps: []time.Duration{ms500, s1, s2, s4, s5, s5, s5, s5, s5, s5, s5}, wantErr: errors.New("any")},
		{name: "FAILED is terminal", m: &master{failures: 100, failStatus: 503}, report: ports.StatusReport{Update: core.Fail(core.PhasePulling, "x")},
			wantCalls: 12, wantSleeps: []time.Duration{ms500, s1, s2, s4, s5, s5, s5, s5, s5, s5, s5}, wantErr: wire.ErrUnavailable},
		{name: "terminal succeeds on 12th", m: &master{failures: 11, failStatus: 503}, report: built(), wantCalls: 12,
			wantSleeps: []time.Duration{ms500, s1, s2, s4, s5, s5, s5, s5, s5, s5, s5}},
		{name: "400 is final", m: &master{finalStatus: 400}, report: built(), wantCalls: 1, wantErr: core.ErrInvalidArgument},
		{name: "404 is final", m: &master{finalStatus: 404}, report: built(), wantCalls: 1, wantErr: core.ErrNotFound},
		{name: "401 is final", m: &master{failures: 100, failStatus: 401}, report: built(), wantCalls: 1, wantErr: wire.ErrUnauthorized},
		{name: "409 is final", m: &master{finalStatus: 409}, report: progress(), wantCalls: 1, wantErr: core.ErrConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.m)
			defer srv.Close()
			sl := &sleeps{}
			c, err := New(Config{BaseURL: srv.URL, Token: token, Sleep: sl.sleep, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Report(context.Background(), "job-1", tc.report)
			tc.m.mu.Lock()
			defer tc.m.mu.Unlock()
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.wantErr != nil && err == nil:
				t.Fatal("expected an error")
			case tc.wantErr != nil && tc.wantErr.Error() != "any" && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v is not %v", err, tc.wantErr)
			}
			if tc.m.calls != tc.wantCalls {
				t.Fatalf("%d calls, want %d", tc.m.calls, tc.wantCalls)
			}
			if !slices.Equal(sl.d, tc.wantSleeps) {
				t.Fatalf("sleeps %v, want %v", sl.d, tc.wantSleeps)
			}
			for i := range tc.m.calls {
				if tc.m.paths[i] != "/internal/template/jobs/job-1/status" || tc.m.tokens[i] != token {
					t.Fatalf("call %d: path %q token %q", i, tc.m.paths[i], tc.m.tokens[i])
				}
			}
		})
	}
}

func TestReportBodyReachesMaster(t *testing.T) {
	m := &master{}
	srv := httptest.NewServer(m)
	defer srv.Close()
	c, _ := New(Config{BaseURL: srv.URL + "/", Token: token, Logger: quiet()})
	if err := c.Report(context.Background(), "job-1", built()); err != nil {
		t.Fatal(err)
	}
	got := m.reports[0]
	if got.Update.Status != core.JobBuilt || got.Artifact == nil || got.Artifact.Ext4SizeBytes != 4096 || got.Update.ResultJSON == "" {
		t.Fatalf("master decoded %+v", got)
	}
}

func TestReportTransportErrorsRetried(t *testing.T) {
	// A listener that is closed: every dial is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sl := &sleeps{}
	c, _ := New(Config{BaseURL: addr, Token: token, Sleep: sl.sleep, Logger: quiet()})
	err = c.Report(context.Background(), "job-1", progress())
	if err == nil || len(sl.d) != ProgressAttempts-1 {
		t.Fatalf("err %v after %d sleeps", err, len(sl.d))
	}
}

func TestReportAttemptTimeout(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			// Hang until the client's attempt deadline closes the
			// connection (noticed only once the body is consumed).
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	sl := &sleeps{}
	c, _ := New(Config{BaseURL: srv.URL, Token: token, Sleep: sl.sleep, AttemptTimeout: 50 * time.Millisecond, Logger: quiet()})
	if err := c.Report(context.Background(), "job-1", progress()); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || len(sl.d) != 1 {
		t.Fatalf("%d calls, %d sleeps", calls, len(sl.d))
	}
}

func TestReportStopsWhenContextEnds(t *testing.T) {
	m := &master{failures: 100, failStatus: 503}
	srv := httptest.NewServer(m)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	sleepThenCancel := func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	c, _ := New(Config{BaseURL: srv.URL, Token: token, Sleep: sleepThenCancel, Logger: quiet()})
	err := c.Report(ctx, "job-1", built())
	if !errors.Is(err, context.Canceled) || m.calls != 1 {
		t.Fatalf("err %v after %d calls", err, m.calls)
	}
}

func TestReportMetricsAndValidation(t *testing.T) {
	reg := prometheus.NewRegistry()
	mx, _ := metrics.New(reg, metrics.DataPlane)
	m := &master{failures: 1, failStatus: 500}
	srv := httptest.NewServer(m)
	defer srv.Close()
	c, _ := New(Config{BaseURL: srv.URL, Token: token, Sleep: (&sleeps{}).sleep, Metrics: mx, Logger: quiet()})
	if err := c.Report(context.Background(), "job-1", progress()); err != nil {
		t.Fatal(err)
	}
	fams, _ := reg.Gather()
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "cube_template_status_callbacks_total" {
			for _, mt := range f.Metric {
				got[mt.Label[0].GetValue()] = mt.Counter.GetValue()
			}
		}
	}
	if got["retried"] != 1 || got["delivered"] != 1 {
		t.Fatalf("callback metrics %v", got)
	}
	if err := c.Report(context.Background(), "../x", progress()); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("bad job id: %v", err)
	}
	if _, err := New(Config{BaseURL: "ftp://x"}); err == nil {
		t.Fatal("bad base URL accepted")
	}
	if !IsFinal(fmt.Errorf("x: %w", &wire.StatusError{StatusCode: 404})) || IsFinal(&wire.StatusError{StatusCode: 503}) {
		t.Fatal("IsFinal")
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
