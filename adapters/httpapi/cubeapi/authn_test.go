package cubeapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/routes"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

const (
	apiBearer = "api-bearer-token-0123456789"
	apiUser   = "ops"
	apiSecret = "ops-secret-key-0123456789"
	// The secrets a stored request carries in these tests.
	dlSecret  = "dl-token-7f3a9c"
	imgSecret = "registry-token-51b2"
)

var authNow = time.Unix(1_760_000_000, 0)

func newPublicAuth() *auth.Public {
	return auth.NewPublic(auth.PublicConfig{SecretKeys: map[string]string{apiUser: apiSecret}, BearerTokens: []string{apiBearer},
		Now: func() time.Time { return authNow }})
}

// newAuthServer is newServer with public authentication on.
func newAuthServer(t *testing.T, svc *services, tcURL string) chi.Router {
	t.Helper()
	cfg := Config{Token: testToken, TemplateCenterURL: tcURL, PublicAuth: newPublicAuth(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if svc != nil {
		cfg.Reports, cfg.Jobs, cfg.Migrations, cfg.Catalog, cfg.Artifacts = svc, svc, svc, svc, svc
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// concrete fills a route pattern's parameters.
func concrete(pattern string) string {
	return strings.NewReplacer("{template_id}", "tpl-1", "{build_id}", "job-1", "{job_id}", "job-1", "{filename}", "cube-root-ca.crt").Replace(pattern)
}

// routeBody is a body a route accepts (the write calls' own, else {}).
func routeBody(r routes.Route) string {
	for _, c := range writeCalls {
		if c.method == r.Method && c.pattern == r.Pattern {
			return c.body
		}
	}
	if r.Method == http.MethodPost {
		return `{"requestID":"r"}`
	}
	return ""
}

func routeTarget(r routes.Route) string {
	t := concrete(r.Pattern)
	switch r.Pattern {
	case PathFromImage, PathMigrate:
		if r.Method == http.MethodGet {
			t += "?job_id=job-1"
		}
	case PathTemplate:
		if r.Method == http.MethodGet {
			t += "?template_id=tpl-1&include_request=true"
		}
	case PathResolve:
		if r.Method == http.MethodGet {
			t += "?template=web"
		}
	case PathRootfsArtifact:
		t += "?artifact_id=rfs-1"
	case PathDownload:
		t += "?artifact_id=rfs-1&token=good"
	}
	return t
}

// guarded reports whether a route is behind public authentication: every
// public route and the proxied compat route.
func guarded(r routes.Route) bool {
	return r.Kind == routes.Public || (r.Kind == routes.Proxied && r.Pattern == PathCompat)
}

// TestPublicAuthGuardsEveryPublicRoute: with authentication on, every
// public route and the compat proxy answer a request without valid
// credentials with HTTP 200 and ret_code 130401 (upstream's AuthFailed)
// and reach neither a service nor the template center; with a bearer
// token or a signature they are served. Ops routes, downloads, the CA
// certificate and the callback stay as they were.
func TestPublicAuthGuardsEveryPublicRoute(t *testing.T) {
	tc := &fakeTC{}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()
	svc := &services{applied: true}
	h := newAuthServer(t, svc, tcSrv.URL)

	bad := map[string]map[string]string{
		"none":         nil,
		"wrong bearer": {"Authorization": "Bearer not-the-token-0000000"},
		"bad signature": {auth.HeaderUserID: apiUser, auth.HeaderTimestamp: "1760000000", auth.HeaderNonce: "x",
			auth.HeaderSignature: "AAAA", auth.HeaderMethod: "sha256"},
		"callback token only": {auth.Header: testToken},
	}
	nonce := 0
	for _, r := range CubeMasterRoutes() {
		if !guarded(r) {
			continue
		}
		for name, hdr := range bad {
			before := len(svc.calls)
			rec := do(h, r.Method, routeTarget(r), routeBody(r), hdr)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s (%s): HTTP %d, want 200 as upstream", r.Key(), name, rec.Code)
			}
			if code := retCode(t, rec); code != envelope.CodeAuth {
				t.Fatalf("%s (%s): ret_code %d, want %d", r.Key(), name, code, envelope.CodeAuth)
			}
			if len(svc.calls) != before {
				t.Fatalf("%s (%s) reached the service: %v", r.Key(), name, svc.calls[before:])
			}
		}
		// Served with a bearer token, and with a fresh signature.
		if code := retCode(t, do(h, r.Method, routeTarget(r), routeBody(r), map[string]string{"Authorization": "Bearer " + apiBearer})); code == envelope.CodeAuth {
			t.Fatalf("%s refused a valid bearer token", r.Key())
		}
		nonce++
		req := httptest.NewRequest(r.Method, routeTarget(r), strings.NewReader(routeBody(r)))
		auth.SetSigned(req.Header, apiUser, apiSecret, "nonce-"+string(rune('a'+nonce)), "sha1", authNow)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if code := retCode(t, rec); code == envelope.CodeAuth {
			t.Fatalf("%s refused a valid signature: %s", r.Key(), rec.Body.String())
		}
	}
	tc.mu.Lock()
	for _, r := range tc.reqs {
		for _, hname := range auth.CredentialHeaders {
			if r.Header.Get(hname) != "" {
				t.Errorf("the compat proxy forwarded the caller's %s", hname)
			}
		}
	}
	tc.mu.Unlock()

	// Ops routes, the download (its artifact token) and the CA
	// certificate need no public credential.
	for _, r := range CubeMasterRoutes() {
		if guarded(r) || r.Kind == routes.Internal {
			continue
		}
		rec := do(h, r.Method, routeTarget(r), "", nil)
		var env envelope.Response
		if json.Unmarshal(rec.Body.Bytes(), &env) == nil && env.Ret.Code == envelope.CodeAuth {
			t.Errorf("%s (%s) asks for public credentials: %d %s", r.Key(), r.Kind, rec.Code, rec.Body.String())
		}
		switch {
		case r.Kind == routes.Ops && rec.Code != http.StatusOK:
			t.Errorf("ops route %s answered %d", r.Key(), rec.Code)
		case r.Pattern == PathDownload && rec.Code != http.StatusFound:
			t.Errorf("download %s answered %d, want the template center's 302", r.Key(), rec.Code)
		}
	}

	// The callback keeps its own token and needs no public credential.
	body := `{"status":"RUNNING","phase":"PULLING","progress":10}`
	if rec := do(h, http.MethodPost, "/internal/template/jobs/job-1/status", body, tokenHdr()); rec.Code != http.StatusOK {
		t.Fatalf("callback with its token: %d %s", rec.Code, rec.Body.String())
	}
	if rec := do(h, http.MethodPost, "/internal/template/jobs/job-1/status", body, map[string]string{"Authorization": "Bearer " + apiBearer}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("callback with a public bearer token only: %d, want 401", rec.Code)
	}
	if wire.PathJobStatus != "/internal/template/jobs/{job_id}/status" {
		t.Fatalf("callback path moved: %s", wire.PathJobStatus)
	}
}

// TestPublicAuthOffLeavesRoutesOpen: without PublicAuth (dev mode) the
// public routes answer as before.
func TestPublicAuthOffLeavesRoutesOpen(t *testing.T) {
	h := newServer(t, &services{}, "")
	if code := retCode(t, do(h, http.MethodGet, PathTemplate, "", nil)); code != envelope.CodeSuccess {
		t.Fatalf("ret_code %d", code)
	}
}

// secretServices stores requests that carry an artifact download token
// (annotation and URL) and a registry token, as generated requests do.
type secretServices struct{ *services }

const storedWithSecrets = `{"annotations":{"cube.master.appsnapshot.template.id":"tpl-1"},"containers":[{"name":"t","image":{"image":"rfs-1",` +
	`"token":"` + imgSecret + `","annotations":{"cube.master.rootfs.artifact.token":"` + dlSecret + `",` +
	`"cube.master.rootfs.artifact.url":"http://m:8089/cube/template/artifact/download?artifact_id=rfs-1&token=` + dlSecret + `"}}}]}`

func (s secretServices) GetTemplate(ctx context.Context, id string) (*control.Template, error) {
	t, err := s.services.GetTemplate(ctx, id)
	t.CreateRequest = storedWithSecrets
	return t, err
}

func (s secretServices) ResolveTemplate(ctx context.Context, key string) (*core.Definition, error) {
	d, err := s.services.ResolveTemplate(ctx, key)
	d.RequestJSON = storedWithSecrets
	return d, err
}

func (s secretServices) ResolveSandboxRequest(ctx context.Context, req *core.SandboxRequest) (*control.ResolvedRequest, error) {
	merged, _, err := core.ParseSandboxRequest([]byte(storedWithSecrets))
	if err != nil {
		return nil, err
	}
	return &control.ResolvedRequest{Request: merged, TemplateID: "tpl-1"}, s.rec("ResolveSandboxRequest", req)
}

// TestReadRoutesHideCredentials: the stored and generated requests on
// GET /cube/template?include_request, GET and POST /cube/template/resolve
// and POST /cube/sandbox/preview (and the node request it renders) show
// the download token and registry credentials only to a caller that
// authenticated (public credentials, or the callback token a node holds);
// with authentication off (dev mode) they are always redacted.
func TestReadRoutesHideCredentials(t *testing.T) {
	svc := secretServices{&services{}}
	render := func(req *core.SandboxRequest) (any, error) {
		// A node request carries the token the same way.
		return map[string]any{"containers": []any{map[string]any{"image": map[string]any{"annotations": req.Containers[0].Image.Annotations}}}}, nil
	}
	mk := func(pa *auth.Public) chi.Router {
		h, err := New(Config{Token: testToken, PublicAuth: pa, Reports: svc, Jobs: svc, Migrations: svc, Catalog: svc, Artifacts: svc,
			RenderCubelet: render, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	reqBody := `{"annotations":{"cube.master.appsnapshot.template.id":"web"}}`
	reads := []struct{ method, target, body string }{
		{http.MethodGet, PathTemplate + "?template_id=tpl-1&include_request=true", ""},
		{http.MethodGet, PathResolve + "?template=web", ""},
		{http.MethodPost, PathResolve, reqBody},
		{http.MethodPost, PathPreview, reqBody},
	}
	cases := []struct {
		name   string
		h      chi.Router
		hdr    map[string]string
		reveal bool
	}{
		{"auth off (dev)", mk(nil), nil, false},
		{"auth off, callback token (a node)", mk(nil), tokenHdr(), true},
		{"auth on, bearer", mk(newPublicAuth()), map[string]string{"Authorization": "Bearer " + apiBearer}, true},
		{"auth on, callback token (a node)", mk(newPublicAuth()), tokenHdr(), false}, // refused before: 130401
	}
	for _, c := range cases {
		for _, rd := range reads {
			rec := do(c.h, rd.method, rd.target, rd.body, c.hdr)
			body := rec.Body.String()
			if c.name == "auth on, callback token (a node)" {
				if retCode(t, rec) != envelope.CodeAuth {
					t.Fatalf("%s %s %s: %s", c.name, rd.method, rd.target, body)
				}
				continue
			}
			if code := retCode(t, rec); code != envelope.CodeSuccess {
				t.Fatalf("%s %s %s: ret_code %d %s", c.name, rd.method, rd.target, code, body)
			}
			for _, secret := range []string{dlSecret, imgSecret} {
				if strings.Contains(body, secret) != c.reveal {
					t.Errorf("%s: %s %s: shows %s = %v, want %v\n%s", c.name, rd.method, rd.target, secret, !c.reveal, c.reveal, body)
				}
			}
			if !c.reveal && !strings.Contains(body, "REDACTED") {
				t.Errorf("%s: %s %s: nothing marked as redacted:\n%s", c.name, rd.method, rd.target, body)
			}
			if !c.reveal && !strings.Contains(body, "artifact_id=rfs-1") {
				t.Errorf("%s: %s %s: the artifact URL lost more than its token:\n%s", c.name, rd.method, rd.target, body)
			}
		}
	}
	// The artifact view never shows the row's token, whoever asks.
	for _, c := range cases[:3] {
		rec := do(c.h, http.MethodGet, PathRootfsArtifact+"?artifact_id=rfs-1", "", c.hdr)
		if strings.Contains(rec.Body.String(), testArtifact.DownloadToken) {
			t.Errorf("%s: rootfs-artifact shows the download token", c.name)
		}
		rec = do(c.h, http.MethodGet, PathFromImage+"?job_id=job-1", "", c.hdr)
		if strings.Contains(rec.Body.String(), testArtifact.DownloadToken) {
			t.Errorf("%s: the job view shows the download token", c.name)
		}
	}
}

// TestLogsHoldNoCredentials: the master's log lines for refused public
// requests and failed proxying name the reason, never the bearer token,
// the signature, the secret key or an artifact's download token (a query
// parameter and a header of the proxied download).
func TestLogsHoldNoCredentials(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	var logs strings.Builder
	h, err := New(Config{Token: testToken, TemplateCenterURL: deadURL, PublicAuth: newPublicAuth(),
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	const dl = "download-token-in-a-url-789"
	do(h, http.MethodGet, PathDownload+"?artifact_id=rfs-1&token="+dl, "", map[string]string{"X-Cube-Artifact-Token": dl})
	do(h, http.MethodGet, PathTemplate, "", map[string]string{"Authorization": "Bearer " + apiBearer + "-but-wrong"})
	req := httptest.NewRequest(http.MethodGet, PathTemplate, nil)
	auth.SetSigned(req.Header, apiUser, apiSecret+"-wrong", "log-nonce", "sha256", authNow)
	h.ServeHTTP(httptest.NewRecorder(), req)
	req2 := httptest.NewRequest(http.MethodGet, PathCompat, nil)
	auth.SetSigned(req2.Header, apiUser, apiSecret, "log-nonce-2", "sha256", authNow)
	h.ServeHTTP(httptest.NewRecorder(), req2) // authenticated, then the proxy fails
	out := logs.String()
	if !strings.Contains(out, "public API request refused") || !strings.Contains(out, "proxy to template center failed") {
		t.Fatalf("the refusals and proxy failures were not logged:\n%s", out)
	}
	for what, s := range map[string]string{"download token": dl, "bearer token": apiBearer, "secret key": apiSecret,
		"signature": req.Header.Get(auth.HeaderSignature), "good signature": req2.Header.Get(auth.HeaderSignature)} {
		if strings.Contains(out, s) {
			t.Errorf("the log holds the %s:\n%s", what, out)
		}
	}
}
