package cubeapi

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

func TestPublicRoutes(t *testing.T) {
	type check func(t *testing.T, body map[string]any, svc *services)
	tests := []struct {
		name, method, target, body string
		host                       string
		err                        error // returned by the service
		nilServices                bool
		wantCode                   int
		wantCall                   string   // "" = no service call
		wantCalls                  []string // every call, in order (then wantCall is the first)
		check                      check
	}{
		{name: "create", method: "POST", target: PathFromImage, host: "master.example:8089",
			body:     `{"requestID":"r-1","source_image_ref":"nginx:1","writable_layer_size":"20Gi","exposed_ports":[80],"some_future_field":true}`,
			wantCode: 200, wantCall: "CreateFromImage",
			check: func(t *testing.T, b map[string]any, svc *services) {
				job := b["job"].(map[string]any)
				art := job["artifact"].(map[string]any)
				if b["requestID"] != "r-1" || job["job_id"] != "job-1" || job["status"] != "RUNNING" || job["pull_total_bytes"].(float64) != 100 ||
					art["ext4_sha256"] != "abc" || art["master_node_ip"] != "http://m:8089" {
					t.Fatalf("body %v", b)
				}
				if _, leaked := art["download_token"]; leaked {
					t.Fatal("download token shown")
				}
				if svc.baseURL != "http://master.example:8089" {
					t.Fatalf("base URL %q", svc.baseURL)
				}
				if req := svc.last.(*core.FromImageRequest); req.SourceImageRef != "nginx:1" || req.ExposedPorts[0] != 80 {
					t.Fatalf("request %+v", req)
				}
			}},
		{name: "create without requestID", method: "POST", target: PathFromImage, body: `{"source_image_ref":"nginx:1"}`, wantCode: 130400},
		{name: "create type error", method: "POST", target: PathFromImage, body: `{"requestID":"r","writable_layer_size":20}`, wantCode: 130400,
			check: func(t *testing.T, b map[string]any, _ *services) {
				if msg := b["ret"].(map[string]any)["ret_msg"].(string); !strings.Contains(msg, "writable_layer_size: expected string") {
					t.Fatalf("message %q", msg)
				}
			}},
		{name: "create empty body", method: "POST", target: PathFromImage, wantCode: 130400},
		{name: "create duplicate", method: "POST", target: PathFromImage, body: `{"requestID":"r"}`, err: core.ErrDuplicateTemplate, wantCode: 130400, wantCall: "CreateFromImage"},
		{name: "create conflict", method: "POST", target: PathFromImage, body: `{"requestID":"r"}`,
			err: &core.ActiveJobError{TemplateID: "tpl-1", JobID: "job-0", Status: core.JobRunning}, wantCode: 130409, wantCall: "CreateFromImage"},
		{name: "create busy", method: "POST", target: PathFromImage, body: `{"requestID":"r"}`, err: core.ErrBusy, wantCode: 130429, wantCall: "CreateFromImage"},
		{name: "create db error hidden", method: "POST", target: PathFromImage, body: `{"requestID":"r"}`,
			err: fmt.Errorf("dsn cube:pw@tcp(db): %w", core.ErrStoreNotInitialized), wantCode: 130594, wantCall: "CreateFromImage",
			check: func(t *testing.T, b map[string]any, _ *services) {
				if strings.Contains(fmt.Sprint(b), "pw@") {
					t.Fatal("DSN leaked")
				}
			}},
		{name: "create unconfigured", method: "POST", target: PathFromImage, body: `{"requestID":"r"}`, nilServices: true, wantCode: 130593},
		{name: "job get", method: "GET", target: PathFromImage + "?job_id=job-1", wantCode: 200, wantCall: "GetImageJob"},
		{name: "job get without id", method: "GET", target: PathFromImage, wantCode: 130400},
		{name: "job unknown is 130404", method: "GET", target: PathFromImage + "?job_id=x", err: fmt.Errorf("job x: %w", core.ErrNotFound), wantCode: 130404, wantCall: "GetImageJob"},
		{name: "redo", method: "POST", target: PathRedo, body: `{"requestID":"r","template_id":"tpl-1","failed_only":true,"distribution_scope":["n1"]}`,
			wantCode: 200, wantCall: "Redo", check: func(t *testing.T, _ map[string]any, svc *services) {
				if req := svc.last.(control.RedoRequest); !req.FailedOnly || req.DistributionScope[0] != "n1" {
					t.Fatalf("redo %+v", req)
				}
			}},
		{name: "redo without template", method: "POST", target: PathRedo, body: `{"requestID":"r"}`, wantCode: 130400},
		{name: "redo in progress", method: "POST", target: PathRedo, body: `{"requestID":"r","template_id":"t"}`, err: core.ErrAttemptInProgress, wantCode: 130409, wantCall: "Redo"},
		{name: "migrate", method: "POST", target: PathMigrate, body: `{"requestID":"r","template_id":"tpl-1"}`, wantCode: 200, wantCall: "Migrate"},
		{name: "migrate not ready", method: "POST", target: PathMigrate, body: `{"template_id":"t"}`, err: core.ErrTemplateNotReady, wantCode: 130400, wantCall: "Migrate"},
		{name: "migrate get", method: "GET", target: PathMigrate + "?job_id=j", wantCode: 200, wantCall: "GetMigrateJob"},
		{name: "migrate get without id", method: "GET", target: PathMigrate, wantCode: 130400},
		{name: "list", method: "GET", target: PathTemplate, wantCode: 200, wantCall: "ListTemplates",
			check: func(t *testing.T, b map[string]any, _ *services) {
				it := b["data"].([]any)[0].(map[string]any)
				if it["template_id"] != "tpl-1" || it["created_at"] != "2026-01-02T02:04:05Z" || it["image_info"] != "nginx:1@sha256:abc" ||
					it["job_id"] != "job-1" || it["backend"] != "s3" || it["storage_backend"] != "s3" {
					t.Fatalf("item %v", it)
				}
			}},
		{name: "get one", method: "GET", target: PathTemplate + "?template_id=tpl-1", wantCode: 200, wantCall: "GetTemplate",
			check: func(t *testing.T, b map[string]any, svc *services) {
				if svc.last != "tpl-1" || b["create_request"] != nil || b["replicas"].([]any)[0].(map[string]any)["node_id"] != "n1" ||
					b["job_id"] != "job-1" {
					t.Fatalf("body %v", b)
				}
			}},
		{name: "get one with request", method: "GET", target: PathTemplate + "?template_id=tpl-1&include_request=1", wantCode: 200, wantCall: "GetTemplate",
			check: func(t *testing.T, b map[string]any, _ *services) {
				if b["create_request"].(map[string]any)["annotations"] == nil {
					t.Fatalf("create_request %v", b["create_request"])
				}
			}},
		{name: "create template", method: "POST", target: PathTemplate,
			body:     `{"requestID":"r-7","annotations":{"cube.master.appsnapshot.template.id":"tpl-sync"},"timeout":30,"future":{"x":1}}`,
			wantCode: 200, wantCall: "CreateTemplate",
			check: func(t *testing.T, b map[string]any, svc *services) {
				if b["requestID"] != "r-7" || b["template_id"] != "tpl-sync" || b["instance_type"] != "cubebox" || b["version"] != "v2" ||
					b["status"] != "PARTIALLY_READY" || b["last_error"] != "node n2: boom" {
					t.Fatalf("body %v", b)
				}
				reps := b["replicas"].([]any)
				if len(reps) != 2 || reps[0].(map[string]any)["snapshot_path"] != "/snap/n1" ||
					reps[1].(map[string]any)["last_error_phase"] != "SNAPSHOTTING" {
					t.Fatalf("replicas %v", reps)
				}
				// The service gets the body as sent, unknown fields included.
				if got := svc.last.(string); !strings.Contains(got, `"future":{"x":1}`) || !strings.Contains(got, `"timeout":30`) {
					t.Fatalf("service got %s", got)
				}
			}},
		{name: "create template without id", method: "POST", target: PathTemplate, body: `{"requestID":"r-6"}`,
			err: core.ErrTemplateIDRequired, wantCode: 130400, wantCall: "CreateTemplate",
			check: func(t *testing.T, b map[string]any, _ *services) {
				if b["requestID"] != "r-6" {
					t.Fatalf("body %v", b)
				}
			}},
		{name: "create template duplicate", method: "POST", target: PathTemplate, body: `{}`, err: core.ErrDuplicateTemplate, wantCode: 130400, wantCall: "CreateTemplate"},
		{name: "create template no nodes", method: "POST", target: PathTemplate, body: `{}`, err: core.ErrNoTemplateNodes, wantCode: 130400, wantCall: "CreateTemplate"},
		{name: "create template job active", method: "POST", target: PathTemplate, body: `{}`,
			err: &core.ActiveJobError{TemplateID: "tpl-1", JobID: "job-0", Status: core.JobRunning}, wantCode: 130409, wantCall: "CreateTemplate"},
		{name: "create template malformed", method: "POST", target: PathTemplate, body: `{"annotations":`, wantCode: 130400},
		{name: "create template empty body", method: "POST", target: PathTemplate, wantCode: 130400},
		{name: "create template too large", method: "POST", target: PathTemplate,
			body: `{"pad":"` + strings.Repeat("a", 1<<20) + `"}`, wantCode: 130400},
		{name: "create template unconfigured", method: "POST", target: PathTemplate, body: `{}`, nilServices: true, wantCode: 130593},
		{name: "get unknown", method: "GET", target: PathTemplate + "?template_id=nope", err: core.ErrNotFound, wantCode: 130404, wantCall: "GetTemplate"},
		{name: "delete", method: "DELETE", target: PathTemplate, body: `{"RequestID":"r-9","template_id":"tpl-1","sync":true}`, wantCode: 200, wantCall: "DeleteTemplate",
			check: func(t *testing.T, b map[string]any, _ *services) {
				if b["requestID"] != "r-9" || b["template_id"] != "tpl-1" {
					t.Fatalf("body %v", b)
				}
			}},
		{name: "delete lowercase requestID", method: "DELETE", target: PathTemplate, body: `{"requestID":"r-8","template_id":"tpl-1"}`, wantCode: 200, wantCall: "DeleteTemplate",
			check: func(t *testing.T, b map[string]any, _ *services) {
				if b["requestID"] != "r-8" {
					t.Fatalf("body %v", b)
				}
			}},
		{name: "delete without id", method: "DELETE", target: PathTemplate, body: `{"RequestID":"r"}`, wantCode: 130400},
		{name: "delete in use", method: "DELETE", target: PathTemplate, body: `{"template_id":"t"}`, err: core.ErrTemplateInUse, wantCode: 130409, wantCall: "DeleteTemplate"},
		{name: "alias set", method: "PUT", target: "/cube/template/tpl-1/alias", body: `{"alias":" web "}`, wantCode: 200, wantCalls: []string{"SetAlias", "GetTemplate"},
			check: func(t *testing.T, b map[string]any, svc *services) {
				// The answer is the whole template, read back after the write.
				if svc.aliasArg != "tpl-1=web" || b["alias"] != "web" || b["display_name"] != "web" || b["replicas"] == nil {
					t.Fatalf("alias %v %v", svc.aliasArg, b)
				}
			}},
		{name: "alias null clears", method: "PUT", target: "/cube/template/tpl-1/alias", body: `{"alias":null}`, wantCode: 200, wantCalls: []string{"SetAlias", "GetTemplate"},
			check: func(t *testing.T, _ map[string]any, svc *services) {
				if svc.aliasArg != "tpl-1=" {
					t.Fatalf("alias %v", svc.aliasArg)
				}
			}},
		{name: "alias absent clears", method: "PUT", target: "/cube/template/tpl-1/alias", body: `{}`, wantCode: 200, wantCalls: []string{"SetAlias", "GetTemplate"}},
		{name: "alias no body clears", method: "PUT", target: "/cube/template/tpl-1/alias", wantCode: 200, wantCalls: []string{"SetAlias", "GetTemplate"}},
		{name: "alias wrong type", method: "PUT", target: "/cube/template/tpl-1/alias", body: `{"alias":5}`, wantCode: 130400},
		{name: "component versions by alias", method: "GET", target: "/internal/meta/templates/web/component-versions", wantCode: 200, wantCall: "ComponentVersions",
			check: func(t *testing.T, b map[string]any, svc *services) {
				data := b["data"].(map[string]any)
				rep := data["replicas"].([]any)[0].(map[string]any)
				if svc.last != "tpl-1" || data["template_id"] != "tpl-1" || rep["node_id"] != "n1" || rep["agent_version"] != "0.4.2" ||
					rep["guest_image_version"] != "g1" || rep["kernel_version"] != "6.6.30" || rep["shim_version"] != "s7" || rep["status"] != "READY" {
					t.Fatalf("body %v", b)
				}
			}},
		{name: "component versions of an unknown template", method: "GET", target: "/internal/meta/templates/tpl-9/component-versions",
			err: fmt.Errorf("template tpl-9: %w", core.ErrNotFound), wantCode: 130404, wantCall: "ComponentVersions"},
		{name: "alias taken", method: "PUT", target: "/cube/template/tpl-1/alias", body: `{"alias":"web"}`, err: core.ErrConflict, wantCode: 130409, wantCall: "SetAlias"},
		{name: "alias moves only to a READY template", method: "PUT", target: "/cube/template/tpl-1/alias", body: `{"alias":"web"}`,
			err: fmt.Errorf("tpl-1 is PENDING: %w (%w)", core.ErrTemplateNotReady, core.ErrConflict), wantCode: 130409, wantCall: "SetAlias"},
		{name: "resolve alias", method: "GET", target: PathResolve + "?template=web", wantCode: 200, wantCall: "ResolveTemplate",
			check: func(t *testing.T, b map[string]any, svc *services) {
				req, _ := b["create_request"].(map[string]any)
				if svc.last != "web" || b["template_id"] != "tpl-1" || b["alias"] != "web" || b["status"] != "READY" || req["annotations"] == nil {
					t.Fatalf("last %v body %v", svc.last, b)
				}
			}},
		{name: "resolve trims", method: "GET", target: PathResolve + "?template=%20tpl-1%20", wantCode: 200, wantCall: "ResolveTemplate",
			check: func(t *testing.T, _ map[string]any, svc *services) {
				if svc.last != "tpl-1" {
					t.Fatalf("resolved %q", svc.last)
				}
			}},
		{name: "resolve without template", method: "GET", target: PathResolve, wantCode: 130400},
		{name: "resolve not ready", method: "GET", target: PathResolve + "?template=web",
			err:      fmt.Errorf("template tpl-1 has no READY replica on a healthy node: %w", core.ErrTemplateNotReady),
			wantCode: 130400, wantCall: "ResolveTemplate",
			check: func(t *testing.T, b map[string]any, _ *services) {
				if msg := b["ret"].(map[string]any)["ret_msg"].(string); !strings.Contains(msg, "no READY replica") {
					t.Fatalf("message %q", msg)
				}
			}},
		{name: "resolve unknown", method: "GET", target: PathResolve + "?template=nope", err: fmt.Errorf("template or alias \"nope\": %w", core.ErrNotFound),
			wantCode: 130404, wantCall: "ResolveTemplate"},
		{name: "resolve unconfigured", method: "GET", target: PathResolve + "?template=web", nilServices: true, wantCode: 130593},
		{name: "build status", method: "GET", target: "/cube/template/build/job-1/status", wantCode: 200, wantCall: "BuildStatus",
			check: func(t *testing.T, b map[string]any, _ *services) {
				if b["build_id"] != "job-1" || b["status"] != "building" || b["message"] != "PULLING" || b["progress"].(float64) != 12 {
					t.Fatalf("body %v", b)
				}
			}},
		{name: "build status unknown", method: "GET", target: "/cube/template/build/x/status", err: core.ErrNotFound, wantCode: 130404, wantCall: "BuildStatus"},
		{name: "rootfs artifact", method: "GET", target: PathRootfsArtifact + "?artifact_id=rfs-1", wantCode: 200, wantCall: "GetArtifact",
			check: func(t *testing.T, b map[string]any, _ *services) {
				job := b["job"].(map[string]any)
				if job["artifact_id"] != "rfs-1" || job["artifact_status"] != "READY" || job["artifact"].(map[string]any)["ext4_size_bytes"].(float64) != 4096 {
					t.Fatalf("body %v", b)
				}
				if strings.Contains(fmt.Sprint(b), "secret-download-token") {
					t.Fatal("download token shown")
				}
			}},
		{name: "rootfs artifact without id", method: "GET", target: PathRootfsArtifact, wantCode: 130400},
		{name: "rootfs artifact unknown", method: "GET", target: PathRootfsArtifact + "?artifact_id=x", err: core.ErrNotFound, wantCode: 130404, wantCall: "GetArtifact"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := &services{err: tc.err}
			s := svc
			if tc.nilServices {
				s = nil
			}
			h := newServer(t, s, "")
			rec := doHost(h, tc.method, tc.target, tc.body, tc.host, nil)
			if code := retCode(t, rec); code != tc.wantCode {
				t.Fatalf("ret_code %d, want %d: %s", code, tc.wantCode, rec.Body.String())
			}
			if tc.wantCalls != nil {
				if !slices.Equal(svc.calls, tc.wantCalls) {
					t.Fatalf("calls %v, want %v", svc.calls, tc.wantCalls)
				}
				tc.wantCall = tc.wantCalls[0]
				svc.calls = svc.calls[:1]
			}
			switch {
			case tc.wantCall == "" && len(svc.calls) != 0:
				t.Fatalf("service called: %v", svc.calls)
			case tc.wantCall != "" && (len(svc.calls) != 1 || svc.calls[0] != tc.wantCall):
				t.Fatalf("calls %v, want %s", svc.calls, tc.wantCall)
			}
			if tc.check != nil {
				tc.check(t, decodeMap(t, rec.Body.Bytes()), svc)
			}
		})
	}
}

func TestUnknownCubePath(t *testing.T) {
	h := newServer(t, &services{}, "")
	rec := do(h, "GET", "/cube/template/nope", "", nil)
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), `"ret_code":130404`) {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if rec := do(h, "GET", "/other", "", nil); rec.Code != 404 {
		t.Fatalf("%d", rec.Code)
	}
	if rec := do(h, "GET", "/notify/health", "", nil); rec.Code != 200 {
		t.Fatalf("health %d", rec.Code)
	}
}

// TestJobOfATemplate: GET from-image with template_id (an id or an alias)
// answers the template's latest job, as `tpl status <template>` asks.
func TestJobOfATemplate(t *testing.T) {
	svc := &services{}
	h := newServer(t, svc, "")
	rec := do(h, "GET", PathFromImage+"?template_id=web", "", nil)
	if code := retCode(t, rec); code != 200 {
		t.Fatalf("ret_code %d: %s", code, rec.Body)
	}
	if !slices.Equal(svc.calls, []string{"GetTemplate", "GetImageJob"}) || svc.last != "job-1" {
		t.Fatalf("calls %v (last %v), want the template tpl-1 read, then its job job-1", svc.calls, svc.last)
	}
	if job := decodeMap(t, rec.Body.Bytes())["job"].(map[string]any); job["job_id"] != "job-1" {
		t.Fatalf("job %v", job)
	}
	svc = &services{err: core.ErrNotFound}
	if code := retCode(t, do(newServer(t, svc, ""), "GET", PathFromImage+"?template_id=nope", "", nil)); code != 130404 {
		t.Fatalf("unknown template: ret_code %d, want 130404", code)
	}
}
