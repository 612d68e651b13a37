package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric name.
const Namespace = "cube_template"

// Callback results. The data plane counts what happened to the reports it
// sent; the control plane counts what it did with the reports it received.
const (
	CallbackDelivered = "delivered" // sender: acknowledged by the master
	CallbackRetried   = "retried"   // sender: one failed attempt that will be retried
	CallbackDropped   = "dropped"   // sender: gave up or got a final 4xx
	CallbackApplied   = "applied"   // receiver: the job row changed
	CallbackStale     = "stale"     // receiver: duplicate or late, acknowledged
	CallbackRejected  = "rejected"  // receiver: bad body, unknown job, refused transition
	CallbackError     = "error"     // receiver: internal failure (the sender retries)
)

// Metrics holds the collectors.
type Metrics struct {
	PhaseDuration *prometheus.HistogramVec // labels: phase
	CacheLookups  *prometheus.CounterVec   // labels: result (hit, miss)
	PulledBytes   prometheus.Counter
	ActiveBuilds  prometheus.Gauge
	Callbacks     *prometheus.CounterVec   // labels: result
	HTTPRequests  *prometheus.CounterVec   // labels: route, method, code
	HTTPDuration  *prometheus.HistogramVec // labels: route, method
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		PhaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "build_phase_duration_seconds",
			Help: "Time spent in each build phase.",
			// Phases run from milliseconds (cache hits) to many minutes
			// (pulling large images).
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 12),
		}, []string{"phase"}),
		CacheLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "layer_cache_lookups_total",
			Help: "Layer cache lookups by result (hit, miss).",
		}, []string{"result"}),
		PulledBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "pulled_bytes_total",
			Help: "Compressed layer bytes downloaded from registries.",
		}),
		ActiveBuilds: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "active_builds",
			Help: "Builds currently running.",
		}),
		Callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "status_callbacks_total",
			Help: "Job status callbacks by result.",
		}, []string{"result"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "http_requests_total",
			Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
	}
	for _, c := range []prometheus.Collector{m.PhaseDuration, m.CacheLookups, m.PulledBytes, m.ActiveBuilds,
		m.Callbacks, m.HTTPRequests, m.HTTPDuration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObservePhase records how long a build phase took.
func (m *Metrics) ObservePhase(phase string, d time.Duration) {
	if m != nil {
		m.PhaseDuration.WithLabelValues(phase).Observe(d.Seconds())
	}
}

// CacheLookup counts one layer cache lookup.
func (m *Metrics) CacheLookup(hit bool) {
	if m == nil {
		return
	}
	result := "miss"
	if hit {
		result = "hit"
	}
	m.CacheLookups.WithLabelValues(result).Inc()
}

// AddPulledBytes counts downloaded bytes.
func (m *Metrics) AddPulledBytes(n int64) {
	if m != nil && n > 0 {
		m.PulledBytes.Add(float64(n))
	}
}

// BuildStarted counts a running build; call the returned func when it ends.
func (m *Metrics) BuildStarted() (done func()) {
	if m == nil {
		return func() {}
	}
	m.ActiveBuilds.Inc()
	return m.ActiveBuilds.Dec
}

// Callback counts one callback outcome (one of the Callback* constants).
func (m *Metrics) Callback(result string) {
	if m != nil {
		m.Callbacks.WithLabelValues(result).Inc()
	}
}

// Instrument counts and times requests by chi route pattern (the pattern,
// not the path, so ids do not explode the label space). It only observes; it
// never answers a request. Unmatched requests are labelled "unmatched".
func (m *Metrics) Instrument(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		code := ww.Status()
		if code == 0 {
			code = http.StatusOK
		}
		m.HTTPRequests.WithLabelValues(route, r.Method, strconv.Itoa(code)).Inc()
		m.HTTPDuration.WithLabelValues(route, r.Method).Observe(time.Since(start).Seconds())
	})
}

// Handler serves the registry in the Prometheus exposition format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
