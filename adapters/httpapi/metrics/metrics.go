package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric name.
const Namespace = "cube_template"

// Role says which service a Metrics serves; each registers only the
// collectors it sets, so /metrics never shows a series that stays zero.
type Role string

// Roles.
const (
	// DataPlane (templatecenter): builds, the layer cache, pulls, callbacks
	// sent, HTTP.
	DataPlane Role = "templatecenter"
	// ControlPlane (cubemaster): distribution to nodes, callbacks
	// received, HTTP.
	ControlPlane Role = "cubemaster"
	// All registers everything (tests).
	All Role = "all"
)

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
	CallbackAbandoned = "abandoned" // receiver: the sender hung up before the answer
)

// Metrics holds the collectors.
type Metrics struct {
	PhaseDuration *prometheus.HistogramVec // labels: phase
	CacheLookups  *prometheus.CounterVec   // labels: result (hit, miss)
	PulledBytes   prometheus.Counter
	ActiveBuilds  prometheus.GaugeFunc
	Callbacks     *prometheus.CounterVec   // labels: result
	HTTPRequests  *prometheus.CounterVec   // labels: route, method, code
	HTTPDuration  *prometheus.HistogramVec // labels: route, method
	// Errors counts failed requests by route, method and code: the
	// envelope's ret_code on public routes (which answer HTTP 200), else
	// the HTTP status (4xx, 5xx).
	Errors *prometheus.CounterVec
	// NodeOps counts node RPCs (CreateImage, AppSnapshot, ...) by node,
	// operation and result (ok, error); NodeOpDuration times them.
	NodeOps        *prometheus.CounterVec
	NodeOpDuration *prometheus.HistogramVec // labels: op
	// Builds counts the data plane's finished builds by result (built,
	// reused, failed).
	Builds *prometheus.CounterVec
	// Jobs counts jobs this process moved to a terminal status, by
	// operation and result (ready, partially_ready, failed): the master
	// finishes most; the data plane's reconciler fails abandoned ones.
	Jobs *prometheus.CounterVec
	// PlacementDecisions counts the placement controller's decisions by
	// decision (add, evict, skipped, failed) and reason (upstream's
	// cubemaster_preheat_decisions_total has the same labels).
	PlacementDecisions *prometheus.CounterVec

	active   atomic.Int64
	activeFn atomic.Pointer[func() int]
}

// New creates the collectors of role and registers them on reg.
func New(reg prometheus.Registerer, role Role) (*Metrics, error) {
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
			Help: "Compressed layer bytes downloaded from registries (cache hits excluded).",
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
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "http_errors_total",
			Help: "Failed requests by route pattern, method and code: the envelope ret_code on public routes (answered with HTTP 200), else the HTTP status.",
		}, []string{"route", "method", "code"}),
		NodeOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "node_operations_total",
			Help: "Node RPCs (distribution: create_image, destroy_image, app_snapshot, cleanup_template) by node, operation and result.",
		}, []string{"node", "op", "result"}),
		NodeOpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "node_operation_duration_seconds",
			Help:    "Node RPC latency by operation.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
		}, []string{"op"}),
		Builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "builds_total",
			Help: "Finished builds by result: built, reused (an existing artifact), failed.",
		}, []string{"result"}),
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "jobs_finished_total",
			Help: "Jobs this process moved to a terminal status, by operation and result (ready, partially_ready, failed).",
		}, []string{"operation", "result"}),
		PlacementDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "placement_decisions_total",
			Help: "Placement controller decisions by decision (add, evict, skipped, failed) and reason.",
		}, []string{"decision", "reason"}),
	}
	m.ActiveBuilds = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "active_builds",
		Help: "Builds currently running.",
	}, func() float64 {
		if fn := m.activeFn.Load(); fn != nil {
			return float64((*fn)())
		}
		return float64(m.active.Load())
	})
	common := []prometheus.Collector{m.Callbacks, m.HTTPRequests, m.HTTPDuration, m.Errors, m.Jobs}
	build := []prometheus.Collector{m.PhaseDuration, m.CacheLookups, m.PulledBytes, m.ActiveBuilds, m.Builds}
	nodes := []prometheus.Collector{m.NodeOps, m.NodeOpDuration, m.PlacementDecisions}
	cs := common
	switch role {
	case DataPlane:
		cs = append(cs, build...)
	case ControlPlane:
		cs = append(cs, nodes...)
	default:
		cs = append(append(cs, build...), nodes...)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// PlacementDecision counts one placement decision.
func (m *Metrics) PlacementDecision(decision, reason string) {
	if m != nil {
		m.PlacementDecisions.WithLabelValues(decision, reason).Inc()
	}
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

// LayerCacheLookup and LayerBytesPulled make a *Metrics the registry
// source's Observer.
func (m *Metrics) LayerCacheLookup(hit bool) { m.CacheLookup(hit) }

// LayerBytesPulled counts bytes downloaded from a registry.
func (m *Metrics) LayerBytesPulled(n int64) { m.AddPulledBytes(n) }

// BuildStarted counts a running build; call the returned func when it ends.
// Unused once ActiveBuildsFrom is set.
func (m *Metrics) BuildStarted() (done func()) {
	if m == nil {
		return func() {}
	}
	m.active.Add(1)
	return func() { m.active.Add(-1) }
}

// ActiveBuildsFrom makes the active_builds gauge read fn (the executor's
// count of running builds) at every scrape.
func (m *Metrics) ActiveBuildsFrom(fn func() int) {
	if m != nil && fn != nil {
		m.activeFn.Store(&fn)
	}
}

// Callback counts one callback outcome (one of the Callback* constants).
func (m *Metrics) Callback(result string) {
	if m != nil {
		m.Callbacks.WithLabelValues(result).Inc()
	}
}

// Build results.
const (
	BuildBuilt  = "built"
	BuildReused = "reused"
	BuildFailed = "failed"
)

// BuildFinished counts one finished build (one of the Build* results).
func (m *Metrics) BuildFinished(result string) {
	if m != nil {
		m.Builds.WithLabelValues(result).Inc()
	}
}

// JobFinished counts a job that reached a terminal status: operation is
// its operation (CREATE, REDO, ...), result ready, partially_ready or
// failed.
func (m *Metrics) JobFinished(operation, result string) {
	if m != nil {
		m.Jobs.WithLabelValues(operation, result).Inc()
	}
}

// NodeOp counts one node RPC and its latency.
func (m *Metrics) NodeOp(node, op string, err error, d time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.NodeOps.WithLabelValues(node, op, result).Inc()
	m.NodeOpDuration.WithLabelValues(op).Observe(d.Seconds())
}

type retCodeKey struct{}

// RecordRetCode tells Instrument the envelope ret_code a public route
// answered (its HTTP status is 200 either way), so a failure is counted
// in http_errors_total. Codes of success (200) are ignored.
func RecordRetCode(r *http.Request, code int) {
	if p, ok := r.Context().Value(retCodeKey{}).(*atomic.Int64); ok && code != http.StatusOK {
		p.Store(int64(code))
	}
}

// Label values of requests outside the fixed sets.
const (
	// RouteUnmatched labels a request no route matched (404), and one
	// whose method the matched path does not serve (405).
	RouteUnmatched = "unmatched"
	// MethodOther labels a method outside the standard ones.
	MethodOther = "OTHER"
)

// MethodLabel is the method label of a request: one of the standard
// methods, else MethodOther. net/http accepts any token as a method, up to
// the header limit (about 1 MiB): used as a label as it came, every odd
// method would be a new series kept for the life of the process.
func MethodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return MethodOther
}

// routeLabel is the route label of a request that was served: the chi
// pattern that matched it (a registered pattern, so one of a fixed set),
// RouteUnmatched when none did.
func routeLabel(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return rc.RoutePattern()
	}
	return RouteUnmatched
}

// Instrument counts and times requests by chi route pattern (the pattern,
// not the path, so ids do not explode the label space) and by method (one
// of a fixed set, see MethodLabel), and counts failed ones in
// http_errors_total. It only observes; it never answers a request.
// Unmatched requests, 404 and 405 answers are labelled RouteUnmatched, so
// however many paths and methods callers invent, the label values stay a
// fixed set.
func (m *Metrics) Instrument(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ret := new(atomic.Int64)
		r = r.WithContext(context.WithValue(r.Context(), retCodeKey{}, ret))
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		code := ww.Status()
		if code == 0 {
			code = http.StatusOK
		}
		route, method := routeLabel(r), MethodLabel(r.Method)
		m.HTTPRequests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
		m.HTTPDuration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		switch {
		case ret.Load() != 0:
			m.Errors.WithLabelValues(route, method, strconv.FormatInt(ret.Load(), 10)).Inc()
		case code >= 400:
			m.Errors.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
		}
	})
}

// Handler serves the registry in the Prometheus exposition format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
