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
	m, err := New(reg, All)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, All); err == nil {
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
	r.Get("/envelope", func(w http.ResponseWriter, r *http.Request) { RecordRetCode(r, 130404); io.WriteString(w, "{}") })
	r.Handle("/metrics", Handler(reg))
	m.NodeOp("node-1", "create_image", nil, time.Second)
	for _, p := range []string{"/jobs/1", "/jobs/2", "/ok", "/nope", "/envelope"} {
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
		{m.HTTPRequests.WithLabelValues("/envelope", "GET", "200"), 1},
		{m.Errors.WithLabelValues("/envelope", "GET", "130404"), 1},
		{m.Errors.WithLabelValues("/jobs/{id}", "GET", "418"), 2},
		{m.Errors.WithLabelValues("unmatched", "GET", "404"), 1},
		{m.NodeOps.WithLabelValues("node-1", "create_image", "ok"), 1},
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
		"cube_template_http_requests_total", "cube_template_http_errors_total", "cube_template_node_operations_total"} {
		if !strings.Contains(rec.Body.String(), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestRolesRegisterOnlyWhatTheySet: the master exports no build series, the
// data plane no node series.
func TestRolesRegisterOnlyWhatTheySet(t *testing.T) {
	cases := []struct {
		role   Role
		has    []string
		hasNot []string
	}{
		{ControlPlane, []string{"cube_template_http_errors_total", "cube_template_node_operation_duration_seconds"},
			[]string{"cube_template_active_builds", "cube_template_build_phase_duration_seconds", "cube_template_pulled_bytes_total"}},
		{DataPlane, []string{"cube_template_active_builds", "cube_template_pulled_bytes_total"},
			[]string{"cube_template_node_operations_total"}},
	}
	for _, tc := range cases {
		reg := prometheus.NewRegistry()
		m, err := New(reg, tc.role)
		if err != nil {
			t.Fatal(err)
		}
		m.ObservePhase("PULLING", time.Second)
		m.CacheLookup(true)
		m.AddPulledBytes(1)
		m.NodeOp("n", "create_image", nil, time.Second)
		m.Callback(CallbackApplied)
		m.Errors.WithLabelValues("/x", "GET", "500").Inc()
		m.ActiveBuildsFrom(func() int { return 3 })
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, f := range fams {
			names[f.GetName()] = true
		}
		for _, n := range tc.has {
			if !names[n] {
				t.Errorf("%s: %s missing", tc.role, n)
			}
		}
		for _, n := range tc.hasNot {
			if names[n] {
				t.Errorf("%s: %s exported", tc.role, n)
			}
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

func TestMethodLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET", "GET"}, {"HEAD", "HEAD"}, {"POST", "POST"}, {"PUT", "PUT"}, {"PATCH", "PATCH"},
		{"DELETE", "DELETE"}, {"OPTIONS", "OPTIONS"}, {"CONNECT", "CONNECT"}, {"TRACE", "TRACE"},
		{"get", MethodOther}, {"PROPFIND", MethodOther}, {strings.Repeat("X", 512<<10), MethodOther}, {"", MethodOther},
	} {
		if got := MethodLabel(tc.in); got != tc.want {
			t.Errorf("MethodLabel(%.20q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestUnservedRequestsShareOneRoute: 404 and 405 answers are counted under
// RouteUnmatched, never under the path asked for.
func TestUnservedRequestsShareOneRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, All)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(m.Instrument)
	r.Get("/jobs/{id}", func(http.ResponseWriter, *http.Request) {})
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/jobs/1"}, {"BREW", "/jobs/2"}, {http.MethodGet, "/random/a"}, {http.MethodGet, "/jobs/1/x"},
	} {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(c.method, c.path, nil))
	}
	for _, c := range []struct {
		method, code string
		want         float64
	}{{"POST", "405", 1}, {MethodOther, "405", 1}, {"GET", "404", 2}} {
		if got := value(t, m.HTTPRequests.WithLabelValues(RouteUnmatched, c.method, c.code)); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.method, c.code, got, c.want)
		}
	}
}
