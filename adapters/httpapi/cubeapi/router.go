package cubeapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/openapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/routes"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// StatusReports applies status callbacks. applied is false for a stale or
// duplicate report, which is acknowledged all the same (so is an error
// wrapping core.ErrStaleUpdate). core.ErrNotFound means the job is unknown;
// core.ErrInvalidTransition a report the state machine refuses. The handler
// answers only after HandleStatusReport returns, so work that must survive
// the request (the resume pipeline) has to be started on another context.
type StatusReports interface {
	HandleStatusReport(ctx context.Context, jobID string, r ports.StatusReport) (applied bool, err error)
}

// ImageJobs serves create-from-image, redo and job reads (implemented by
// *control.Service). baseURL is the download base URL for artifacts built
// for this request.
type ImageJobs interface {
	// CreateFromImageWithEnvd submits a build; envd is the agent binary
	// the caller uploaded (nil: none).
	CreateFromImageWithEnvd(ctx context.Context, req *core.FromImageRequest, baseURL string, envd []byte) (*core.Job, error)
	// GetLiveJob returns the job with its live pull counters.
	GetLiveJob(ctx context.Context, jobID string) (*core.Job, error)
	Redo(ctx context.Context, req control.RedoRequest) (*core.Job, error)
	// GetJob returns the job a build id names.
	GetJob(ctx context.Context, jobID string) (*core.Job, error)
}

// Migrations serves migrate (tpl merge) jobs.
type Migrations interface {
	Migrate(ctx context.Context, req control.MigrateRequest) (*core.Job, error)
	GetMigrateJob(ctx context.Context, jobID string) (*core.Job, error)
}

// Catalog serves template creation, reads, deletion and aliases.
type Catalog interface {
	// CreateTemplate creates a template from a sandbox create request
	// and returns it once every target node has snapshotted it (or
	// failed to).
	CreateTemplate(ctx context.Context, req control.CreateTemplateRequest) (*control.Template, error)
	ListTemplates(ctx context.Context) ([]control.Template, error)
	GetTemplate(ctx context.Context, templateID string) (*control.Template, error)
	Delete(ctx context.Context, templateID, instanceType string) error
	// SetAlias binds alias to the template; nil or "" clears it.
	SetAlias(ctx context.Context, templateID string, alias *string) (*core.Definition, error)
	// ResolveTemplate turns a template id or alias into the template a
	// sandbox create would use: core.ErrNotFound when neither names one,
	// core.ErrTemplateNotReady when it has no READY replica on a healthy
	// node.
	ResolveTemplate(ctx context.Context, idOrAlias string) (*core.Definition, error)
	// ResolveTemplateKey turns a template id or alias into the template
	// id; a key naming nothing comes back unchanged.
	ResolveTemplateKey(ctx context.Context, key string) (string, error)
	// ResolveSandboxRequest fills a sandbox create request from the
	// template its template id annotation names.
	ResolveSandboxRequest(ctx context.Context, req *core.SandboxRequest) (*control.ResolvedRequest, error)
	// ComponentVersions returns the template's replicas with the component
	// versions their nodes reported; core.ErrNotFound without a
	// definition.
	ComponentVersions(ctx context.Context, templateID string) ([]*core.Replica, error)
}

// CubeletRenderer maps a sandbox create request onto the request a node
// is sent (the Cubelet RunCubeSandboxRequest); the value is marshaled with
// encoding/json, as upstream's preview does.
type CubeletRenderer func(req *core.SandboxRequest) (any, error)

// Artifacts reads artifact rows.
type Artifacts interface {
	GetArtifact(ctx context.Context, artifactID string) (*core.Artifact, error)
}

// Config wires the router. Nil services make their routes answer an
// envelope error (130593); a nil TemplateCenterURL makes the proxied routes
// answer 503 / 130593.
type Config struct {
	// Token and InsecureNoToken guard the callback route (package auth).
	Token           string
	InsecureNoToken bool
	// PublicAuth, when set, authenticates the public /cube/* routes and
	// the proxied compat route (a bearer token or upstream's signed
	// headers; 130401 otherwise). Nil leaves them open: the apps set it
	// unless CUBE_MASTER_AUTH=false. Ops routes, downloads (their own
	// per-artifact token), the CA certificate and the callback are never
	// behind it. Whatever it is, answers hide download tokens and registry
	// credentials from callers that did not authenticate.
	PublicAuth *auth.Public

	Reports    StatusReports
	Jobs       ImageJobs
	Migrations Migrations
	Catalog    Catalog
	Artifacts  Artifacts
	Placement  Placement
	// JobLog serves GET /cube/template/jobs/log; Nodes GET /cube/node
	// (nil: those routes answer 130593).
	JobLog ports.JobLog
	Nodes  func(ctx context.Context) ([]cubeview.NodeInfo, error)

	// TemplateCenterURL is CUBE_TEMPLATE_CENTER_ADDR, where compat and
	// download requests are forwarded.
	TemplateCenterURL string
	// DownloadBaseURL, when set, is the base URL recorded for new artifacts;
	// otherwise it is derived from the request's Host, as upstream does.
	DownloadBaseURL string
	// RenderCubelet renders the node request of POST /cube/sandbox/preview;
	// nil leaves cubelet_request out of the answer.
	RenderCubelet CubeletRenderer
	// CADir holds the CubeEgress root CA served on /cube/ca/{filename}
	// (DefaultCADir when empty).
	CADir string

	// Readiness lists what GET /ready checks (the data plane, the
	// database, the nodes); none means always ready.
	Readiness []Check
	// StorageBackend is the data plane's artifact store kind ("file",
	// "s3", "gs"); a migrate asking for another one is refused.
	StorageBackend string

	Metrics  *metrics.Metrics
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	// MaxBodyBytes caps JSON bodies (default 1 MiB).
	MaxBodyBytes int64
}

// Route paths.
const (
	PathTemplate       = "/cube/template"
	PathFromImage      = "/cube/template/from-image"
	PathRedo           = "/cube/template/redo"
	PathMigrate        = "/cube/template/migrate"
	PathAlias          = "/cube/template/{template_id}/alias"
	PathBuildStatus    = "/cube/template/build/{build_id}/status"
	PathResolve        = "/cube/template/resolve"
	PathPreview        = "/cube/sandbox/preview"
	PathCA             = "/cube/ca/{filename}"
	PathRootfsArtifact = "/cube/rootfs-artifact"
	// PathComponentVersions is upstream's meta route of a template's
	// per-replica component versions.
	PathComponentVersions = "/internal/meta/templates/{template_id}/component-versions"
	PathCompat            = "/cube/template/compat"
	PathDownload          = core.DownloadPath
	PathHealth            = "/notify/health"
	PathReady             = "/ready"
	PathMetrics           = "/metrics"
	PathOpenAPI           = "/openapi.json"
)

// CubeMasterRoutes is every route New registers.
func CubeMasterRoutes() []routes.Route {
	return []routes.Route{
		{Method: http.MethodPost, Pattern: wire.PathJobStatus, Kind: routes.Internal},
		{Method: http.MethodPost, Pattern: PathFromImage, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathFromImage, Kind: routes.Public},
		{Method: http.MethodPost, Pattern: PathRedo, Kind: routes.Public},
		{Method: http.MethodPost, Pattern: PathMigrate, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathMigrate, Kind: routes.Public},
		{Method: http.MethodPost, Pattern: PathTemplate, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathTemplate, Kind: routes.Public},
		{Method: http.MethodDelete, Pattern: PathTemplate, Kind: routes.Public},
		{Method: http.MethodPut, Pattern: PathAlias, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathJobs, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathJobLog, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathNodes, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathBuildStatus, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathResolve, Kind: routes.Public},
		{Method: http.MethodPost, Pattern: PathResolve, Kind: routes.Public},
		{Method: http.MethodPost, Pattern: PathPreview, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathCA, Kind: routes.Download},
		{Method: http.MethodHead, Pattern: PathCA, Kind: routes.Download},
		{Method: http.MethodGet, Pattern: PathRootfsArtifact, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathComponentVersions, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathPlacementPolicy, Kind: routes.Public},
		{Method: http.MethodPut, Pattern: PathPlacementPolicy, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathTemplatePlacements, Kind: routes.Public},
		{Method: http.MethodGet, Pattern: PathCompat, Kind: routes.Proxied},
		{Method: http.MethodPost, Pattern: PathCompat, Kind: routes.Proxied},
		{Method: http.MethodGet, Pattern: PathDownload, Kind: routes.Proxied},
		{Method: http.MethodHead, Pattern: PathDownload, Kind: routes.Proxied},
		{Method: http.MethodGet, Pattern: core.ChunkIndexPath, Kind: routes.Proxied},
		{Method: http.MethodGet, Pattern: core.ChunkDataPath, Kind: routes.Proxied},
		{Method: http.MethodGet, Pattern: PathHealth, Kind: routes.Ops},
		{Method: http.MethodGet, Pattern: PathReady, Kind: routes.Ops},
		{Method: http.MethodGet, Pattern: PathMetrics, Kind: routes.Ops},
		{Method: http.MethodGet, Pattern: PathOpenAPI, Kind: routes.Ops},
	}
}

type server struct {
	cfg      Config
	log      *slog.Logger
	compat   http.Handler
	download http.Handler
}

// New builds the cubemaster router. It fails only on a malformed
// TemplateCenterURL.
func New(cfg Config) (chi.Router, error) {
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	s := &server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := s.initProxies(); err != nil {
		return nil, err
	}

	r := chi.NewRouter()
	// The first two only observe or turn panics into 500s; neither can
	// answer 200. A credential header sent twice is refused before any
	// route judges either.
	r.Use(cfg.Metrics.Instrument, wire.Recover(s.log), auth.SingleCredentials(s.refuseRepeated))
	r.NotFound(s.notFound)
	r.MethodNotAllowed(wire.MethodNotAllowed)

	r.Group(func(r chi.Router) {
		r.Use(auth.Middleware(cfg.Token, cfg.InsecureNoToken))
		r.Post(wire.PathJobStatus, s.statusCallback)
	})

	r.Group(func(r chi.Router) {
		r.Use(s.authenticate)
		r.Post(PathFromImage, s.createFromImage)
		r.Get(PathFromImage, s.getImageJob)
		r.Post(PathRedo, s.redo)
		r.Post(PathMigrate, s.migrate)
		r.Get(PathMigrate, s.getMigrateJob)
		r.Post(PathTemplate, s.createTemplate)
		r.Get(PathTemplate, s.getTemplates)
		r.Delete(PathTemplate, s.deleteTemplate)
		r.Put(PathAlias, s.setAlias)
		r.Get(PathJobs, s.listJobs)
		r.Get(PathJobLog, s.jobLog)
		r.Get(PathNodes, s.listNodes)
		r.Get(PathBuildStatus, s.buildStatus)
		r.Get(PathResolve, s.resolveTemplate)
		r.Post(PathResolve, s.resolveSandboxRequest)
		r.Post(PathPreview, s.previewSandbox)
		r.Get(PathRootfsArtifact, s.rootfsArtifact)
		r.Get(PathComponentVersions, s.componentVersions)
		r.Get(PathPlacementPolicy, s.getPlacementPolicy)
		r.Put(PathPlacementPolicy, s.putPlacementPolicy)
		r.Get(PathTemplatePlacements, s.templatePlacements)
		r.Method(http.MethodGet, PathCompat, s.compat)
		r.Method(http.MethodPost, PathCompat, s.compat)
	})

	// The CA certificate is public and its key needs the callback token;
	// downloads carry their artifact's token.
	r.Get(PathCA, s.caFile)
	r.Head(PathCA, s.caFile)
	r.Method(http.MethodGet, PathDownload, s.download)
	r.Method(http.MethodHead, PathDownload, s.download)
	r.Method(http.MethodGet, core.ChunkIndexPath, s.download)
	r.Method(http.MethodGet, core.ChunkDataPath, s.download)

	// Dependency-free on purpose: it says the process is up; /ready says
	// whether what it depends on is.
	r.Get(PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get(PathReady, s.ready)
	r.Method(http.MethodGet, PathMetrics, metrics.Handler(cfg.Gatherer))
	doc, err := OpenAPI()
	if err != nil {
		return nil, err
	}
	r.Method(http.MethodGet, PathOpenAPI, openapi.Handler(doc))
	return r, nil
}

// notFound answers unknown /cube/* paths with an envelope (and a real 404,
// so status-code clients notice too); other paths get a plain 404.
func (s *server) notFound(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/cube/") {
		wire.NotFound(w, r)
		return
	}
	wire.CloseAfterRefusal(w, r)
	writeEnvelopeStatus(w, r, http.StatusNotFound, envelope.CodeNotFound, "Not Found")
}

// refuseRepeated answers a request carrying a credential header twice
// (auth.SingleCredentials): a real 400, with an envelope on the /cube/*
// routes that answer one.
func (s *server) refuseRepeated(w http.ResponseWriter, r *http.Request, msg string) {
	switch p := r.URL.Path; {
	case !strings.HasPrefix(p, "/cube/"), p == PathDownload, p == core.ChunkIndexPath, p == core.ChunkDataPath, strings.HasPrefix(p, "/cube/ca/"):
		wire.WriteError(w, http.StatusBadRequest, msg)
		return
	}
	writeEnvelopeStatus(w, r, http.StatusBadRequest, envelope.CodeParams, msg)
}

// writeEnvelopeStatus answers an envelope with a real HTTP status, for the
// answers a public route's handler never gives (no such route, a refused
// request), so status-code clients notice too.
func writeEnvelopeStatus(w http.ResponseWriter, r *http.Request, status, code int, msg string) {
	metrics.RecordRetCode(r, code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(envelope.Response{Ret: envelope.Ret{Code: code, Msg: msg}})
}
