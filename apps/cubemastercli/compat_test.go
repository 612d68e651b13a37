package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestCreateFromImageUpstreamFlags(t *testing.T) {
	f, global := start(t)
	t.Setenv(EnvRegistryPassword, "") // unset below
	os.Unsetenv(EnvRegistryPassword)
	r := runCLI(t, global, "tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "2Gi", "--detach",
		"--registry-username", "bob", "--registry-password", "hunter2", "--name", "web",
		"--allow-internet-access", "false", "--allow-out-cidr", "10.0.0.0/8", "--deny-out-cidr", "0.0.0.0/0",
		"--cmd", "/bin/sh", "--cmd", "-c", "--arg", "exec nginx", "--env", "A=1", "--env", "B=x=y", "--dns", "8.8.8.8",
		"--probe", "9000", "--cpu", "4000", "--with-cube-ca=false", "--enable-ivshmem", "--backend", "s3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	body := f.requests()[0].Body
	if body["registry_password"] != "hunter2" || body["alias"] != "web" || body["with_cube_ca"] != false ||
		body["enable_ivshmem"] != true || body["backend"] != "s3" {
		t.Errorf("body %v", body)
	}
	policy, _ := body["cube_network_config"].(map[string]any)
	if policy["allowInternetAccess"] != false || fmt.Sprint(policy["allowOut"]) != "[10.0.0.0/8]" || fmt.Sprint(policy["denyOut"]) != "[0.0.0.0/0]" {
		t.Errorf("network policy %v", policy)
	}
	o, _ := body["container_overrides"].(map[string]any)
	want := `{"args":["exec nginx"],"command":["/bin/sh","-c"],"dns_config":{"servers":["8.8.8.8"]},` +
		`"envs":[{"key":"A","value":"1"},{"key":"B","value":"x=y"}],` +
		`"probe":{"failure_threshold":60,"period_ms":500,"probe_handler":{"http_get":{"host":"","path":"/health","port":9000}},"success_threshold":1,"timeout_ms":30000},` +
		`"resources":{"cpu":"4000m","mem":"2000Mi"}}`
	if got, _ := json.Marshal(o); string(got) != want {
		t.Errorf("container_overrides\n got %s\nwant %s", got, want)
	}
	// The password never reaches the output; the flag is warned about.
	if strings.Contains(r.stdout+r.stderr, "hunter2") || !strings.Contains(r.stderr, "visible to other users") {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestCreateFromImageEnvdUpload(t *testing.T) {
	dir := t.TempDir()
	envd := filepath.Join(dir, "envd")
	binary := append([]byte("\x7fELF"), make([]byte, 1000)...)
	if err := os.WriteFile(envd, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "envd.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)

	f, global := start(t)
	base := []string{"tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "2Gi", "--detach"}
	if r := runCLI(t, global, append(base, "--enable-inject-envd", "--envd-path", envd)...); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got := f.requests()[0]
	ann, _ := got.Body["container_overrides"].(map[string]any)["annotations"].(map[string]any)
	if !bytes.Equal(got.Envd, binary) || ann["cube.master.inject_envd"] != "true" || got.Body["source_image_ref"] != "nginx:1" {
		t.Fatalf("multipart create: %d envd bytes, request %v", len(got.Envd), got.Body)
	}
	// Without --envd-path the opt-in goes as JSON: the master injects its own.
	if r := runCLI(t, global, append(base, "--enable-inject-envd")...); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := f.requests()[1]; got.Envd != nil || got.Body["container_overrides"] == nil {
		t.Fatalf("json create: %+v", got)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--envd-path", envd}, "--envd-path requires --enable-inject-envd"},
		{[]string{"--enable-inject-envd", "--envd-path", script}, "not an ELF"},
		{[]string{"--enable-inject-envd", "--envd-path", dir}, "not a regular file"},
	} {
		if r := runCLI(t, global, append(base, tc.args...)...); r.code != 1 || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: exit %d %q, want %q", tc.args, r.code, r.stderr, tc.msg)
		}
	}
}

func TestCreateFromImagePasswordSources(t *testing.T) {
	f, global := start(t)
	base := []string{"tpl", "create-from-image", "--image", "nginx:1", "--writable-layer-size", "2Gi", "--detach", "--registry-username", "bob"}

	t.Setenv(EnvRegistryPassword, "from-env")
	if r := runCLI(t, global, base...); r.code != 0 || r.stderr != "" {
		t.Fatalf("env: %d %q", r.code, r.stderr)
	}
	os.Unsetenv(EnvRegistryPassword)
	var out, errb strings.Builder
	root := newRootCmd(&out)
	root.SetArgs(append(append([]string{}, global...), append(base, "--registry-password-stdin")...))
	root.SetIn(strings.NewReader("from-stdin\n"))
	root.SetOut(&out)
	root.SetErr(&errb)
	if err := root.Execute(); err != nil {
		t.Fatalf("stdin: %v %s", err, errb.String())
	}
	// No terminal and no other source: no password, no prompt.
	if r := runCLI(t, global, base...); r.code != 0 {
		t.Fatalf("none: %d %s", r.code, r.stderr)
	}
	reqs := f.requests()
	got := []any{reqs[0].Body["registry_password"], reqs[1].Body["registry_password"], reqs[2].Body["registry_password"]}
	if got[0] != "from-env" || got[1] != "from-stdin" || got[2] != nil {
		t.Errorf("passwords sent %v", got)
	}
	if r := runCLI(t, global, "tpl", "create-from-image", "--image", "x", "--writable-layer-size", "1Gi", "stray"); r.code == 0 {
		t.Error("a stray argument was accepted")
	}
}

// fakeCompat serves the routes only the upstream commands use.
type fakeCompat struct {
	mu     sync.Mutex
	polls  int
	bodies []map[string]any
}

func (f *fakeCompat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/cube/template/build/b-2/status":
		f.polls++
		status := "building"
		if f.polls >= 3 {
			status = "ready"
		}
		fmt.Fprintf(w, `{"ret":{"ret_code":200,"ret_msg":"success"},"build_id":"b-2","status":%q,"progress":%d,"message":"SNAPSHOTTING"}`, status, 30*f.polls)
	case r.URL.Path == "/cube/template/build/b-bad/status":
		io.WriteString(w, `{"ret":{"ret_code":200,"ret_msg":"success"},"build_id":"b-bad","status":"error","progress":100,"message":"boom"}`)
	case r.URL.Path == "/cube/sandbox/preview":
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		f.bodies = append(f.bodies, m)
		io.WriteString(w, `{"requestID":"r-9","ret":{"ret_code":200,"ret_msg":"success"},`+
			`"api_request":{"annotations":{"cube.master.appsnapshot.template.id":"web"},"containers":[{}]},`+
			`"merged_request":{"containers":[{}],"volumes":[{}],"network_type":"tap","namespace":"ns","cube_network_config":{"allowInternetAccess":false}},`+
			`"cubelet_request":{"containers":[{}],"volumes":[{}],"exposed_ports":[80],"cube_network_config":{"allow_internet_access":false,"deny_out":["10.0.0.0/8"]}}}`)
	case r.URL.Path == "/cube/template":
		io.WriteString(w, `{"ret":{"ret_code":200,"ret_msg":"success"},"data":[{"template_id":"tpl-1","status":"READY"}]}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"ret":{"ret_code":-1,"ret_msg":"Not Found"}}`)
	}
}

func startCompat(t *testing.T) (*fakeCompat, []string) {
	f := &fakeCompat{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	return f, []string{"-a", host, "-p", port}
}

func TestBuildWatch(t *testing.T) {
	_, global := startCompat(t)
	r := runCLI(t, global, "tpl", "build-watch", "b-2", "--interval", "1ms")
	if r.code != 0 || strings.Count(r.stdout, "build b-2") != 3 || !strings.Contains(r.stdout, "READY 90%") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, global, "template", "build-watch", "--build-id", "b-bad"); r.code == 0 || !strings.Contains(r.stderr, "boom") {
		t.Fatalf("a failed build exited %d: %q", r.code, r.stderr)
	}
}

func TestRender(t *testing.T) {
	f, global := startCompat(t)
	file := filepath.Join(t.TempDir(), "req.json")
	os.WriteFile(file, []byte(`{"annotations":{"team":"x"},"containers":[{"name":"c"}]}`), 0o600)
	r := runCLI(t, global, "tpl", "render", "-f", file, "--template-id", "web")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ann, _ := f.bodies[0]["annotations"].(map[string]any)
	if ann["cube.master.appsnapshot.template.id"] != "web" || ann["cube.master.appsnapshot.version"] != "v2" || ann["team"] != "x" || f.bodies[0]["requestID"] == nil {
		t.Errorf("preview body %v", f.bodies[0])
	}
	for _, want := range []string{"template=web", "namespace=ns", "exposed_ports=[80]", "deny_out=[10.0.0.0/8]", "allow_internet_access=false"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("render output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := runCLI(t, global, "tpl", "render"); r.code == 0 {
		t.Error("render without a template id succeeded")
	}
}

func TestCubeboxTemplateSpelling(t *testing.T) {
	_, global := startCompat(t)
	for _, args := range [][]string{{"cubebox", "template", "ls"}, {"cubebox", "tpl", "list"}, {"template", "ls"}} {
		if r := runCLI(t, global, args...); r.code != 0 || !strings.Contains(r.stdout, "tpl-1") {
			t.Errorf("%v: exit %d %q %q", args, r.code, r.stdout, r.stderr)
		}
	}
}
