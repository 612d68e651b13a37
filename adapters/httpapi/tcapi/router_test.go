package tcapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/internal/hostilehttp"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/openapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/routes"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
)

// TestTemplateCenterRoutesExcludeWritesAndCachedReads pins every method+path
// the templatecenter serves. Template writes (create, redo, migrate, delete,
// alias), job reads and anything that reaches a cubelet stay on cubemaster
// (seed §2.3, §4); the only writes here are the token-guarded internal API.
func TestTemplateCenterRoutesExcludeWritesAndCachedReads(t *testing.T) {
	want := []string{
		"GET /cube/template/artifact/download",
		"GET /cube/template/compat",
		"GET /health",
		"GET /metrics",
		"GET /openapi.json",
		"GET /ready",
		"HEAD /cube/template/artifact/download",
		"POST /cube/template/compat",
		"POST /tc/api/v1/artifact/delete",
		"POST /tc/api/v1/artifact/upload",
		"POST /tc/api/v1/build",
	}
	got, err := routes.Walk(New(Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("registered routes:\n got %q\nwant %q", got, want)
	}
	if table := routes.Keys(TemplateCenterRoutes()); !slices.Equal(table, want) {
		t.Fatalf("TemplateCenterRoutes() = %q, want %q", table, want)
	}
	for _, r := range TemplateCenterRoutes() {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Kind != routes.Internal && r.Pattern != PathCompat {
			t.Errorf("%s is a write outside the internal API", r.Key())
		}
		if r.Kind == routes.Internal && !strings.HasPrefix(r.Pattern, "/tc/api/v1/") && r.Pattern != PathCompat {
			t.Errorf("internal route %s outside /tc/api/v1", r.Key())
		}
		for _, banned := range []string{"from-image", "redo", "migrate", "alias", "build/", "rootfs-artifact", "snapshot", "sandbox"} {
			if strings.Contains(r.Pattern, banned) {
				t.Errorf("%s belongs on cubemaster", r.Key())
			}
		}
	}
}

// Internal routes fail closed and never answer 200 without the token.
func TestInternalRoutesRequireToken(t *testing.T) {
	b := &fakeBuilds{}
	cfgs := map[string]Config{
		"secret set":   {Token: testToken, Builds: b, Deleter: &fakeDeleter{}, Store: fileStore(t)},
		"secret unset": {Builds: b, Deleter: &fakeDeleter{}, Store: fileStore(t)},
	}
	for name, cfg := range cfgs {
		h := New(cfg)
		for _, r := range routes.OfKind(TemplateCenterRoutes(), routes.Internal) {
			for _, tok := range []string{"", "wrong"} {
				hdr := map[string]string{}
				if tok != "" {
					hdr["X-Cube-Template-Callback-Token"] = tok
				}
				rec := do(t, h, call{method: r.Method, target: r.Pattern + "?artifact_id=a&sha256=" + strings.Repeat("a", 64),
					body: bytes.NewBufferString(`{"job_id":"j","request":{},"artifact_id":"a"}`), header: hdr})
				want := http.StatusUnauthorized
				if name == "secret unset" {
					want = http.StatusServiceUnavailable
				}
				if rec.Code != want {
					t.Errorf("%s: %s token %q: %d, want %d", name, r.Key(), tok, rec.Code, want)
				}
			}
		}
	}
	if len(b.got) != 0 {
		t.Fatalf("an unauthenticated request reached the executor: %+v", b.got)
	}
}

func TestHealth(t *testing.T) {
	st := fileStore(t)
	tests := []struct {
		name string
		cfg  Config
		want int
	}{
		{"ready", Config{Store: st, Readiness: func(context.Context) error { return nil }}, 200},
		{"no readiness func", Config{Store: st}, 200},
		{"no store", Config{Readiness: func(context.Context) error { return nil }}, 503},
		{"nodemeta not initialised", Config{Store: st, Readiness: func(context.Context) error { return errors.New("node metadata not initialised") }}, 503},
	}
	for _, tc := range tests {
		rec := do(t, New(tc.cfg), call{method: http.MethodGet, target: "/health"})
		if rec.Code != tc.want {
			t.Errorf("%s: %d, want %d (%s)", tc.name, rec.Code, tc.want, rec.Body.String())
		}
	}
}

func TestMetricsRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.DataPlane)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Metrics: m, Gatherer: reg, Store: fileStore(t)})
	do(t, h, call{method: http.MethodGet, target: "/health"})
	rec := do(t, h, call{method: http.MethodGet, target: "/metrics"})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `cube_template_http_requests_total{code="200",method="GET",route="/health"} 1`) {
		t.Fatalf("metrics %d:\n%s", rec.Code, rec.Body.String())
	}
}

type fakeCompat struct {
	rep *core.CompatReport
	err error
	n   int
}

func (f *fakeCompat) Report(context.Context) (*core.CompatReport, error) { return f.rep, f.err }
func (f *fakeCompat) Rescan(context.Context) (*core.CompatReport, error) {
	f.n++
	return f.rep, f.err
}

func TestCompat(t *testing.T) {
	rep := &core.CompatReport{ManifestSource: "/etc/cube/release-manifest.json", ManifestFound: false,
		Templates: []core.TemplateCompat{{TemplateID: "tpl-1", Status: core.CompatUnknown}}}
	tests := []struct {
		name     string
		compat   Compat
		method   string
		body     string
		wantCode float64
	}{
		{"report", &fakeCompat{rep: rep}, http.MethodGet, "", 200},
		{"rescan", &fakeCompat{rep: rep}, http.MethodPost, `{"requestID":"r-1"}`, 200},
		{"rescan without body", &fakeCompat{rep: rep}, http.MethodPost, "", 200},
		{"rescan bad body", &fakeCompat{rep: rep}, http.MethodPost, `{"requestID":1}`, 130400},
		{"not configured", nil, http.MethodGet, "", 130593},
		{"store error hidden", &fakeCompat{err: fmt.Errorf("scan: %w", core.ErrStoreNotInitialized)}, http.MethodGet, "", 130594},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, New(Config{Token: testToken, Compat: tc.compat}), call{method: tc.method, target: PathCompat,
				body: strings.NewReader(tc.body), header: map[string]string{auth.Header: testToken}})
			if rec.Code != 200 {
				t.Fatalf("envelope route answered HTTP %d", rec.Code)
			}
			m := jsonBody(t, rec)
			if got := m["ret"].(map[string]any)["ret_code"].(float64); got != tc.wantCode {
				t.Fatalf("ret_code %v, want %v: %s", got, tc.wantCode, rec.Body.String())
			}
			if tc.wantCode == 200 {
				data := m["data"].(map[string]any)
				if data["manifest_found"] != false || len(data["templates"].([]any)) != 1 {
					t.Fatalf("data %v", data)
				}
			}
		})
	}
}

// TestOpenAPIDocumentsEveryRoute: /openapi.json documents exactly the
// registered routes.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	h := New(Config{})
	registered, err := routes.Walk(h)
	if err != nil {
		t.Fatal(err)
	}
	rec := do(t, h, call{method: http.MethodGet, target: PathOpenAPI})
	documented, err := openapi.Paths(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(registered, documented) {
		t.Fatalf("served %q\ndocumented %q", registered, documented)
	}
}

// TestReadyNamesEachCheck: /ready answers the master's document (one
// shape for both services), and a caller sending a token learns whether it
// is this service's: with different tokens neither side is ready.
func TestReadyNamesEachCheck(t *testing.T) {
	st := fileStore(t)
	up := func(context.Context) error { return nil }
	cases := []struct {
		name string
		cfg  Config
		hdr  map[string]string
		code int
		want string
	}{
		{"ready", Config{Store: st, Readiness: up}, nil, 200, `"database":{"status":"ok"}`},
		{"db down", Config{Store: st, Readiness: func(context.Context) error { return errors.New("db gone") }}, nil, 503,
			`"database":{"status":"failed","error":"not reachable"}`},
		{"no store", Config{}, nil, 503, `"artifact_store":{"status":"failed","error":"not attached"}`},
		{"same token", Config{Store: st, Readiness: up, Token: "tok-0123456789abcdef"}, map[string]string{auth.Header: "tok-0123456789abcdef"}, 200,
			`"callback_token":{"status":"ok"}`},
		{"another token", Config{Store: st, Readiness: up, Token: "tok-0123456789abcdef"}, map[string]string{auth.Header: "tok-fedcba9876543210"}, 503,
			`"callback_token":{"status":"failed","error":"does not match CUBE_TEMPLATE_CALLBACK_TOKEN here"}`},
	}
	for _, tc := range cases {
		rec := do(t, New(tc.cfg), call{method: http.MethodGet, target: PathReady, header: tc.hdr})
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, rec.Code, rec.Body, tc.code, tc.want)
		}
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		var doc wire.ReadyResponse
		if err := dec.Decode(&doc); err != nil || doc.Status == "" || len(doc.Checks) == 0 {
			t.Errorf("%s: not the readiness document (%v): %+v", tc.name, err, doc)
		}
	}
	if rec := do(t, New(cases[0].cfg), call{method: http.MethodGet, target: PathReady}); strings.Contains(rec.Body.String(), "callback_token") {
		t.Errorf("a caller without a token is told about it: %s", rec.Body)
	}
}

// TestReadinessHidesTheError: /health and /ready name the dependency that
// is not ready in fixed words. The database's error, which can carry its
// address, user and driver, goes to the log and never into the answer.
func TestReadinessHidesTheError(t *testing.T) {
	const secret = "dial tcp 10.1.2.3:3306: secret-host"
	cases := []struct {
		name string
		path string
		want string
	}{
		{"health", PathHealth, `{"error":"database: not reachable","status":"unavailable"}`},
		{"ready", PathReady, `"database":{"status":"failed","error":"not reachable"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := New(Config{Store: fileStore(t), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
				Readiness: func(context.Context) error { return fmt.Errorf("ping database: %w", errors.New(secret)) }})
			rec := do(t, h, call{method: http.MethodGet, target: tc.path})
			body := rec.Body.String()
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, tc.want) {
				t.Errorf("%d %s, want 503 with %s", rec.Code, body, tc.want)
			}
			for _, leak := range []string{"10.1.2.3", "3306", "secret-host", "dial tcp"} {
				if strings.Contains(body, leak) {
					t.Errorf("the answer quotes the error (%q): %s", leak, body)
				}
			}
			if !strings.Contains(logs.String(), secret) {
				t.Errorf("the error is not logged for the operator:\n%s", logs.String())
			}
		})
	}
}

// TestOpenAPIDeclaresSecurity: every operation says how it authenticates;
// the internal ones with the shared token, downloads with the artifact's.
func TestOpenAPIDeclaresSecurity(t *testing.T) {
	b, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range TemplateCenterRoutes() {
		sec, ok := doc.Paths[r.Pattern][strings.ToLower(r.Method)]["security"]
		if !ok {
			t.Errorf("%s declares no security", r.Key())
			continue
		}
		switch r.Kind {
		case routes.Internal:
			if !strings.Contains(string(sec), "callbackToken") {
				t.Errorf("%s: security %s, want the callback token", r.Key(), sec)
			}
		case routes.Download:
			if !strings.Contains(string(sec), "artifactToken") {
				t.Errorf("%s: security %s, want the artifact's token", r.Key(), sec)
			}
		}
	}
}

// TestHostileRequestsKeepMetricsSmall: methods of hundreds of KiB and
// random paths, sent without credentials, leave /metrics a few KiB with a
// bounded number of series: the method label is one of a fixed set and
// the route label a registered pattern or "unmatched" (404 and 405
// included). Before, each method became a label value kept for the life of
// the process.
func TestHostileRequestsKeepMetricsSmall(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.DataPlane)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Token: "internal-token-0123456789", Metrics: m, Gatherer: reg, Store: fileStore(t), Artifacts: &fakeLookup{}})
	s := hostilehttp.Flood(t, h, PathMetrics, 40, 300, "/", "/cube/template/", "/tc/api/v1/", PathDownload+"/", PathHealth)
	t.Logf("after the hostile requests: /metrics is %d bytes, %d HTTP series", s.Bytes, s.HTTPSeries)
	if s.Bytes > 64<<10 || s.HTTPSeries > 200 {
		t.Fatalf("after hostile requests /metrics is %d bytes with %d HTTP series (want at most 64 KiB and 200)", s.Bytes, s.HTTPSeries)
	}
	if !strings.Contains(s.Body, `method="OTHER"`) || !strings.Contains(s.Body, `route="unmatched"`) {
		t.Fatalf("hostile requests not counted under OTHER / unmatched:\n%.2000s", s.Body)
	}
}

// TestCompatNeedsTheInternalToken: the compat report names every template
// and node, so the data plane serves it only to internal callers (the
// master forwards its public, authenticated route with the token).
// Before, anyone who reached the data plane could read and rescan it.
func TestCompatNeedsTheInternalToken(t *testing.T) {
	rep := &core.CompatReport{Templates: []core.TemplateCompat{{TemplateID: "tpl-1", Status: core.CompatUnknown}}}
	for _, tc := range []struct {
		name   string
		cfg    Config
		header map[string]string
		want   int
	}{
		{"no token sent", Config{Token: testToken}, nil, http.StatusUnauthorized},
		{"wrong token", Config{Token: testToken}, map[string]string{auth.Header: "guess"}, http.StatusUnauthorized},
		{"no token configured", Config{}, nil, http.StatusServiceUnavailable},
		{"the token", Config{Token: testToken}, map[string]string{auth.Header: testToken}, http.StatusOK},
		{"insecure no-token mode", Config{InsecureNoToken: true}, nil, http.StatusOK},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			f := &fakeCompat{rep: rep}
			tc.cfg.Compat = f
			rec := do(t, New(tc.cfg), call{method: method, target: PathCompat, header: tc.header})
			if rec.Code != tc.want {
				t.Errorf("%s: %s: %d, want %d: %s", tc.name, method, rec.Code, tc.want, rec.Body)
			}
			if tc.want != http.StatusOK && (f.n != 0 || strings.Contains(rec.Body.String(), "tpl-1")) {
				t.Errorf("%s: %s: a refused caller rescanned or saw the report", tc.name, method)
			}
		}
	}
}
