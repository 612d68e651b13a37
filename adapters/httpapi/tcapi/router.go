package tcapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/openapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/routes"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Builds accepts builds for PENDING jobs. Submit returns once the build is
// accepted or refused; the build itself must not depend on ctx (it is the
// HTTP request's context). Errors: core.ErrInvalidArgument (the request does
// not match the job row) -> 400, core.ErrNotFound (job missing or not
// pending) -> 404, core.ErrConflict (already in flight) -> 409,
// core.ErrBusy (at the concurrency cap) -> 429.
type Builds interface {
	Submit(ctx context.Context, req ports.BuildRequest) error
}

// ArtifactDeleter removes an artifact's bytes and row. A missing artifact is
// success (the route is idempotent).
type ArtifactDeleter interface {
	DeleteArtifact(ctx context.Context, artifactID string) error
}

// ArtifactLookup reads artifact rows; core.ErrNotFound when absent.
type ArtifactLookup interface {
	Get(ctx context.Context, artifactID string) (*core.Artifact, error)
}

// UploadRecorder records where an uploaded artifact now lives (the artifact
// row's storage_backend / object_key). Called after the bytes are stored
// and verified, also when identical bytes were already there, so it must be
// idempotent.
type UploadRecorder interface {
	RecordUpload(ctx context.Context, u core.UploadedArtifact) error
}

// Readiness reports whether the database can serve (the wiring pings it).
// It must not depend on a release manifest. Its error is logged, never
// answered: /health and /ready say "database: not reachable".
type Readiness func(ctx context.Context) error

// Config wires the router. Nil services make their routes answer 503.
type Config struct {
	// Token is CUBE_TEMPLATE_CALLBACK_TOKEN; InsecureNoToken is
	// CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN (see package auth).
	Token           string
	InsecureNoToken bool

	Builds    Builds
	Deleter   ArtifactDeleter
	Artifacts ArtifactLookup
	Store     ports.ArtifactStore
	Uploads   UploadRecorder
	Compat    Compat
	Readiness Readiness

	Metrics  *metrics.Metrics
	Gatherer prometheus.Gatherer // served on /metrics; nil serves an empty registry
	Logger   *slog.Logger

	// MaxBodyBytes caps JSON bodies (default 1 MiB); MaxBuildBodyBytes caps
	// POST /build, which carries the envd binary (default 64 MiB);
	// MaxUploadBytes caps an uploaded ext4 (default 64 GiB).
	MaxBodyBytes      int64
	MaxBuildBodyBytes int64
	MaxUploadBytes    int64
	// UploadIdleTimeout is how long an upload's body may go without a
	// byte arriving (default 2 minutes); the server's read timeout does
	// not apply to uploads.
	UploadIdleTimeout time.Duration
	// SignedURLTTL is the lifetime of presigned download URLs (default 15
	// minutes; a download only needs the URL to be valid when it starts).
	SignedURLTTL time.Duration
	// LocalPath is the file a store key lives in, for the ext4_path of an
	// upload answer (upstream masters record it); nil or "" for remote
	// stores.
	LocalPath func(key string) string
	// DownloadTokens checks a download's token against the artifact row's
	// seed (core.DownloadTokens, keyed by the callback token). The zero
	// value compares the row's value itself, as upstream did.
	DownloadTokens core.DownloadTokens
	// SpoolDir holds an upload in upstream's multipart form while it is
	// hashed, when the artifact row records no sha256 and size to verify it
	// against (default os.TempDir()).
	SpoolDir string
}

// Defaults.
const (
	DefaultMaxBuildBodyBytes int64 = 64 << 20
	DefaultMaxUploadBytes    int64 = 64 << 30
	DefaultSignedURLTTL            = 15 * time.Minute
	DefaultUploadIdleTimeout       = 2 * time.Minute
)

// Route paths.
const (
	PathDownload = core.DownloadPath
	PathCompat   = "/cube/template/compat"
	PathHealth   = "/health"
	PathReady    = "/ready"
	PathMetrics  = "/metrics"
	PathOpenAPI  = "/openapi.json"
)

// TemplateCenterRoutes is every route New registers.
func TemplateCenterRoutes() []routes.Route {
	return []routes.Route{
		{Method: http.MethodPost, Pattern: wire.PathBuild, Kind: routes.Internal},
		{Method: http.MethodPost, Pattern: wire.PathArtifactDelete, Kind: routes.Internal},
		{Method: http.MethodPost, Pattern: wire.PathArtifactUpload, Kind: routes.Internal},
		{Method: http.MethodGet, Pattern: PathDownload, Kind: routes.Download},
		{Method: http.MethodHead, Pattern: PathDownload, Kind: routes.Download},
		{Method: http.MethodGet, Pattern: PathCompat, Kind: routes.Internal},
		{Method: http.MethodPost, Pattern: PathCompat, Kind: routes.Internal},
		{Method: http.MethodGet, Pattern: PathHealth, Kind: routes.Ops},
		{Method: http.MethodGet, Pattern: PathReady, Kind: routes.Ops},
		{Method: http.MethodGet, Pattern: PathMetrics, Kind: routes.Ops},
		{Method: http.MethodGet, Pattern: PathOpenAPI, Kind: routes.Ops},
	}
}

type server struct {
	cfg Config
	log *slog.Logger
}

// New builds the templatecenter router.
func New(cfg Config) chi.Router {
	if cfg.MaxBuildBodyBytes <= 0 {
		cfg.MaxBuildBodyBytes = DefaultMaxBuildBodyBytes
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.SignedURLTTL <= 0 {
		cfg.SignedURLTTL = DefaultSignedURLTTL
	}
	if cfg.UploadIdleTimeout <= 0 {
		cfg.UploadIdleTimeout = DefaultUploadIdleTimeout
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	s := &server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}

	r := chi.NewRouter()
	// The first two only observe or turn panics into 500s; neither can
	// answer 200. A credential header sent twice is refused before any
	// route judges either.
	r.Use(cfg.Metrics.Instrument, wire.Recover(s.log), auth.SingleCredentials(func(w http.ResponseWriter, _ *http.Request, msg string) {
		wire.WriteError(w, http.StatusBadRequest, msg)
	}))
	r.NotFound(wire.NotFound)
	r.MethodNotAllowed(wire.MethodNotAllowed)

	r.Group(func(r chi.Router) {
		r.Use(auth.Middleware(cfg.Token, cfg.InsecureNoToken))
		r.Post(wire.PathBuild, s.build)
		r.Post(wire.PathArtifactDelete, s.deleteArtifact)
		r.Post(wire.PathArtifactUpload, s.upload)
		// Compat names every template and node: callers reach it through
		// the master's public API (authenticated there), which forwards
		// it with the internal token.
		r.Get(PathCompat, s.compatReport)
		r.Post(PathCompat, s.compatRescan)
	})
	r.Get(PathDownload, s.download)
	r.Head(PathDownload, s.download)
	r.Get(PathHealth, s.health)
	r.Get(PathReady, s.ready)
	r.Method(http.MethodGet, PathMetrics, metrics.Handler(cfg.Gatherer))
	doc, err := OpenAPI()
	if err != nil {
		panic(err) // a static document: a failure is a bug caught by the tests
	}
	r.Method(http.MethodGet, PathOpenAPI, openapi.Handler(doc))
	return r
}

// internalError logs err and answers a generic 500 (or 503 when the store is
// not attached); 4xx errors keep their message, which names the field or
// object.
func (s *server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	status := wire.StatusFor(err)
	if status < 500 {
		wire.WriteError(w, status, err.Error())
		return
	}
	s.log.ErrorContext(r.Context(), "internal request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	msg := "internal error"
	if status == http.StatusServiceUnavailable {
		msg = "service unavailable"
	}
	wire.WriteError(w, status, msg)
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Store == nil {
		wire.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "artifact store not attached"})
		return
	}
	if !s.databaseReady(r) {
		wire.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "database: " + dbNotReachable})
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ready is GET /ready: /health's checks, each named, in the master's
// document. A request that carries the shared token (the master's own
// readiness check) also learns whether it is this service's: two services
// configured with different tokens cannot talk, so neither is ready.
func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	checks := []wire.ReadyCheck{
		{Name: "artifact_store", Failure: "not attached", Run: func(context.Context) (string, error) {
			if s.cfg.Store == nil {
				return "", errors.New("no artifact store attached")
			}
			return "", nil
		}},
		{Name: "database", Failure: dbNotReachable, Run: func(ctx context.Context) (string, error) {
			if s.cfg.Readiness == nil {
				return "", nil
			}
			return "", s.cfg.Readiness(ctx)
		}},
	}
	if len(r.Header.Values(auth.Header)) > 0 {
		got := r.Header.Get(auth.Header)
		checks = append(checks, wire.ReadyCheck{Name: TokenCheck, Failure: TokenMismatch, Run: func(context.Context) (string, error) {
			if s.cfg.InsecureNoToken || s.cfg.Token != "" && auth.Equal(got, s.cfg.Token) {
				return "", nil
			}
			return "", errors.New("the caller's " + auth.Header + " is not this service's CUBE_TEMPLATE_CALLBACK_TOKEN")
		}})
	}
	wire.ServeReady(w, r, s.log, checks)
}

// TokenCheck names /ready's check of the caller's token, and TokenMismatch
// is its answer when the tokens differ.
const (
	TokenCheck    = "callback_token"
	TokenMismatch = "does not match CUBE_TEMPLATE_CALLBACK_TOKEN here"
)

// dbNotReachable is what /health and /ready answer for a failed Readiness.
const dbNotReachable = "not reachable"

// databaseReady runs Readiness. Its error is logged, never answered: the
// routes are unauthenticated and a driver's error can name the database's
// address, user and driver.
func (s *server) databaseReady(r *http.Request) bool {
	if s.cfg.Readiness == nil {
		return true
	}
	if err := s.cfg.Readiness(r.Context()); err != nil {
		s.log.WarnContext(r.Context(), "readiness check failed", "check", "database", "path", r.URL.Path, "err", err)
		return false
	}
	return true
}
