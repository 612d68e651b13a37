package cubeapi

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/routes"
)

var wantRoutes = []string{
	"DELETE /cube/template",
	"GET /cube/ca/{filename}",
	"GET /cube/node",
	"GET /cube/placement/policy",
	"GET /cube/rootfs-artifact",
	"GET /cube/template",
	"GET /cube/template/artifact/chunks/data",
	"GET /cube/template/artifact/chunks/index",
	"GET /cube/template/artifact/download",
	"GET /cube/template/build/{build_id}/status",
	"GET /cube/template/compat",
	"GET /cube/template/from-image",
	"GET /cube/template/jobs",
	"GET /cube/template/jobs/log",
	"GET /cube/template/migrate",
	"GET /cube/template/resolve",
	"GET /cube/template/{template_id}/placement",
	"GET /internal/meta/templates/{template_id}/component-versions",
	"GET /metrics",
	"GET /notify/health",
	"GET /openapi.json",
	"GET /ready",
	"HEAD /cube/ca/{filename}",
	"HEAD /cube/template/artifact/download",
	"POST /cube/sandbox/preview",
	"POST /cube/template",
	"POST /cube/template/compat",
	"POST /cube/template/from-image",
	"POST /cube/template/migrate",
	"POST /cube/template/redo",
	"POST /cube/template/resolve",
	"POST /internal/template/jobs/{job_id}/status",
	"PUT /cube/placement/policy",
	"PUT /cube/template/{template_id}/alias",
}

func TestCubeMasterRoutes(t *testing.T) {
	got, err := routes.Walk(newServer(t, nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, wantRoutes) {
		t.Fatalf("registered:\n got %q\nwant %q", got, wantRoutes)
	}
	if table := routes.Keys(CubeMasterRoutes()); !slices.Equal(table, wantRoutes) {
		t.Fatalf("CubeMasterRoutes() = %q", table)
	}
}

// writeCalls are requests that change template state, with the service
// method each must reach locally.
var writeCalls = []struct {
	method, pattern, target, body, want string
}{
	{"POST", PathFromImage, PathFromImage, `{"requestID":"r","source_image_ref":"nginx:1","writable_layer_size":"20Gi"}`, "CreateFromImage"},
	{"POST", PathRedo, PathRedo, `{"requestID":"r","template_id":"tpl-1"}`, "Redo"},
	{"POST", PathMigrate, PathMigrate, `{"requestID":"r","template_id":"tpl-1"}`, "Migrate"},
	{"POST", PathTemplate, PathTemplate, `{"requestID":"r","annotations":{"cube.master.appsnapshot.template.id":"tpl-1"}}`, "CreateTemplate"},
	{"DELETE", PathTemplate, PathTemplate, `{"RequestID":"r","template_id":"tpl-1"}`, "DeleteTemplate"},
	{"PUT", PathAlias, "/cube/template/tpl-1/alias", `{"alias":"web"}`, "SetAlias"},
	{"PUT", PathPlacementPolicy, PathPlacementPolicy, `{"per_node_max_templates":2}`, "SetPolicy"},
	// Not writes, but POSTs: resolution reads this master's own store.
	{"POST", PathResolve, PathResolve, `{"annotations":{"cube.master.appsnapshot.template.id":"web"}}`, "ResolveSandboxRequest"},
	{"POST", PathPreview, PathPreview, `{"annotations":{"cube.master.appsnapshot.template.id":"web"}}`, "ResolveSandboxRequest"},
}

// TestCubeRoutesTemplateWritesStayOnCubeMaster: every template write is
// served by cubemaster's own services; none is forwarded to the template
// center, which owns no business state and has no cubelet connections.
func TestCubeRoutesTemplateWritesStayOnCubeMaster(t *testing.T) {
	tc := &fakeTC{}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()
	svc := &services{}
	h := newServer(t, svc, tcSrv.URL)

	for _, c := range writeCalls {
		before := len(svc.calls)
		if code := retCode(t, do(h, c.method, c.target, c.body, nil)); code != 200 {
			t.Fatalf("%s %s: ret_code %d", c.method, c.target, code)
		}
		// The first service call is the route's own; the alias PUT then
		// reads the template back.
		if len(svc.calls) <= before || svc.calls[before] != c.want {
			t.Fatalf("%s %s reached %v, want %s", c.method, c.target, svc.calls[before:], c.want)
		}
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.reqs) != 0 {
		t.Fatalf("template writes reached the template center: %v", tc.reqs[0].URL)
	}
	// Every public write route in the table is one of the calls above, and
	// no write is proxied except the compat rescan (compat columns only).
	for _, r := range CubeMasterRoutes() {
		write := r.Method != http.MethodGet && r.Method != http.MethodHead
		switch {
		case write && r.Kind == routes.Public:
			found := false
			for _, c := range writeCalls {
				if c.method == r.Method && c.pattern == r.Pattern {
					found = true
				}
			}
			if !found {
				t.Errorf("write route %s has no locality check", r.Key())
			}
		case write && r.Kind == routes.Proxied && r.Pattern != PathCompat:
			t.Errorf("write route %s is proxied", r.Key())
		}
	}
}

// TestCubeRoutesTemplateProxyRemainder: exactly compat and the artifact
// download are forwarded, with path and query intact, the internal token
// stripped (compat is sent on with the master's own, which the data plane
// requires there), and the template center's statuses (302 to a presigned
// URL, 403) passed through untouched.
func TestCubeRoutesTemplateProxyRemainder(t *testing.T) {
	want := []string{
		"GET /cube/template/artifact/chunks/data",
		"GET /cube/template/artifact/chunks/index",
		"GET /cube/template/artifact/download",
		"GET /cube/template/compat",
		"HEAD /cube/template/artifact/download",
		"POST /cube/template/compat",
	}
	if got := routes.Keys(routes.OfKind(CubeMasterRoutes(), routes.Proxied)); !slices.Equal(got, want) {
		t.Fatalf("proxied routes %q, want %q", got, want)
	}

	tc := &fakeTC{}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()
	svc := &services{}
	h := newServer(t, svc, tcSrv.URL)

	leak := map[string]string{auth.Header: testToken}
	rec := do(h, "GET", PathDownload+"?artifact_id=rfs-1&token=good", "", leak)
	if rec.Code != http.StatusFound || !strings.HasPrefix(rec.Header().Get("Location"), "https://bucket.s3.example/") ||
		rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("download: %d %v", rec.Code, rec.Header())
	}
	if rec := do(h, "GET", PathDownload+"?artifact_id=rfs-1&token=bad", "", nil); rec.Code != http.StatusForbidden {
		t.Fatalf("bad token: %d", rec.Code)
	}
	if rec := do(h, "HEAD", PathDownload+"?artifact_id=rfs-1&token=good", "", nil); rec.Code != http.StatusFound {
		t.Fatalf("HEAD: %d", rec.Code)
	}
	// A caller's own (wrong) token header is replaced by the master's.
	if code := retCode(t, do(h, "GET", PathCompat, "", map[string]string{auth.Header: "caller-guess"})); code != 200 {
		t.Fatalf("compat GET ret_code %d", code)
	}
	if code := retCode(t, do(h, "POST", PathCompat, `{"requestID":"r"}`, nil)); code != 200 {
		t.Fatalf("compat POST ret_code %d", code)
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.reqs) != 5 {
		t.Fatalf("template center saw %d requests, want 5", len(tc.reqs))
	}
	first := tc.reqs[0]
	if first.URL.Path != PathDownload || first.URL.RawQuery != "artifact_id=rfs-1&token=good" {
		t.Fatalf("forwarded %s?%s", first.URL.Path, first.URL.RawQuery)
	}
	for _, r := range tc.reqs {
		// Downloads carry their artifact's token only; compat, which the
		// data plane serves to internal callers only, the master's.
		want := ""
		if r.URL.Path == PathCompat {
			want = testToken
		}
		if got := r.Header.Get(auth.Header); got != want {
			t.Fatalf("%s %s forwarded with internal token %q, want %q", r.Method, r.URL.Path, got, want)
		}
		if r.Header.Get("X-Forwarded-For") == "" {
			t.Fatal("X-Forwarded-For not set")
		}
	}
	if tc.reqs[4].Method != "POST" || tc.reqs[4].URL.Path != PathCompat {
		t.Fatalf("compat rescan forwarded as %s %s", tc.reqs[4].Method, tc.reqs[4].URL.Path)
	}
	if len(svc.calls) != 0 {
		t.Fatalf("proxied routes touched local services: %v", svc.calls)
	}
}

func TestProxyFailures(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	for name, url := range map[string]string{"unreachable": deadURL, "unconfigured": ""} {
		h := newServer(t, &services{}, url)
		rec := do(h, "GET", PathDownload+"?artifact_id=a&token=t", "", nil)
		if rec.Code != http.StatusBadGateway && rec.Code != http.StatusServiceUnavailable {
			t.Errorf("%s download: %d", name, rec.Code)
		}
		if code := retCode(t, do(h, "GET", PathCompat, "", nil)); code != 130593 {
			t.Errorf("%s compat: ret_code %d", name, code)
		}
	}
	if _, err := New(Config{TemplateCenterURL: "ftp://x"}); err == nil {
		t.Fatal("bad template center URL accepted")
	}
}

// TestCubeRoutesResolveStaysLocal: template resolution reads this master's
// store; it is never forwarded to the template center.
func TestCubeRoutesResolveStaysLocal(t *testing.T) {
	tc := &fakeTC{}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()
	svc := &services{}
	h := newServer(t, svc, tcSrv.URL)
	if code := retCode(t, do(h, "GET", PathResolve+"?template=web", "", nil)); code != 200 {
		t.Fatalf("resolve ret_code %d", code)
	}
	if !slices.Equal(svc.calls, []string{"ResolveTemplate"}) {
		t.Fatalf("calls %v", svc.calls)
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.reqs) != 0 {
		t.Fatalf("resolve reached the template center: %v", tc.reqs[0].URL)
	}
	for _, r := range CubeMasterRoutes() {
		if r.Pattern == PathResolve && r.Kind != routes.Public {
			t.Fatalf("%s is %v, want a public master-local route", r.Key(), r.Kind)
		}
	}
}
