package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
)

// fakeMaster answers the public template routes with canned envelopes. Job
// "job-ok" is RUNNING for two polls and then READY; "job-fail" is FAILED on
// its second poll.
type fakeMaster struct {
	t      *testing.T
	listed bool // requests() keeps template listings
	mu     sync.Mutex
	polls  map[string]int
	reqs   []recorded
}

type recorded struct {
	Method, Path, Query, Caller string
	Body                        map[string]any
	// Envd is the file of a multipart create (its "request" field is Body).
	Envd []byte
}

func ok(payload string) string {
	if payload == "" {
		return `{"ret":{"ret_code":200,"ret_msg":"success"}}`
	}
	return `{"ret":{"ret_code":200,"ret_msg":"success"},` + payload + `}`
}

func jobJSON(id, status, phase string, progress, ready, expected, failed int, extra string) string {
	return fmt.Sprintf(`"job":{"job_id":%q,"template_id":"tpl-1","status":%q,"phase":%q,"progress":%d,`+
		`"ready_node_count":%d,"expected_node_count":%d,"failed_node_count":%d%s}`, id, status, phase, progress, ready, expected, failed, extra)
}

func (f *fakeMaster) jobState(id string) string {
	f.polls[id]++
	n := f.polls[id]
	switch id {
	case "job-ok", "mig-1":
		if n < 3 {
			return jobJSON(id, "RUNNING", "PULLING", 20*n, 0, 2, 0,
				`,"pull_total_bytes":4194304,"pull_downloaded_bytes":1048576,"pull_total_layers":4,"pull_completed_layers":1`)
		}
		return jobJSON(id, "READY", "DONE", 100, 2, 2, 0, `,"artifact":{"ext4_sha256":"abc123"},"phase_durations_ms":{"PULLING":12345,"DISTRIBUTING":2500}`)
	case "job-partial":
		// Distributing: node-1 copied, node-2 still at it, node-3 down
		// before the build; then READY on two of three nodes.
		nodes := `,"nodes":[{"node_id":"node-1","status":"DISTRIBUTED"},{"node_id":"node-2","status":"DISTRIBUTING"},` +
			`{"node_id":"node-3","status":"FAILED","error":"node node-3 is not healthy; it gets the template when it is back"}]`
		if n < 2 {
			return jobJSON(id, "RUNNING", "DISTRIBUTING", 87, 1, 3, 1, nodes)
		}
		return jobJSON(id, "READY", "READY", 100, 2, 3, 1, `,"template_status":"PARTIALLY_READY",`+
			`"nodes":[{"node_id":"node-1","status":"READY"},{"node_id":"node-2","status":"READY"},{"node_id":"node-3","status":"FAILED","error":"node node-3 is not healthy"}]`)
	case "job-back":
		// The server's percentage dips (an older master): the view does not.
		if n < 2 {
			return jobJSON(id, "RUNNING", "UPLOADING", 80, 0, 1, 0, "")
		}
		if n < 3 {
			return jobJSON(id, "RUNNING", "DISTRIBUTING", 70, 0, 1, 0, "")
		}
		return jobJSON(id, "READY", "READY", 100, 1, 1, 0, "")
	case "job-fail":
		if n < 2 {
			return jobJSON(id, "RUNNING", "BUILDING_EXT4", 50, 0, 2, 0, "")
		}
		return jobJSON(id, "FAILED", "BUILDING_EXT4", 50, 0, 2, 0, `,"error_message":"mkfs.ext4 exited 1:\nno space"`)
	}
	return ""
}

func (f *fakeMaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Caller: r.Header.Get("X-Caller")}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			f.t.Errorf("multipart body: %v", err)
		}
		if err := json.Unmarshal([]byte(r.FormValue("request")), &rec.Body); err != nil {
			f.t.Errorf("multipart request field is not JSON: %v", err)
		}
		if fh := r.MultipartForm.File["envd"]; len(fh) == 1 {
			fd, _ := fh[0].Open()
			rec.Envd, _ = io.ReadAll(fd)
			fd.Close()
		}
	} else if b, _ := io.ReadAll(r.Body); len(b) > 0 {
		if err := json.Unmarshal(b, &rec.Body); err != nil {
			f.t.Errorf("%s %s: body is not JSON: %v", r.Method, r.URL.Path, err)
		}
	}
	f.reqs = append(f.reqs, rec)
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	switch {
	case r.Method == "POST" && r.URL.Path == "/cube/template/from-image":
		if rec.Body["source_image_ref"] == "bad:image" {
			io.WriteString(w, `{"ret":{"ret_code":130400,"ret_msg":"source_image_ref: invalid\nreference"}}`)
			return
		}
		id := "job-ok"
		if rec.Body["source_image_ref"] == "fail:image" {
			id = "job-fail"
		}
		io.WriteString(w, ok(jobJSON(id, "PENDING", "QUEUED", 0, 0, 2, 0, "")))
	case r.Method == "GET" && r.URL.Path == "/cube/template/from-image" && q.Get("template_id") != "":
		// The template's latest job (tpl-1, alias web: job-fail).
		if id := q.Get("template_id"); id != "tpl-1" && id != "web" {
			io.WriteString(w, `{"ret":{"ret_code":130404,"ret_msg":"template `+id+` not found"}}`)
			return
		}
		io.WriteString(w, ok(f.jobState("job-fail")))
	case r.Method == "GET" && (r.URL.Path == "/cube/template/from-image" || r.URL.Path == "/cube/template/migrate"):
		s := f.jobState(q.Get("job_id"))
		if s == "" {
			io.WriteString(w, `{"ret":{"ret_code":130404,"ret_msg":"job not found"}}`)
			return
		}
		io.WriteString(w, ok(s))
	case r.Method == "POST" && r.URL.Path == "/cube/template/redo":
		io.WriteString(w, ok(jobJSON("job-ok", "PENDING", "QUEUED", 0, 0, 1, 0, `,"operation":"REDO"`)))
	case r.Method == "POST" && r.URL.Path == "/cube/template/migrate":
		io.WriteString(w, ok(jobJSON("mig-1", "PENDING", "QUEUED", 0, 0, 2, 0, `,"operation":"MIGRATE"`)))
	case r.Method == "GET" && r.URL.Path == "/cube/template" && q.Get("template_id") == "":
		io.WriteString(w, ok(`"data":[{"template_id":"tpl-1","status":"READY","alias":"web","display_name":"web","created_at":"2026-01-02T03:04:05Z","image_info":"nginx:1@sha256:aa","instance_type":"cubebox","last_error":"","job_id":"job-ok","backend":"s3"},`+
			`{"template_id":"tpl-2","status":"FAILED","last_error":"pull failed"}]`))
	case r.Method == "GET" && r.URL.Path == "/cube/template":
		if q.Get("template_id") != "tpl-1" {
			io.WriteString(w, `{"ret":{"ret_code":130404,"ret_msg":"template `+q.Get("template_id")+` not found"}}`)
			return
		}
		extra := ""
		if q.Get("include_request") == "true" {
			extra = `,"create_request":{"annotations":{"k":"v"}}`
		}
		io.WriteString(w, ok(`"template_id":"tpl-1","status":"READY","replicas":[{"node_id":"node-1","node_ip":"10.0.0.1","status":"READY","phase":"DONE","last_job_id":"b-1"}]`+extra))
	case r.Method == "DELETE" && r.URL.Path == "/cube/template":
		if rec.Body["template_id"] == "tpl-9" {
			io.WriteString(w, `{"ret":{"ret_code":130404,"ret_msg":"template tpl-9 not found"}}`)
			return
		}
		io.WriteString(w, ok(`"template_id":"tpl-1"`))
	case r.Method == "PUT" && r.URL.Path == "/cube/template/tpl-1/alias":
		io.WriteString(w, ok(`"template_id":"tpl-1","alias":"web"`))
	case r.Method == "GET" && r.URL.Path == "/cube/template/build/b-1/status":
		io.WriteString(w, ok(`"build_id":"b-1","template_id":"tpl-1","attempt_no":1,"status":"building","progress":40,"message":"PULLING"`))
	case r.Method == "GET" && r.URL.Path == "/cube/template/build/web/status":
		io.WriteString(w, `{"ret":{"ret_code":130404,"ret_msg":"job not found"}}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"ret":{"ret_code":-1,"ret_msg":"Not Found"}}`)
	}
}

// requests returns the calls made, without the template listings the CLI
// reads to turn an alias into an id.
func (f *fakeMaster) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recorded
	for _, r := range f.reqs {
		if r.Method == "GET" && r.Path == "/cube/template" && r.Query == "" && !f.listed {
			continue
		}
		out = append(out, r)
	}
	return out
}

// start runs the fake and returns the global flags that point at it.
func start(t *testing.T) (*fakeMaster, []string) {
	t.Helper()
	f := &fakeMaster{t: t, polls: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	host, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return f, []string{"-a", host, "-p", port}
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, global []string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append(append([]string{}, global...), args...), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // substrings expected on stdout
		stderrLine string   // substring of the single stderr line; "" means stderr must be empty
	}{
		{"create waits until READY", []string{"tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "1Gi", "--interval", "1ms"},
			0, []string{"RUNNING", "PULLING", "pull 1.0MiB/4.0MiB", "layers 1/4", "status:", "READY", "distribution:", "2/2 ready, 0 failed", "abc123"}, ""},
		{"create via template alias", []string{"template", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "1Gi", "--interval", "1ms"},
			0, []string{"READY"}, ""},
		{"create detached", []string{"tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "1Gi", "--detach"},
			0, []string{"job_id:", "job-ok", "PENDING"}, ""},
		{"create failure exits non-zero", []string{"tpl", "create-from-image", "--image", "fail:image", "--writable-layer-size", "1Gi", "--interval", "1ms"},
			1, []string{"FAILED", "error:", "mkfs.ext4 exited 1: no space"}, "job job-fail FAILED in phase BUILDING_EXT4: mkfs.ext4 exited 1: no space"},
		{"create missing image", []string{"tpl", "create-from-image", "--writable-layer-size", "1Gi"}, 1, nil, "--image is required"},
		{"create error envelope", []string{"tpl", "create-from-image", "--image", "bad:image", "--writable-layer-size", "1Gi"},
			1, nil, "ret_code 130400: source_image_ref: invalid reference"},
		{"status", []string{"tpl", "status", "--job-id", "job-fail"}, 0, []string{"job-fail", "RUNNING", "BUILDING_EXT4", "50%"}, ""},
		{"status unknown job", []string{"tpl", "status", "--job-id", "nope"}, 1, nil, "nope is neither a job id nor a template id or alias"},
		// A template's id or alias shows its latest job.
		{"status of a template", []string{"tpl", "status", "tpl-1"}, 0, []string{"job-fail", "RUNNING", "BUILDING_EXT4", "50%"}, ""},
		{"status of an alias", []string{"tpl", "status", "web"}, 0, []string{"job-fail", "RUNNING"}, ""},
		{"watch", []string{"tpl", "watch", "--job-id", "job-ok", "--interval", "1ms"}, 0, []string{"READY"}, ""},
		{"redo waits", []string{"tpl", "redo", "--template-id", "tpl-1", "--node", "n1", "--failed-only", "--interval", "1ms"},
			0, []string{"READY", "2/2 ready"}, ""},
		{"merge waits", []string{"tpl", "merge", "--template-id", "tpl-1", "--interval", "1ms"}, 0, []string{"mig-1", "READY"}, ""},
		{"list", []string{"tpl", "list"}, 0, []string{"TEMPLATE_ID  ALIAS  STATUS  BACKEND  JOB_ID", "tpl-1", "web", "job-ok", "s3", "nginx:1@sha256:aa", "tpl-2"}, ""},
		{"list wide", []string{"tpl", "ls", "-o", "wide"}, 0, []string{"LAST_ERROR", "pull failed", "cubebox", "JOB_ID"}, ""},
		{"list bad output", []string{"tpl", "list", "-o", "yaml"}, 1, nil, `"yaml" is not supported`},
		{"info", []string{"tpl", "info", "--template-id", "tpl-1", "--include-request"}, 0,
			[]string{"NODE_ID", "node-1", "10.0.0.1", "create_request:", `"k": "v"`}, ""},
		{"info not found", []string{"tpl", "info", "--template-id", "tpl-9"}, 1, nil, "ret_code 130404: template tpl-9 not found"},
		{"alias set", []string{"tpl", "alias", "--template-id", "tpl-1", "--alias", "web"}, 0, []string{"alias of tpl-1 set to web"}, ""},
		{"alias clear", []string{"tpl", "alias", "--template-id", "tpl-1"}, 0, []string{"alias of tpl-1 cleared"}, ""},
		{"delete", []string{"tpl", "delete", "--template-id", "tpl-1"}, 0, []string{"template deleted: tpl-1"}, ""},
		{"delete several", []string{"tpl", "delete", "tpl-1", "web"}, 0, []string{"template deleted: tpl-1\ntemplate deleted: tpl-1"}, ""},
		{"delete several, one missing", []string{"tpl", "delete", "tpl-9", "tpl-1"}, 1, []string{"template deleted: tpl-1"}, "tpl-9: DELETE /cube/template: ret_code 130404"},
		{"set-alias", []string{"tpl", "set-alias", "tpl-1", "--alias", "web"}, 0, []string{"template_id:", "tpl-1", "alias:"}, ""},
		{"set-alias clear", []string{"tpl", "set-alias", "--template-id", "tpl-1", "--clear"}, 0, []string{"tpl-1"}, ""},
		{"set-alias needs a flag", []string{"tpl", "set-alias", "tpl-1"}, 1, nil, "give --alias ALIAS or --clear"},
		{"build-status", []string{"tpl", "build-status", "--build-id", "b-1"}, 0, []string{"status:", "BUILDING", "40%", "PULLING"}, ""},
		{"http 404", []string{"tpl", "build-status", "--build-id", "zz"}, 1, nil, "HTTP 404 Not Found: ret_code -1: Not Found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, global := start(t)
			r := runCLI(t, global, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
				}
			}
			if tc.stderrLine == "" {
				if r.stderr != "" {
					t.Errorf("stderr = %q, want empty", r.stderr)
				}
				return
			}
			if !strings.HasPrefix(r.stderr, "cubemastercli: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("stderr is not one line: %q", r.stderr)
			}
			if !strings.Contains(r.stderr, tc.stderrLine) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tc.stderrLine)
			}
		})
	}
}

func TestCreateFromImageRequest(t *testing.T) {
	f, global := start(t)
	t.Setenv("CUBE_REGISTRY_PASSWORD", "s3cret")
	r := runCLI(t, global, "tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "2Gi",
		"--template-id", "tpl-1", "--node", "n1", "--node", "n2", "--expose-port", "80", "--expose-port", "443",
		"--registry-username", "bob", "--alias", "web", "--network-type", "tap", "--interval", "1ms")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	reqs := f.requests()
	if len(reqs) != 4 { // submit + three polls (RUNNING, RUNNING, READY)
		t.Fatalf("%d requests, want 4: %+v", len(reqs), reqs)
	}
	for _, q := range reqs {
		if q.Caller != "mastercli" {
			t.Errorf("%s %s: X-Caller = %q", q.Method, q.Path, q.Caller)
		}
	}
	body := reqs[0].Body
	want := map[string]any{
		"source_image_ref": "nginx:1", "writable_layer_size": "2Gi", "template_id": "tpl-1", "registry_username": "bob",
		"registry_password": "s3cret", "alias": "web", "instance_type": "cubebox", "network_type": "tap",
	}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("body[%s] = %v, want %v", k, body[k], v)
		}
	}
	if fmt.Sprint(body["distribution_scope"]) != "[n1 n2]" || fmt.Sprint(body["exposed_ports"]) != "[80 443]" {
		t.Errorf("scope/ports = %v / %v", body["distribution_scope"], body["exposed_ports"])
	}
	if id, _ := body["requestID"].(string); id == "" {
		t.Error("no requestID")
	}
	if reqs[1].Query != "job_id=job-ok" {
		t.Errorf("poll query = %q", reqs[1].Query)
	}
	// Plain (non-TTY) output: one line per change, no carriage returns.
	if strings.Contains(r.stdout, "\r") {
		t.Errorf("non-TTY output has carriage returns: %q", r.stdout)
	}
}

func TestJSONOutput(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		status string
		code   int // a job that ends FAILED exits 1 with --json too
		stream int // following: at least this many lines, one object each
	}{
		{"wait", []string{"tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "1Gi", "--json", "--interval", "1ms"}, "READY", 0, 3},
		{"wait failed", []string{"tpl", "create-from-image", "--image", "fail:image", "--writable-layer-size", "1Gi", "--json", "--interval", "1ms"}, "FAILED", 1, 2},
		{"watch failed", []string{"tpl", "watch", "--job-id", "job-fail", "--json", "--interval", "1ms"}, "FAILED", 1, 2},
		{"detach", []string{"tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "1Gi", "--json", "--detach"}, "PENDING", 0, 0},
		{"status", []string{"tpl", "status", "--job-id", "job-ok", "--json"}, "RUNNING", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, global := start(t)
			r := runCLI(t, global, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d: %s", r.code, tc.code, r.stderr)
			}
			if tc.code != 0 && !strings.Contains(r.stderr, "FAILED") {
				t.Errorf("stderr %q does not say the job failed", r.stderr)
			}
			var resp struct {
				Ret struct {
					Code int `json:"ret_code"`
				} `json:"ret"`
				Job struct {
					Status string `json:"status"`
				} `json:"job"`
			}
			doc := r.stdout
			if tc.stream > 0 {
				// One compact object per update; the last is the end.
				lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
				if len(lines) < tc.stream {
					t.Fatalf("%d lines, want an object per update (at least %d):\n%s", len(lines), tc.stream, r.stdout)
				}
				for _, l := range lines {
					if !json.Valid([]byte(l)) {
						t.Fatalf("line is not a JSON object: %q", l)
					}
				}
				doc = lines[len(lines)-1]
			}
			if err := json.Unmarshal([]byte(doc), &resp); err != nil {
				t.Fatalf("not a JSON document: %v\n%s", err, doc)
			}
			if resp.Ret.Code != 200 || resp.Job.Status != tc.status {
				t.Errorf("got ret %d status %q, want 200 %q", resp.Ret.Code, resp.Job.Status, tc.status)
			}
		})
	}
	t.Run("list", func(t *testing.T) {
		_, global := start(t)
		r := runCLI(t, global, "tpl", "list", "--json")
		var resp cubeview.ListResponse
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &resp) != nil || len(resp.Data) != 2 {
			t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
		}
	})
}

func TestRequestBodies(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		method string
		path   string
		want   map[string]any
	}{
		{"delete", []string{"tpl", "delete", "--template-id", "tpl-1"}, "DELETE", "/cube/template", map[string]any{"template_id": "tpl-1"}},
		{"alias", []string{"tpl", "alias", "--template-id", "tpl-1", "--alias", " web "}, "PUT", "/cube/template/tpl-1/alias", map[string]any{"alias": "web"}},
		{"alias clear", []string{"tpl", "alias", "--template-id", "tpl-1", "--alias", ""}, "PUT", "/cube/template/tpl-1/alias", map[string]any{"alias": ""}},
		{"redo", []string{"tpl", "redo", "--template-id", "tpl-1", "--node", "n1", "--failed-only", "--detach"}, "POST", "/cube/template/redo",
			map[string]any{"template_id": "tpl-1", "failed_only": true}},
		{"merge", []string{"tpl", "merge", "--template-id", "tpl-1", "--detach"}, "POST", "/cube/template/migrate", map[string]any{"template_id": "tpl-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, global := start(t)
			if r := runCLI(t, global, tc.args...); r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1 (detached / single call)", len(reqs))
			}
			q := reqs[0]
			if q.Method != tc.method || q.Path != tc.path {
				t.Fatalf("%s %s, want %s %s", q.Method, q.Path, tc.method, tc.path)
			}
			for k, v := range tc.want {
				if q.Body[k] != v {
					t.Errorf("body[%s] = %v, want %v", k, q.Body[k], v)
				}
			}
			if tc.name == "delete" && q.Body["RequestID"] == nil {
				t.Errorf("delete body lacks RequestID: %v", q.Body)
			}
		})
	}
}

func TestMergePollsMigrateRoute(t *testing.T) {
	f, global := start(t)
	if r := runCLI(t, global, "tpl", "merge", "--template-id", "tpl-1", "--interval", "1ms"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, q := range f.requests()[1:] {
		if q.Method != "GET" || q.Path != "/cube/template/migrate" || q.Query != "job_id=mig-1" {
			t.Errorf("poll %s %s?%s, want GET /cube/template/migrate?job_id=mig-1", q.Method, q.Path, q.Query)
		}
	}
}

func TestAddressPicksFromList(t *testing.T) {
	c, err := newClient(" h1 , h2:9000 ,", 8089, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.base != "http://h1:8089" && c.base != "http://h2:9000" {
		t.Errorf("base = %q", c.base)
	}
	if _, err := newClient(" , ", 8089, 0); err == nil {
		t.Error("an empty address list was accepted")
	}
}

func TestUnreachableMaster(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	r := runCLI(t, []string{"-a", "127.0.0.1", "-p", port, "--timeout", "2s"}, "tpl", "list")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "cubemastercli: GET /cube/template: ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestProgressLinesFitTheTerminal: at every width the lines fit, and what
// does not fit is left out whole: every word of a narrow line is a word of
// the widest one (the bar aside).
func TestProgressLinesFitTheTerminal(t *testing.T) {
	pulling := cubeview.JobInfo{Status: "RUNNING", Phase: "PULLING", Progress: 12, PullTotalBytes: 1932735283, PullDownloadedBytes: 1288490188,
		PullTotalLayers: 7, PullCompletedLayers: 3, PullSpeedBPS: 47290777, ExpectedNodeCount: 0}
	distributing := cubeview.JobInfo{Status: "RUNNING", Phase: "DISTRIBUTING", Progress: 87, ExpectedNodeCount: 3, ReadyNodeCount: 1, FailedNodeCount: 1,
		Nodes: []cubeview.JobNode{{NodeID: "node-1", Status: "DISTRIBUTED"}, {NodeID: "node-22", Status: "DISTRIBUTING"},
			{NodeID: "node-3", Status: "FAILED", Error: "node node-3 is not healthy"}}}
	words := func(line string) map[string]bool {
		m := map[string]bool{}
		for _, w := range strings.Fields(line) {
			if !strings.HasPrefix(w, "[") {
				m[strings.TrimSuffix(w, ",")] = true
			}
		}
		return m
	}
	for _, j := range []*cubeview.JobInfo{&pulling, &distributing} {
		for _, render := range []func(int) string{
			func(w int) string { return statusLine(j, j.Progress, 42*time.Second, w) },
			func(w int) string { return nodesLine(j, w) },
		} {
			for _, wide := range []bool{false, true} {
				full := render(80)
				if wide {
					full = render(1000)
				}
				all := words(full)
				widths := []int{30, 40, 60, 80}
				if wide {
					widths = []int{120, 132, 200}
				}
				for _, width := range widths {
					line := render(width)
					if len(line) >= width {
						t.Errorf("width %d: %d columns: %q", width, len(line), line)
					}
					for w := range words(line) {
						if !all[w] {
							t.Errorf("width %d: %q has %q, cut from the full line %q", width, line, w, full)
						}
					}
				}
			}
		}
	}
	if got := statusLine(&pulling, 12, 42*time.Second, 80); !strings.Contains(got, "PULLING  12% [") || !strings.Contains(got, "1.2GiB/1.8GiB 3/7 layers 45.1MiB/s 42s") {
		t.Errorf("80 columns while pulling: %q", got)
	}
	if got := statusLine(&pulling, 12, 0, 132); !strings.Contains(got, "RUNNING PULLING  12%") || !strings.Contains(got, "pulled 1.2GiB of 1.8GiB layers 3/7") {
		t.Errorf("132 columns while pulling: %q", got)
	}
	if got := nodesLine(&distributing, 80); !strings.Contains(got, "waiting for node-22, failed: node-3 (down)") {
		t.Errorf("80 columns while distributing: %q", got)
	}
	half := pulling
	half.PullDownloadedBytes = half.PullTotalBytes / 2
	got := statusLine(&half, 50, 0, 100)
	if fill, empty := strings.Count(got, "#"), strings.Count(got, "-"); fill == 0 || fill < empty-2 || fill > empty+2 {
		t.Errorf("half pulled: %q, want a half-full bar", got)
	}
}

// TestNodesAndPartialResult: the CLI names the nodes it still waits for
// and a node that was down, and a job READY on some nodes only exits 3.
func TestNodesAndPartialResult(t *testing.T) {
	_, global := start(t)
	r := runCLI(t, global, "tpl", "watch", "job-partial", "--interval", "1ms")
	if r.code != exitPartial {
		t.Fatalf("exit %d, want %d: %s", r.code, exitPartial, r.stderr)
	}
	if !strings.Contains(r.stdout, "waiting for node-2, failed: node-3 (down)") {
		t.Errorf("no waiting or down nodes named:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "READY on 2 of 3 nodes (not on node-3 (down))") {
		t.Errorf("stderr %q does not name the partial result", r.stderr)
	}
	r = runCLI(t, global, "tpl", "watch", "job-partial", "--interval", "1ms", "--json")
	if r.code != exitPartial {
		t.Errorf("--json: exit %d, want %d", r.code, exitPartial)
	}
}

// TestPercentageNeverGoesBack and phase times come from the job.
func TestPercentageNeverGoesBack(t *testing.T) {
	_, global := start(t)
	r := runCLI(t, global, "tpl", "watch", "job-back", "--interval", "1ms")
	if r.code != 0 || strings.Contains(r.stdout, " 70%") || !strings.Contains(r.stdout, "DISTRIBUTING 80%") {
		t.Errorf("exit %d, stdout:\n%s", r.code, r.stdout)
	}
	r = runCLI(t, global, "tpl", "watch", "job-ok", "--interval", "1ms")
	if !regexp.MustCompile(`done PULLING +12\.3s`).MatchString(r.stdout) || !regexp.MustCompile(`done DISTRIBUTING +2\.5s`).MatchString(r.stdout) {
		t.Errorf("phase times are not the job's:\n%s", r.stdout)
	}
}

func TestFailedJobIsNotShownDone(t *testing.T) {
	_, global := start(t)
	r := runCLI(t, global, "tpl", "watch", "job-fail", "--interval", "1ms")
	if r.code != 1 || strings.Contains(r.stdout, "100%") || !strings.Contains(r.stdout, "FAILED in BUILDING_EXT4") {
		t.Errorf("exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

func TestLiveProgressOnTerminal(t *testing.T) {
	old, oldWidth := stdoutIsTerminal, terminalWidth
	stdoutIsTerminal = func(io.Writer) bool { return true }
	terminalWidth = func(io.Writer) int { return 80 }
	t.Cleanup(func() { stdoutIsTerminal, terminalWidth = old, oldWidth })
	_, global := start(t)
	r := runCLI(t, global, "tpl", "watch", "job-ok", "--interval", "1ms")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stdout, "\r\033[K"); n < 3 {
		t.Errorf("%d line rewrites, want the live region redrawn per poll:\n%q", n, r.stdout)
	}
	if !strings.Contains(r.stdout, "done PULLING") {
		t.Errorf("no line for the finished phase:\n%q", r.stdout)
	}
	for _, line := range strings.Split(strings.ReplaceAll(strings.ReplaceAll(r.stdout, "\033[1A", "\n"), "\r\033[K", "\n"), "\n") {
		if len(line) >= 80 {
			t.Errorf("a line wider than the terminal: %q", line)
		}
	}
	if !strings.Contains(r.stdout, "status:                    READY") {
		t.Errorf("no final summary:\n%s", r.stdout)
	}
}

// TestPositionalIDsAndAliases: ids are arguments, and an alias works
// wherever a template id does.
func TestPositionalIDsAndAliases(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		method string
		path   string
		query  string
	}{
		{"info by id", []string{"tpl", "info", "tpl-1"}, "GET", "/cube/template", "template_id=tpl-1"},
		{"info by alias", []string{"tpl", "info", "web"}, "GET", "/cube/template", "template_id=tpl-1"},
		{"delete by alias", []string{"tpl", "delete", "web", "--yes"}, "DELETE", "/cube/template", ""},
		{"alias by alias", []string{"tpl", "alias", "web", "www"}, "PUT", "/cube/template/tpl-1/alias", ""},
		{"status", []string{"tpl", "status", "job-ok"}, "GET", "/cube/template/from-image", "job_id=job-ok"},
		{"build-status by job", []string{"tpl", "build-status", "b-1"}, "GET", "/cube/template/build/b-1/status", ""},
		{"build-status by template", []string{"tpl", "build-status", "web"}, "GET", "/cube/template/build/b-1/status", ""},
		{"merge by id", []string{"tpl", "merge", "tpl-1", "--detach"}, "POST", "/cube/template/migrate", ""},
		{"merge by alias", []string{"tpl", "merge", "web", "--detach"}, "POST", "/cube/template/migrate", ""},
		{"info by alias under cubebox", []string{"cubebox", "template", "info", "web"}, "GET", "/cube/template", "template_id=tpl-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, global := start(t)
			r := runCLI(t, global, tc.args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			reqs := f.requests()
			last := reqs[len(reqs)-1]
			if last.Method != tc.method || last.Path != tc.path || last.Query != tc.query {
				t.Fatalf("last call %s %s?%s, want %s %s?%s", last.Method, last.Path, last.Query, tc.method, tc.path, tc.query)
			}
			if (tc.name == "delete by alias" || strings.HasPrefix(tc.name, "merge")) && last.Body["template_id"] != "tpl-1" {
				t.Fatalf("%s body %v, want template_id tpl-1", tc.name, last.Body)
			}
		})
	}
}

func TestUnknownSubcommandAndVersion(t *testing.T) {
	_, global := start(t)
	for _, args := range [][]string{{"tpl", "bogus"}, {"bogus"}, {"tpl", "infoo", "x"}, {"cubebox", "bogus"}, {"cubebox", "template", "bogus"}} {
		if r := runCLI(t, global, args...); r.code == 0 || !strings.Contains(r.stderr, "unknown command") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	r := runCLI(t, nil, "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "cubemastercli ") || !strings.Contains(r.stdout, "go1.") {
		t.Errorf("--version: exit %d, %q", r.code, r.stdout)
	}
}

func TestDeleteAsksOnATerminal(t *testing.T) {
	old := stdinIsTerminal
	stdinIsTerminal = func(io.Reader) bool { return true }
	t.Cleanup(func() { stdinIsTerminal = old })
	cases := []struct {
		input   string
		args    []string
		code    int
		deletes int
	}{
		{"n\n", nil, 1, 0},
		{"\n", nil, 1, 0},
		{"yes\n", nil, 0, 1},
		{"", []string{"--yes"}, 0, 1},
	}
	for _, tc := range cases {
		f, global := start(t)
		var out, errb bytes.Buffer
		code := runContext(t.Context(), append(append(append([]string{}, global...), "tpl", "delete", "tpl-1"), tc.args...),
			strings.NewReader(tc.input), &out, &errb)
		deletes := 0
		for _, q := range f.requests() {
			if q.Method == "DELETE" {
				deletes++
			}
		}
		if code != tc.code || deletes != tc.deletes {
			t.Errorf("input %q %v: exit %d with %d deletes, want %d with %d (stderr %q)", tc.input, tc.args, code, deletes, tc.code, tc.deletes, errb.String())
		}
	}
}

// TestCompletionOffersTemplates: shell completion of a TEMPLATE argument
// or --template-id offers the master's template ids and aliases.
func TestCompletionOffersTemplates(t *testing.T) {
	_, global := start(t)
	cases := []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"tpl", "info", ""}, []string{"tpl-1\tREADY web", "web\talias of tpl-1", "tpl-2\tFAILED"}, nil},
		{[]string{"tpl", "delete", "w"}, []string{"web\talias of tpl-1"}, []string{"tpl-1"}},
		{[]string{"tpl", "redo", "--template-id", "tpl-"}, []string{"tpl-1", "tpl-2"}, []string{"web"}},
		{[]string{"tpl", "status", "t"}, []string{"tpl-1", "tpl-2"}, nil},
	}
	for _, tc := range cases {
		r := runCLI(t, global, append([]string{"__complete"}, tc.args...)...)
		if r.code != 0 {
			t.Fatalf("__complete %q: exit %d: %s", tc.args, r.code, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("__complete %q offers %q, want %q among them", tc.args, r.stdout, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(r.stdout, n+"\t") {
				t.Errorf("__complete %q offers %q, which does not start with the prefix", tc.args, n)
			}
		}
	}
}
