package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg); err == nil {
		t.Fatal("registering twice on one registry must fail")
	}
	m.ObservePhase("PULLING", 2*time.Second)
	m.CacheLookup(true)
	m.CacheLookup(false)
	m.CacheLookup(true)
	m.AddPulledBytes(1000)
	m.AddPulledBytes(-5)
	done := m.BuildStarted()
	m.BuildStarted()
	done()
	m.Callback(CallbackApplied)

	r := chi.NewRouter()
	r.Use(m.Instrument)
	r.Get("/jobs/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	r.Get("/ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	r.Handle("/metrics", Handler(reg))
	for _, p := range []string{"/jobs/1", "/jobs/2", "/ok", "/nope"} {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}

	checks := []struct {
		c    prometheus.Metric
		want float64
	}{
		{m.CacheLookups.WithLabelValues("hit"), 2},
		{m.CacheLookups.WithLabelValues("miss"), 1},
		{m.PulledBytes, 1000},
		{m.ActiveBuilds, 1},
		{m.Callbacks.WithLabelValues(CallbackApplied), 1},
		{m.HTTPRequests.WithLabelValues("/jobs/{id}", "GET", "418"), 2},
		{m.HTTPRequests.WithLabelValues("/ok", "GET", "200"), 1},
		{m.HTTPRequests.WithLabelValues("unmatched", "GET", "404"), 1},
	}
	for i, c := range checks {
		if got := value(t, c.c); got != c.want {
			t.Errorf("check %d: got %v, want %v", i, got, c.want)
		}
	}

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, name := range []string{"cube_template_build_phase_duration_seconds_bucket", "cube_template_layer_cache_lookups_total",
		"cube_template_pulled_bytes_total", "cube_template_active_builds", "cube_template_status_callbacks_total",
		"cube_template_http_requests_total"} {
		if !strings.Contains(rec.Body.String(), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestNilMetricsIsNoop(t *testing.T) {
	var m *Metrics
	m.ObservePhase("x", time.Second)
	m.CacheLookup(true)
	m.AddPulledBytes(1)
	m.BuildStarted()()
	m.Callback(CallbackStale)
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := m.Instrument(h); got == nil {
		t.Fatal("nil Instrument must return the handler")
	}
}

func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	t.Fatalf("unsupported metric %v", &d)
	return 0
}
