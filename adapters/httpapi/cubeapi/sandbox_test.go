package cubeapi

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestAliasesNameTemplates: GET, DELETE, the alias PUT, redo and migrate accept an alias
// wherever they accept a template id, as upstream's newest master does.
func TestAliasesNameTemplates(t *testing.T) {
	svc := &services{}
	h := newServer(t, svc, "")
	tests := []struct {
		method, target, body, wantCall, wantArg string
	}{
		{"GET", PathTemplate + "?template_id=web", "", "GetTemplate", "tpl-1"},
		{"DELETE", PathTemplate, `{"RequestID":"r","template_id":"web"}`, "DeleteTemplate", "tpl-1/"},
		{"PUT", "/cube/template/web/alias", `{"alias":"site"}`, "SetAlias", "tpl-1=site"},
		{"POST", PathRedo, `{"requestID":"r","template_id":"web"}`, "Redo", "tpl-1"},
		{"POST", PathMigrate, `{"requestID":"r","template_id":"web"}`, "Migrate", "tpl-1"},
	}
	for _, tc := range tests {
		svc.calls = nil
		rec := do(h, tc.method, tc.target, tc.body, nil)
		if code := retCode(t, rec); code != 200 {
			t.Fatalf("%s %s: ret_code %d: %s", tc.method, tc.target, code, rec.Body.String())
		}
		if len(svc.calls) == 0 || svc.calls[0] != tc.wantCall {
			t.Fatalf("%s %s: calls %v", tc.method, tc.target, svc.calls)
		}
		arg := svc.aliasArg
		switch last := svc.last.(type) {
		case string:
			if tc.wantCall != "SetAlias" {
				arg = last
			}
		case control.RedoRequest:
			arg = last.TemplateID
		case control.MigrateRequest:
			arg = last.TemplateID
		}
		if arg != tc.wantArg {
			t.Errorf("%s %s: service got %q, want %q", tc.method, tc.target, arg, tc.wantArg)
		}
		if tc.method == "DELETE" && decodeMap(t, rec.Body.Bytes())["template_id"] != "web" {
			t.Errorf("delete answer does not echo the caller's key: %s", rec.Body.String())
		}
	}
}

func TestResolveAndPreviewRoutes(t *testing.T) {
	svc := &services{}
	cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Catalog: svc,
		RenderCubelet: func(req *core.SandboxRequest) (any, error) {
			if req.Annotations["from"] != "template" {
				return nil, errors.New("not the merged request")
			}
			return map[string]any{"requestID": req.RequestID, "exposed_ports": []int{80}}, nil
		}}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"request_id":"r-1","annotations":{"cube.master.appsnapshot.template.id":"web"},"namespace":"tenant-a"}`

	b := decodeMap(t, do(h, "POST", PathResolve, body, nil).Body.Bytes())
	merged, _ := b["merged_request"].(map[string]any)
	if b["template_id"] != "tpl-1" || b["alias"] != "web" || merged["namespace"] != "tenant-a" || merged["requestID"] != "fresh-req" {
		t.Fatalf("resolve answer %v", b)
	}
	if got := svc.last.(*core.SandboxRequest); got.RequestID != "r-1" {
		t.Errorf("request_id spelling not read: %+v", got)
	}

	b = decodeMap(t, do(h, "POST", PathPreview, body, nil).Body.Bytes())
	api, _ := b["api_request"].(map[string]any)
	node, _ := b["cubelet_request"].(map[string]any)
	if b["requestID"] != "fresh-req" || api["requestID"] != "r-1" || b["merged_request"] == nil || node["requestID"] != "fresh-req" {
		t.Fatalf("preview answer %v", b)
	}

	// A request naming no template is previewed as is.
	svc.calls = nil
	rec := do(h, "POST", PathPreview, `{"requestID":"r-2","annotations":{"from":"template"},"containers":[{}]}`, nil)
	if code := retCode(t, rec); code != 200 || len(svc.calls) != 0 {
		t.Fatalf("preview without a template: %d %v %s", code, svc.calls, rec.Body.String())
	}
	// Resolution failures keep the envelope's code.
	svc.err = core.ErrTemplateNotReady
	if code := retCode(t, do(h, "POST", PathResolve, body, nil)); code != 130400 {
		t.Errorf("not ready: ret_code %d", code)
	}
	svc.err = core.ErrNotFound
	if code := retCode(t, do(h, "POST", PathPreview, body, nil)); code != 130404 {
		t.Errorf("unknown template: ret_code %d", code)
	}
	if code := retCode(t, do(h, "POST", PathResolve, `{"containers":`, nil)); code != 130400 {
		t.Errorf("bad body: ret_code %d", code)
	}
}

func TestCADownload(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cube-root-ca.crt"), []byte("CERT"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cube-root-ca.key"), []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Token: testToken, CADir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, file string
		hdr          map[string]string
		status       int
		body         string
	}{
		{"GET", "cube-root-ca.crt", nil, http.StatusOK, "CERT"},
		{"HEAD", "cube-root-ca.crt", nil, http.StatusOK, ""},
		{"GET", "cube-root-ca.key", nil, http.StatusUnauthorized, ""},
		{"GET", "cube-root-ca.key", map[string]string{auth.Header: "wrong"}, http.StatusUnauthorized, ""},
		{"GET", "cube-root-ca.key", tokenHdr(), http.StatusOK, "KEY"},
		{"GET", "passwd", nil, http.StatusNotFound, ""},
		{"GET", "..%2Fcube-root-ca.crt", nil, http.StatusNotFound, ""},
	}
	for _, tc := range tests {
		rec := do(h, tc.method, "/cube/ca/"+tc.file, "", tc.hdr)
		if rec.Code != tc.status {
			t.Errorf("%s %s: %d, want %d (%s)", tc.method, tc.file, rec.Code, tc.status, rec.Body.String())
			continue
		}
		if tc.body != "" && rec.Body.String() != tc.body {
			t.Errorf("%s %s: body %q", tc.method, tc.file, rec.Body.String())
		}
		if tc.method == "HEAD" && (rec.Header().Get("Content-Length") != "4" || rec.Body.Len() != 0) {
			t.Errorf("HEAD: %v %q", rec.Header(), rec.Body.String())
		}
	}
	// Missing on this master: a real 404.
	os.Remove(filepath.Join(dir, "cube-root-ca.crt"))
	if rec := do(h, "GET", "/cube/ca/cube-root-ca.crt", "", nil); rec.Code != http.StatusNotFound {
		t.Errorf("missing CA: %d", rec.Code)
	}
}
