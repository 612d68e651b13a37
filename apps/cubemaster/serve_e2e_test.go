package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/agent"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
)

var binPath string

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// buildBinary builds cubemaster once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if binPath != "" {
		return binPath
	}
	dir, err := os.MkdirTemp("", "cubemaster-e2e-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "cubemaster")
	if b, err := exec.Command("go", "build", "-o", out, "github.com/cubesandbox/templatecenter/apps/cubemaster").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	binPath = out
	return out
}

// cleanEnv is the test's environment without any CUBE_* setting, so the
// developer's shell cannot change what the process sees.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUBE_") && !strings.HasPrefix(kv, "CUBEMASTER_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// TestServeRefusesBadStart: without a token (or with a bad node list) the
// process exits non-zero with one line naming the problem, before it
// listens or touches the database.
func TestServeRefusesBadStart(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"no token", nil, auth.EnvToken},
		{"empty token", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=  "}, auth.EnvToken},
		{"bad nodes", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=t", "CUBE_MASTER_NODES=node-1=nowhere"}, "CUBE_MASTER_NODES"},
		{"bad template center", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=t", "CUBE_TEMPLATE_CENTER_ADDR=ftp://tc"}, "CUBE_TEMPLATE_CENTER_ADDR"},
		{"bad sweep interval", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=t", "CUBE_MASTER_SWEEP_INTERVAL=soon"}, "CUBE_MASTER_SWEEP_INTERVAL"},
		// Public API authentication is on by default and fails closed.
		{"no public API credential", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=t"}, "CUBE_MASTER_AUTH=false"},
		{"short bearer token", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=t", "CUBE_MASTER_AUTH_BEARER_TOKENS=short"}, "CUBE_MASTER_AUTH_BEARER_TOKENS"},
		{"short node credential", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=t", "CUBE_MASTER_NODE_TOKEN=short"}, "CUBE_MASTER_NODE_TOKEN is shorter than 16"},
		{"node client certificate without a CA", []string{"CUBE_TEMPLATE_CALLBACK_TOKEN=t", "CUBE_MASTER_NODE_TLS_CERT=c.pem", "CUBE_MASTER_NODE_TLS_KEY=k.pem"}, "CUBE_MASTER_NODE_TLS_CA"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dsn := "sqlite://" + filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".db")
			cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
			cmd.Env = cleanEnv(append([]string{"CUBE_MASTER_DB_DSN=" + dsn}, tc.env...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-ctx.Done():
				cmd.Process.Kill()
				t.Fatal("cubemaster kept running; want a refusal")
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("exit = %v, want a non-zero exit", err)
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "cubemaster: ") || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr = %q, want one line \"cubemaster: ...%s...\"", stderr.String(), tc.want)
			}
			if _, err := os.Stat(strings.TrimPrefix(dsn, "sqlite://")); err == nil {
				t.Fatal("the database was created before the configuration was checked")
			}
		})
	}
}

// fakeTC stands in for the data plane: it records build submits and
// artifact deletes (accepting all, never reporting) and serves one
// artifact's bytes on the download route to any non-empty token.
type fakeTC struct {
	mu       sync.Mutex
	builds   []wire.BuildRequest
	tokens   []string
	deleted  []string
	artifact []byte
}

func (f *fakeTC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/health": // the master's /ready asks
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && r.URL.Path == wire.PathBuild:
		var b wire.BuildRequest
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.builds = append(f.builds, b)
		f.tokens = append(f.tokens, r.Header.Get(auth.Header))
		f.mu.Unlock()
		wire.WriteJSON(w, http.StatusOK, wire.BuildAccepted{Status: "accepted", JobID: b.JobID})
	case r.Method == http.MethodPost && r.URL.Path == wire.PathArtifactDelete:
		var d wire.DeleteArtifactRequest
		if err := json.NewDecoder(r.Body).Decode(&d); err != nil || r.Header.Get(auth.Header) == "" {
			http.Error(w, "bad delete", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.deleted = append(f.deleted, d.ArtifactID)
		f.mu.Unlock()
		wire.WriteJSON(w, http.StatusOK, wire.DeleteArtifactResponse{Status: "deleted", ArtifactID: d.ArtifactID})
	case r.URL.Path == "/cube/template/artifact/download":
		if r.Header.Get("X-Cube-Artifact-Token") == "" && r.URL.Query().Get("token") == "" {
			http.Error(w, "no token", http.StatusForbidden)
			return
		}
		f.mu.Lock()
		data := f.artifact
		f.mu.Unlock()
		if data == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeTC) received() ([]wire.BuildRequest, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.BuildRequest(nil), f.builds...), append([]string(nil), f.tokens...)
}

func (f *fakeTC) deletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}

// master is a running cubemaster process.
type master struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string
	logs   *testenv.Buffer
	exited chan error
	done   bool
}

// apiBearer is the public API token the tests' masters accept; call sends
// it on /cube/* requests that carry no Authorization header of their own.
const apiBearer = "serve-e2e-bearer-0123456789"

// nodeToken is the node credential the tests' masters and nodes share.
const nodeToken = "serve-e2e-node-token-0123"

// startMaster starts `cubemaster serve` on a free loopback port with env
// (on top of a CUBE_*-free environment, with apiBearer as the public API's
// token) and waits until it is healthy.
func startMaster(t *testing.T, env ...string) *master {
	t.Helper()
	addr := freeAddr(t)
	m := &master{t: t, base: "http://" + addr, logs: &testenv.Buffer{}, exited: make(chan error, 1)}
	m.cmd = exec.Command(buildBinary(t), "serve", "--listen", addr)
	m.cmd.Env = cleanEnv(append([]string{"CUBE_MASTER_AUTH_BEARER_TOKENS=" + apiBearer}, env...)...)
	m.cmd.Stdout, m.cmd.Stderr = m.logs, m.logs
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exited <- m.cmd.Wait() }()
	t.Cleanup(func() {
		if !m.done {
			m.cmd.Process.Kill()
			<-m.exited
		}
		if t.Failed() {
			t.Logf("cubemaster log:\n%s", m.logs.String())
		}
	})
	waitHealthy(t, m.base+"/notify/health")
	return m
}

// stop sends SIGINT and wants a clean exit.
func (m *master) stop() {
	m.t.Helper()
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		m.t.Fatal(err)
	}
	select {
	case err := <-m.exited:
		m.done = true
		if err != nil {
			m.t.Fatalf("exit after SIGINT: %v", err)
		}
	case <-time.After(20 * time.Second):
		m.t.Fatal("cubemaster did not stop after SIGINT")
	}
}

// createJob posts a from-image request and returns the job id.
func (m *master) createJob(templateID string) string {
	m.t.Helper()
	body := fmt.Sprintf(`{"requestID":"req-%s","source_image_ref":"registry.example/app:1","writable_layer_size":"1Gi","template_id":%q}`, templateID, templateID)
	var a jobAnswer
	decode(m.t, call(m.t, http.MethodPost, m.base+"/cube/template/from-image", body, nil), &a)
	if a.Ret.Code != 200 || a.RequestID != "req-"+templateID || a.Job == nil || a.Job.JobID == "" || a.Job.Status != "PENDING" {
		m.t.Fatalf("create answer = %+v", a)
	}
	return a.Job.JobID
}

// waitJob polls the job until it is READY or FAILED.
func (m *master) waitJob(jobID string) jobAnswer {
	m.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var a jobAnswer
		decode(m.t, call(m.t, http.MethodGet, m.base+"/cube/template/from-image?job_id="+jobID, "", nil), &a)
		if a.Job != nil && (a.Job.Status == "FAILED" || a.Job.Status == "READY") {
			return a
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("job never finished: %+v", a.Job)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// builtReport is a BUILT callback body for an artifact of data.
// builtReport is the BUILT callback a data plane sends for the job
// createJob submitted for templateID, with data as the artifact: its
// fingerprint is the one of that request built from the inputs it names.
func builtReport(t *testing.T, templateID string, data []byte) (body, artifactID string) {
	t.Helper()
	req := &core.FromImageRequest{SourceImageRef: "registry.example/app:1", WritableLayerSize: "1Gi", TemplateID: templateID}
	n, err := core.NormalizeFromImageRequest(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("cd", 32)
	fingerprint, err := core.FingerprintOf(n, core.BuildInputs{SourceImageDigest: digest, BuilderFormat: core.BuilderFormatVersion, Builder: "e2e/1"})
	if err != nil {
		t.Fatal(err)
	}
	aid, err := core.ArtifactIDFor(fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	body = fmt.Sprintf(`{"status":"BUILT","phase":"UPLOADING","progress":60,"artifact_id":%q,"template_spec_fingerprint":%q,`+
		`"source_image_digest":%q,"ext4_sha256":%q,"ext4_size_bytes":%d,"image_config_json":"{}",`+
		`"template_spec_inputs":{"source_image_digest":%q,"builder_format_version":%q,"builder":"e2e/1"}}`,
		aid, fingerprint, digest, hex.EncodeToString(sum[:]), len(data), digest, core.BuilderFormatVersion)
	return body, aid
}

type envelopeRet struct {
	Code int    `json:"ret_code"`
	Msg  string `json:"ret_msg"`
}

type jobAnswer struct {
	RequestID string      `json:"requestID"`
	Ret       envelopeRet `json:"ret"`
	Job       *struct {
		JobID        string `json:"job_id"`
		TemplateID   string `json:"template_id"`
		Status       string `json:"status"`
		Phase        string `json:"phase"`
		ErrorMessage string `json:"error_message"`
		ArtifactID   string `json:"artifact_id"`
	} `json:"job"`
}

// TestServeSmoke runs the real process against a SQLite file, a fake
// template center and no nodes: health, create-from-image forwarded to the
// data plane with the token, envelope codes, callback auth, and a BUILT
// callback whose resume fails for want of nodes without writing a
// definition; then a graceful SIGTERM.
func TestServeSmoke(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "cube.db")
	const token = "smoke-secret"
	tc := &fakeTC{}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()
	m := startMaster(t,
		// The shared name, as a single-database deployment sets it.
		"CUBE_TEMPLATE_CENTER_DB_DSN=sqlite://"+dbPath,
		"CUBE_TEMPLATE_CENTER_ADDR="+tcSrv.URL,
		"CUBE_TEMPLATE_CALLBACK_TOKEN="+token,
		"CUBE_MASTER_ENVD_HOST_DIR="+filepath.Join(dir, "no-envd"),
	)
	base := m.base

	if resp := call(t, http.MethodGet, base+"/metrics", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}

	// Create from image: forwarded to the data plane with the token and
	// this master's own download base URL.
	jobID := m.createJob("tpl-smoke")
	builds, tokens := tc.received()
	if len(builds) != 1 || builds[0].JobID != jobID || tokens[0] != token {
		t.Fatalf("template center got builds %+v with tokens %q, want job %s with the token", builds, tokens, jobID)
	}
	if builds[0].DownloadBaseURL != base || builds[0].Request == nil || builds[0].Request.SourceImageRef != "registry.example/app:1" {
		t.Fatalf("build request = %+v, want download base %s and the image", builds[0], base)
	}

	// Public API authentication (on by default): a wrong token is refused
	// with HTTP 200 and ret_code 130401, as upstream refuses.
	refused := call(t, http.MethodGet, base+"/cube/template", "", map[string]string{"Authorization": "Bearer not-the-token-000000"})
	var denied jobAnswer
	decode(t, refused, &denied)
	if refused.StatusCode != http.StatusOK || denied.Ret.Code != 130401 {
		t.Fatalf("wrong bearer token = HTTP %d %+v, want 200 with ret_code 130401", refused.StatusCode, denied.Ret)
	}

	// Envelope codes.
	var unknown jobAnswer
	decode(t, call(t, http.MethodGet, base+"/cube/template/from-image?job_id=no-such-job", "", nil), &unknown)
	if unknown.Ret.Code != 130404 {
		t.Fatalf("unknown job answer = %+v, want ret_code 130404", unknown)
	}
	var envd jobAnswer
	decode(t, call(t, http.MethodPost, base+"/cube/template/from-image",
		`{"requestID":"req-2","source_image_ref":"registry.example/app:1","writable_layer_size":"1Gi","template_id":"tpl-envd","container_overrides":{"annotations":{"cube.master.inject_envd":"true"}}}`, nil), &envd)
	if envd.Ret.Code != 130400 || !strings.Contains(envd.Ret.Msg, "envd") {
		t.Fatalf("envd opt-in without a binary = %+v, want 130400 naming envd", envd.Ret)
	}
	var mig jobAnswer
	decode(t, call(t, http.MethodPost, base+"/cube/template/migrate", `{"requestID":"req-3","template_id":"tpl-smoke"}`, nil), &mig)
	// tpl-smoke is still being built: it has no definition to migrate yet.
	if mig.Ret.Code != 130404 || !strings.Contains(mig.Ret.Msg, "tpl-smoke") {
		t.Fatalf("migrate = %+v, want 130404 naming the template", mig.Ret)
	}

	// The callback route: real statuses, token required.
	built, aid := builtReport(t, "tpl-smoke", []byte("not really ext4"))
	cb := base + wire.JobStatusPath(jobID)
	for name, hdr := range map[string]map[string]string{"no token": nil, "wrong token": {auth.Header: "guess"}} {
		if resp := call(t, http.MethodPost, cb, built, hdr); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("callback with %s = %d, want 401", name, resp.StatusCode)
		}
	}
	if resp := call(t, http.MethodPost, base+wire.JobStatusPath("no-such-job"), built, map[string]string{auth.Header: token}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("callback for an unknown job = %d, want 404", resp.StatusCode)
	}
	// The data plane holds the bytes it reports: the master, having no
	// row for the artifact, asks it before recording one.
	tc.mu.Lock()
	tc.artifact = []byte("not really ext4")
	tc.mu.Unlock()
	resp := call(t, http.MethodPost, cb, built, map[string]string{auth.Header: token})
	var ack wire.StatusOK
	decode(t, resp, &ack)
	if resp.StatusCode != http.StatusOK || !ack.Applied {
		t.Fatalf("BUILT callback = %d %+v, want 200 applied", resp.StatusCode, ack)
	}

	// The resume runs in the background and fails: no nodes.
	final := m.waitJob(jobID)
	if final.Ret.Code != 200 || final.Job.Status != "FAILED" || final.Job.ArtifactID != aid ||
		!strings.Contains(final.Job.ErrorMessage, core.ErrNoTemplateNodes.Error()) {
		t.Fatalf("final job = %+v, want FAILED with %q", final.Job, core.ErrNoTemplateNodes)
	}

	m.stop()
	if !strings.Contains(m.logs.String(), `"msg":"cubemaster stopped"`) {
		t.Fatalf("no structured JSON \"stopped\" log line")
	}

	// No definition row was written for the failed template.
	ctx := context.Background()
	st, err := entstore.Open(ctx, "sqlite://"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if d, err := st.Templates().GetDefinition(ctx, "tpl-smoke"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("definition after a failed resume = %+v, %v; want none", d, err)
	}
}

// TestServeDistributesToNodeAgent is the happy path with a real node
// agent (in-process, on loopback, with the gRPC health service): a BUILT
// callback makes the master probe-select the node, have it download the
// artifact through the master's proxied download route, snapshot, and end
// READY; deleting the template destroys the node's copy and asks the data
// plane to delete the artifact.
func TestServeDistributesToNodeAgent(t *testing.T) {
	dir := t.TempDir()
	const token = "dist-secret"
	data := bytes.Repeat([]byte("ext4-ish bytes "), 4096)
	tc := &fakeTC{artifact: data}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()

	nodeDir := filepath.Join(dir, "node")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := startMaster(t,
		"CUBE_MASTER_DB_DSN=sqlite://"+filepath.Join(dir, "cube.db"),
		"CUBE_TEMPLATE_CENTER_ADDR="+tcSrv.URL,
		"CUBE_TEMPLATE_CALLBACK_TOKEN="+token,
		"CUBE_MASTER_NODE_TOKEN="+nodeToken,
		// A second node is down: it is a target all the same, recorded
		// FAILED as down, not skipped.
		"CUBE_MASTER_NODES=node-1="+ln.Addr().String()+",node-down="+freeAddr(t),
	)
	// The node downloads from this master only, and answers it only.
	ag, err := agent.New(agent.Config{DataDir: nodeDir, NodeID: "node-1", Token: nodeToken, MasterURLs: []string{m.base},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gs := ag.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()
	waitHealthy(t, m.base+"/ready") // node-1 answers its probe

	jobID := m.createJob("tpl-dist")
	built, aid := builtReport(t, "tpl-dist", data)
	if resp := call(t, http.MethodPost, m.base+wire.JobStatusPath(jobID), built, map[string]string{auth.Header: token}); resp.StatusCode != http.StatusOK {
		t.Fatalf("BUILT callback = %d", resp.StatusCode)
	}
	final := m.waitJob(jobID)
	if final.Job.Status != "READY" {
		t.Fatalf("job = %+v, want READY", final.Job)
	}

	var tpl struct {
		Ret      envelopeRet `json:"ret"`
		Status   string      `json:"status"`
		Replicas []struct {
			NodeID string `json:"node_id"`
			Status string `json:"status"`
			Error  string `json:"error_message"`
		} `json:"replicas"`
	}
	decode(t, call(t, http.MethodGet, m.base+"/cube/template?template_id=tpl-dist", "", nil), &tpl)
	if tpl.Ret.Code != 200 || tpl.Status != "PARTIALLY_READY" || len(tpl.Replicas) != 2 || tpl.Replicas[0].NodeID != "node-1" || tpl.Replicas[0].Status != "READY" ||
		tpl.Replicas[1].NodeID != "node-down" || tpl.Replicas[1].Status != "FAILED" || !strings.Contains(tpl.Replicas[1].Error, "not healthy") {
		t.Fatalf("template = %+v, want PARTIALLY_READY: READY on node-1, node-down FAILED as not healthy", tpl)
	}
	ext4 := filepath.Join(nodeDir, core.DefaultInstanceType, aid, aid+".ext4")
	if got, err := os.ReadFile(ext4); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("node copy %s: %d bytes, %v; want the artifact", ext4, len(got), err)
	}

	var del struct {
		Ret envelopeRet `json:"ret"`
	}
	decode(t, call(t, http.MethodDelete, m.base+"/cube/template", `{"RequestID":"req-del","template_id":"tpl-dist"}`, nil), &del)
	if del.Ret.Code != 200 {
		t.Fatalf("delete = %+v", del.Ret)
	}
	if _, err := os.Stat(ext4); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("node copy after delete: %v, want it gone", err)
	}
	if got := tc.deletes(); len(got) != 1 || got[0] != aid {
		t.Fatalf("data plane deletes = %q, want [%s]", got, aid)
	}
	m.stop()
}

func call(t *testing.T, method, url, body string, header map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if strings.HasPrefix(req.URL.Path, "/cube/") {
		req.Header.Set("Authorization", "Bearer "+apiBearer)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

func decode(t *testing.T, resp *http.Response, dst any) {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, dst); err != nil {
		t.Fatalf("decode %s answer %q: %v", resp.Request.URL.Path, b, err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never became healthy", url)
}

// TestPrintConfigAndVersion: --print-config shows the effective settings
// with their sources and no secret; an unknown variable is reported with
// the nearest known name; --version says what was built.
func TestPrintConfigAndVersion(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "serve", "--print-config", "--listen", "127.0.0.1:7001")
	cmd.Env = cleanEnv("CUBE_TEMPLATE_CALLBACK_TOKEN=very-secret-token", "CUBE_MASTER_NODE=node-1=127.0.0.1:1",
		"CUBE_MASTER_DB_DSN=postgres://cube:dbpass@127.0.0.1:5432/cube")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("--print-config: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{"CUBE_MASTER_LISTEN", "127.0.0.1:7001", "flag --listen", "<redacted>",
		"postgres://cube:<redacted>@127.0.0.1:5432/cube", "CUBE_MASTER_SWEEP_INTERVAL"} {
		if !strings.Contains(s, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, s)
		}
	}
	for _, secret := range []string{"very-secret-token", "dbpass"} {
		if strings.Contains(s, secret) {
			t.Errorf("--print-config shows %q", secret)
		}
	}
	// The unknown variable is warned about when serving.
	cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
	cmd.Env = cleanEnv("CUBE_MASTER_NODE=x", "CUBE_MASTER_DB_DSN=sqlite://"+filepath.Join(t.TempDir(), "m.db"))
	out, _ = cmd.CombinedOutput() // refuses: no token
	if !strings.Contains(string(out), "did you mean CUBE_MASTER_NODES?") {
		t.Errorf("no warning for CUBE_MASTER_NODE:\n%s", out)
	}
	out, err = exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "cubemaster ") || !strings.Contains(string(out), "go1.") {
		t.Errorf("--version: %v %q", err, out)
	}
}
