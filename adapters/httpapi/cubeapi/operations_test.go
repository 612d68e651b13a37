package cubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/internal/hostilehttp"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/openapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/routes"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

// TestOpenAPIDocumentsEveryRoute: the document served at /openapi.json has
// exactly the routes the router registers, each with a summary.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	h := newServer(t, &services{}, "")
	registered, err := routes.Walk(h)
	if err != nil {
		t.Fatal(err)
	}
	rec := do(h, http.MethodGet, PathOpenAPI, "", nil)
	if rec.Code != 200 {
		t.Fatalf("GET /openapi.json: %d", rec.Code)
	}
	documented, err := openapi.Paths(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range registered {
		if !slices.Contains(documented, k) {
			t.Errorf("%s is served but not documented", k)
		}
	}
	for _, k := range documented {
		if !slices.Contains(registered, k) {
			t.Errorf("%s is documented but not served", k)
		}
	}
	for _, op := range Operations() {
		if op.Summary == "" || len(op.Responses) == 0 {
			t.Errorf("%s has no summary or responses", op.Key())
		}
	}
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Components.Schemas["JobInfo"] == nil {
		t.Fatalf("schemas missing JobInfo (%v): %s", err, rec.Body.String()[:200])
	}
}

// TestReadyReportsEachDependency: /ready names each dependency and, for one
// that fails, says so in the check's fixed words. The check's error, which
// can carry an address, a user or a driver's message, is logged and never
// answered.
func TestReadyReportsEachDependency(t *testing.T) {
	const secret = "dial tcp 10.1.2.3:3306: secret-host"
	cases := []struct {
		name   string
		checks []Check
		code   int
		want   []string
		hidden []string // in the log, never in the answer
	}{
		{"all pass", []Check{
			{Name: "database", Run: func(context.Context) (string, error) { return "sqlite", nil }},
			{Name: "nodes", Run: func(context.Context) (string, error) { return "1/1 healthy", nil }},
		}, 200, []string{`"status":"ready"`, `"detail":"1/1 healthy"`}, nil},
		{"data plane down", []Check{
			{Name: "database", Run: func(context.Context) (string, error) { return "", nil }},
			{Name: "data_plane", Failure: "not reachable", Run: func(context.Context) (string, error) { return "", errors.New("connection refused") }},
		}, 503, []string{`"status":"unavailable"`, `"data_plane":{"status":"failed","error":"not reachable"}`}, []string{"connection refused"}},
		{"database down", []Check{
			{Name: "database", Failure: "not reachable", Run: func(context.Context) (string, error) {
				return "mysql", fmt.Errorf("ping: %w", errors.New(secret))
			}},
		}, 503, []string{`"database":{"status":"failed","detail":"mysql","error":"not reachable"}`}, []string{secret}},
		{"failure words default", []Check{
			{Name: "nodes", Run: func(context.Context) (string, error) {
				return "0/2 healthy", errors.New("no node is healthy at 10.1.2.3")
			}},
		}, 503, []string{`"nodes":{"status":"failed","detail":"0/2 healthy","error":"not ready"}`}, []string{"no node is healthy at 10.1.2.3"}},
		{"nothing to check", nil, 200, []string{`"status":"ready"`}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			h, err := New(Config{Token: testToken, Readiness: tc.checks, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			rec := do(h, http.MethodGet, PathReady, "", nil)
			if rec.Code != tc.code {
				t.Fatalf("code %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			for _, w := range tc.want {
				if !strings.Contains(rec.Body.String(), w) {
					t.Errorf("body %s lacks %s", rec.Body, w)
				}
			}
			for _, e := range tc.hidden {
				if strings.Contains(rec.Body.String(), e) || strings.Contains(rec.Body.String(), "10.1.2.3") {
					t.Errorf("body %s quotes the error %q", rec.Body, e)
				}
				if !strings.Contains(logs.String(), e) {
					t.Errorf("the error %q is not logged:\n%s", e, logs.String())
				}
			}
			if health := do(h, http.MethodGet, PathHealth, "", nil); health.Code != 200 {
				t.Errorf("/notify/health = %d; it must not depend on anything", health.Code)
			}
		})
	}
}

// TestInternalErrorsNameKnownCauses: a data plane that refuses the token or
// cannot be reached is named in ret_msg, never a bare "internal error".
func TestInternalErrorsNameKnownCauses(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"token refused", fmt.Errorf("job j: forward build: %w", &wire.StatusError{Op: "submit build j", StatusCode: 401}), "CUBE_TEMPLATE_CALLBACK_TOKEN"},
		{"unreachable", fmt.Errorf("forward build: %w", &url.Error{Op: "Post", URL: "http://127.0.0.1:1/tc/api/v1/build", Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}), "unreachable (dial tcp 127.0.0.1:1: connect: connection refused)"},
		{"unavailable", &wire.StatusError{Op: "submit build j", StatusCode: 503}, "is unavailable (HTTP 503)"},
		{"unknown stays generic", errors.New("disk on fire"), `"ret_msg":"internal error"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Token: testToken, TemplateCenterURL: "http://tc:8090", Logger: slog.New(slog.DiscardHandler)}
			svc := &services{err: tc.err}
			cfg.Reports, cfg.Jobs, cfg.Migrations, cfg.Catalog, cfg.Artifacts = svc, svc, svc, svc, svc
			h, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := do(h, http.MethodPost, PathFromImage, `{"requestID":"r","source_image_ref":"nginx:1","writable_layer_size":"1Gi"}`, nil)
			body := rec.Body.String()
			if !strings.Contains(body, `"ret_code":130593`) || !strings.Contains(body, tc.want) {
				t.Fatalf("body %s, want 130593 naming %q", body, tc.want)
			}
			if strings.Contains(body, "disk on fire") {
				t.Fatal("an unknown internal error leaked its detail")
			}
		})
	}
}

func TestMigrateRefusesAnUnconfiguredBackend(t *testing.T) {
	cases := []struct {
		configured, requested string
		code                  string
	}{
		{"", "s3", "130400"},
		{"file", "s3", "130400"},
		{"s3", "s3", "200"},
		{"file", "", "200"},
		{"file", "local", "200"},
	}
	for _, tc := range cases {
		svc := &services{}
		cfg := Config{Token: testToken, StorageBackend: tc.configured, Logger: slog.New(slog.DiscardHandler)}
		cfg.Reports, cfg.Jobs, cfg.Migrations, cfg.Catalog, cfg.Artifacts = svc, svc, svc, svc, svc
		h, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rec := do(h, http.MethodPost, PathMigrate, `{"requestID":"r","template_id":"tpl-1","backend":"`+tc.requested+`"}`, nil)
		if !strings.Contains(rec.Body.String(), `"ret_code":`+tc.code) {
			t.Errorf("store %q, backend %q: %s, want ret_code %s", tc.configured, tc.requested, rec.Body, tc.code)
		}
		if tc.code != "200" && (len(svc.calls) != 0 || !strings.Contains(rec.Body.String(), "CUBE_S3_ENDPOINT")) {
			t.Errorf("refused migrate reached the service (%v) or does not name the settings: %s", svc.calls, rec.Body)
		}
	}
}

// TestEnvelopeErrorsAreCounted: public routes answer HTTP 200, so failures
// are counted by ret_code per route.
func TestEnvelopeErrorsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.ControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	svc := &services{}
	cfg := Config{Token: testToken, Metrics: m, Gatherer: reg, Logger: slog.New(slog.DiscardHandler)}
	cfg.Reports, cfg.Jobs, cfg.Migrations, cfg.Catalog, cfg.Artifacts = svc, svc, svc, svc, svc
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	do(h, http.MethodGet, PathFromImage, "", nil) // no job_id: 130400
	do(h, http.MethodGet, PathFromImage, "", nil)
	do(h, http.MethodGet, PathTemplate, "", nil) // success, not counted
	rec := do(h, http.MethodGet, PathMetrics, "", nil)
	body, _ := io.ReadAll(rec.Body)
	want := `cube_template_http_errors_total{code="130400",method="GET",route="/cube/template/from-image"} 2`
	if !strings.Contains(string(body), want) {
		t.Fatalf("/metrics lacks %s:\n%s", want, body)
	}
	if strings.Contains(string(body), `route="/cube/template"}`) && strings.Contains(string(body), `http_errors_total{code="200"`) {
		t.Fatal("a success was counted as an error")
	}
}

// TestOpenAPIDeclaresHowEachRouteAuthenticates: every operation carries
// "security", matching how the router guards it: the public API's bearer
// token or upstream's signed headers, the shared token, an artifact's own
// token, or nothing; every scheme it names is declared.
func TestOpenAPIDeclaresHowEachRouteAuthenticates(t *testing.T) {
	b, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	public := `[{"bearerAuth":[]},{"cubeNonce":[],"cubeSgnMethod":[],"cubeSignature":[],"cubeTimestamp":[],"cubeUserID":[]}]`
	want := map[routes.Kind]string{
		routes.Public:   public,
		routes.Internal: `[{"callbackToken":[]}]`,
		routes.Ops:      `[]`,
	}
	for _, r := range CubeMasterRoutes() {
		w, ok := want[r.Kind]
		switch {
		case r.Pattern == PathCompat: // proxied, behind the public credentials
			w = public
		case r.Pattern == PathDownload:
			w = `[{"artifactToken":[]}]`
		case r.Pattern == PathCA: // the certificate is anyone's, the key needs the token
			w = `[{},{"callbackToken":[]}]`
		case !ok:
			t.Fatalf("%s: no expectation for kind %s", r.Key(), r.Kind)
		}
		sec, present := doc.Paths[r.Pattern][strings.ToLower(r.Method)]["security"]
		var got any
		if present {
			json.Unmarshal(sec, &got)
		}
		norm, _ := json.Marshal(got)
		if !present || string(norm) != w {
			t.Errorf("%s: security %s (present %v), want %s", r.Key(), norm, present, w)
		}
		var reqs []map[string]any
		json.Unmarshal(sec, &reqs)
		for _, req := range reqs {
			for name := range req {
				if doc.Components.SecuritySchemes[name] == nil {
					t.Errorf("%s names scheme %s, which is not declared", r.Key(), name)
				}
			}
		}
	}
}

// TestHostileRequestsKeepMetricsSmall: methods of hundreds of KiB and
// random paths, sent without credentials to the public listener, leave
// /metrics a few KiB with a bounded number of series (see
// metrics.MethodLabel). Before, 40 methods of 512 KiB made one scrape
// hundreds of MB.
func TestHostileRequestsKeepMetricsSmall(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.ControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	svc := &services{}
	cfg := Config{Token: testToken, Metrics: m, Gatherer: reg, Logger: slog.New(slog.DiscardHandler)}
	cfg.Reports, cfg.Jobs, cfg.Migrations, cfg.Catalog, cfg.Artifacts = svc, svc, svc, svc, svc
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := hostilehttp.Flood(t, h, PathMetrics, 40, 300, "/", "/cube/", "/cube/template/", "/cube/template/build/", "/internal/template/jobs/", "/notify/")
	t.Logf("after the hostile requests: /metrics is %d bytes, %d HTTP series", s.Bytes, s.HTTPSeries)
	if s.Bytes > 64<<10 || s.HTTPSeries > 200 {
		t.Fatalf("after hostile requests /metrics is %d bytes with %d HTTP series (want at most 64 KiB and 200)", s.Bytes, s.HTTPSeries)
	}
	if !strings.Contains(s.Body, `method="OTHER"`) || !strings.Contains(s.Body, `route="unmatched"`) {
		t.Fatalf("hostile requests not counted under OTHER / unmatched:\n%.2000s", s.Body)
	}
}
