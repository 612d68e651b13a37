package cubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

const testToken = "master-test-token"

// services is one fake for every service interface; calls records the
// method names in order and err, when set, fails every call.
type services struct {
	mu      sync.Mutex
	calls   []string
	err     error
	applied bool
	reports []ports.StatusReport
	baseURL string
	last    any
	// aliasArg and alias are what the last SetAlias got; GetTemplate
	// shows the alias.
	aliasArg, alias string
	// envd is what the last create got uploaded.
	envd []byte
}

func (s *services) rec(name string, arg any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
	s.last = arg
	return s.err
}

var (
	testJob = &core.Job{JobID: "job-1", TemplateID: "tpl-1", AttemptNo: 2, Operation: core.OpCreate, Status: core.JobRunning,
		Phase: core.PhasePulling, Progress: 12, ArtifactID: "rfs-1", Fingerprint: "fp",
		Pull: core.PullProgress{TotalBytes: 100, DownloadedBytes: 40, TotalLayers: 3, CompletedLayers: 1}}
	testArtifact = &core.Artifact{ArtifactID: "rfs-1", Status: core.ArtifactReady, Ext4SHA256: "abc", Ext4SizeBytes: 4096,
		DownloadToken: "secret-download-token", DownloadBaseURL: "http://m:8089"}
)

func (s *services) HandleStatusReport(_ context.Context, jobID string, r ports.StatusReport) (bool, error) {
	s.mu.Lock()
	s.reports = append(s.reports, r)
	s.mu.Unlock()
	return s.applied, s.rec("HandleStatusReport", jobID)
}
func (s *services) CreateFromImageWithEnvd(_ context.Context, req *core.FromImageRequest, baseURL string, envd []byte) (*core.Job, error) {
	s.mu.Lock()
	s.baseURL, s.envd = baseURL, envd
	s.mu.Unlock()
	return testJob, s.rec("CreateFromImage", req)
}
func (s *services) GetLiveJob(_ context.Context, id string) (*core.Job, error) {
	return testJob, s.rec("GetImageJob", id)
}
func (s *services) Redo(_ context.Context, req control.RedoRequest) (*core.Job, error) {
	s.baseURL = req.DownloadBaseURL
	return testJob, s.rec("Redo", req)
}
func (s *services) GetJob(_ context.Context, id string) (*core.Job, error) {
	return testJob, s.rec("BuildStatus", id)
}
func (s *services) Migrate(_ context.Context, req control.MigrateRequest) (*core.Job, error) {
	return testJob, s.rec("Migrate", req)
}
func (s *services) GetMigrateJob(_ context.Context, id string) (*core.Job, error) {
	return testJob, s.rec("GetMigrateJob", id)
}
func (s *services) ListTemplates(context.Context) ([]control.Template, error) {
	return []control.Template{{TemplateID: "tpl-1", Status: "READY", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
		ImageInfo: "nginx:1@sha256:abc", JobID: "job-1", Backend: "s3"}}, s.rec("ListTemplates", nil)
}
func (s *services) GetTemplate(_ context.Context, id string) (*control.Template, error) {
	return &control.Template{TemplateID: id, Status: "READY", Version: "v2", Alias: s.alias, JobID: "job-1",
		Replicas:      []*core.Replica{{NodeID: "n1", NodeIP: "10.0.0.1", Status: core.ReplicaReady, Phase: core.ReplicaPhaseReady}},
		CreateRequest: `{"annotations":{"a":"b"}}`}, s.rec("GetTemplate", id)
}
func (s *services) CreateTemplate(_ context.Context, req control.CreateTemplateRequest) (*control.Template, error) {
	t := &control.Template{TemplateID: "tpl-sync", InstanceType: "cubebox", Version: "v2",
		Status: "PARTIALLY_READY", LastError: "node n2: boom",
		Replicas: []*core.Replica{
			{NodeID: "n1", NodeIP: "10.0.0.1", Status: core.ReplicaReady, Phase: core.ReplicaPhaseReady, SnapshotPath: "/snap/n1"},
			{NodeID: "n2", NodeIP: "10.0.0.2", Status: core.ReplicaFailed, Phase: core.ReplicaPhaseFailed, LastErrorPhase: "SNAPSHOTTING"},
		}}
	return t, s.rec("CreateTemplate", string(req.Raw))
}
func (s *services) Delete(_ context.Context, id, instanceType string) error {
	return s.rec("DeleteTemplate", id+"/"+instanceType)
}
func (s *services) SetAlias(_ context.Context, id string, alias *string) (*core.Definition, error) {
	s.aliasArg, s.alias = id+"="+*alias, *alias
	return &core.Definition{TemplateID: id, Alias: *alias}, s.rec("SetAlias", id+"="+*alias)
}
func (s *services) ResolveTemplate(_ context.Context, key string) (*core.Definition, error) {
	return &core.Definition{TemplateID: "tpl-1", Alias: "web", Status: core.TemplateReady, RequestJSON: `{"annotations":{"a":"b"}}`},
		s.rec("ResolveTemplate", key)
}

// ResolveTemplateKey maps the alias "web" to tpl-1 and is not recorded:
// it runs before the route's own call.
func (s *services) ResolveTemplateKey(_ context.Context, key string) (string, error) {
	if key == "web" {
		return "tpl-1", nil
	}
	return key, nil
}
func (s *services) ResolveSandboxRequest(_ context.Context, req *core.SandboxRequest) (*control.ResolvedRequest, error) {
	merged := *req
	merged.Annotations = map[string]string{core.AnnotationTemplateID: "tpl-1", "from": "template"}
	merged.RequestID = "fresh-req"
	return &control.ResolvedRequest{Request: &merged, TemplateID: "tpl-1", Alias: "web"}, s.rec("ResolveSandboxRequest", req)
}

func (s *services) ComponentVersions(_ context.Context, id string) ([]*core.Replica, error) {
	return []*core.Replica{{NodeID: "n1", NodeIP: "10.0.0.1", Status: core.ReplicaReady, GuestImageVersion: "g1",
		AgentVersion: "0.4.2", KernelVersion: "6.6.30", ShimVersion: "s7"}}, s.rec("ComponentVersions", id)
}

func (s *services) Policy(context.Context) (control.PolicyInForce, error) {
	return control.PolicyInForce{Policy: &core.PlacementPolicy{PerNodeMaxTemplates: 3}, Source: control.PolicySourceFile}, s.rec("Policy", nil)
}

func (s *services) SetPolicy(_ context.Context, doc []byte) (control.PolicyInForce, error) {
	p, err := core.ParsePlacementPolicy(doc)
	if err != nil {
		return control.PolicyInForce{}, err
	}
	return control.PolicyInForce{Policy: p, Source: control.PolicySourceAPI, SetAt: time.Unix(1700000000, 0)}, s.rec("SetPolicy", string(doc))
}

func (s *services) PlacementDecisions(_ context.Context, id string) ([]core.PlacementDecision, error) {
	if id == "tpl-undecided" {
		return nil, s.rec("PlacementDecisions", id)
	}
	return []core.PlacementDecision{{TemplateID: id, NodeID: "n1", Decision: core.DecisionEvict, Reason: core.ReasonOverBudget, At: time.Unix(1700000000, 0)}},
		s.rec("PlacementDecisions", id)
}

// GetArtifact is recorded only when it is the route's own call: the job
// routes also read the job's artifact row to show it.
func (s *services) GetArtifact(_ context.Context, id string) (*core.Artifact, error) {
	s.mu.Lock()
	jobRoute := len(s.calls) > 0
	s.mu.Unlock()
	if jobRoute {
		return testArtifact, nil
	}
	return testArtifact, s.rec("GetArtifact", id)
}

// fakeTC records every request the master forwards.
type fakeTC struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (f *fakeTC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r.Clone(context.Background()))
	f.mu.Unlock()
	switch r.URL.Path {
	case PathDownload:
		if r.URL.Query().Get("token") != "good" {
			http.Error(w, "unknown artifact, or a missing or wrong download token", http.StatusForbidden)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, "https://bucket.s3.example/rfs-1/rfs-1.ext4?X-Amz-Signature=x", http.StatusFound)
	case PathCompat:
		// As the data plane: compat needs the internal token.
		if r.Header.Get(auth.Header) != testToken {
			http.Error(w, `{"error":"missing or invalid token"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"requestID":"","ret":{"ret_code":200,"ret_msg":"success"},"data":{"manifest_found":false,"templates":[]}}`)
	default:
		http.Error(w, "unexpected path on the template center", http.StatusTeapot)
	}
}

func newServer(t *testing.T, svc *services, tcURL string) chi.Router {
	t.Helper()
	cfg := newServerConfig()
	cfg.TemplateCenterURL = tcURL
	if svc != nil {
		cfg.Reports, cfg.Jobs, cfg.Migrations, cfg.Catalog, cfg.Artifacts, cfg.Placement = svc, svc, svc, svc, svc, svc
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// newServerConfig is a Config with the test callback token and a silent log.
func newServerConfig() Config {
	return Config{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func do(h http.Handler, method, target, body string, hdr map[string]string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// doHost is do with the request's Host set.
func doHost(h http.Handler, method, target, body, host string, hdr map[string]string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func tokenHdr() map[string]string { return map[string]string{auth.Header: testToken} }

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return m
}

func retCode(t *testing.T, rec *httptest.ResponseRecorder) int {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("public route answered HTTP %d: %s", rec.Code, rec.Body.String())
	}
	ret, ok := decodeMap(t, rec.Body.Bytes())["ret"].(map[string]any)
	if !ok {
		t.Fatalf("no ret in %s", rec.Body.String())
	}
	return int(ret["ret_code"].(float64))
}
