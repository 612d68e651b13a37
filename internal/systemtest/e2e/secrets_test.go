package e2e

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// apiToken is the bearer token the cluster's master accepts on its public
// API (startCluster configures it and call sends it).
func (c *cluster) apiToken() string { return "api-" + c.token }

// basicRegistry stands in for a private registry: it proxies to the test
// registry and answers 401 with a Basic challenge unless the request
// carries user:password.
type basicRegistry struct {
	user, password string
	next           *httputil.ReverseProxy
	mu             sync.Mutex
	authorized     int
	refused        int
}

func (b *basicRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u, p, ok := r.BasicAuth()
	if !ok || u != b.user || p != b.password {
		b.mu.Lock()
		b.refused++
		b.mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Basic realm="e2e-private"`)
		w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
		return
	}
	b.mu.Lock()
	b.authorized++
	b.mu.Unlock()
	r.Header.Del("Authorization")
	b.next.ServeHTTP(w, r)
}

// secretsRig is one master, one data plane and one node agent on a fresh
// MariaDB database, with a private registry, debug logs everywhere and
// both kinds of public API credential configured.
type secretsRig struct {
	t                      *testing.T
	bin                    string
	token                  string // callback token
	sealingKey             string // CUBE_MASTER_SEALING_KEYS
	bearer, user, secret   string // public API credentials
	regUser, regPassword   string
	dsn, dsnPassword       string
	db                     *sql.DB
	masterAddr, masterURL  string
	master, tc, node       *proc
	masters                []*proc // every master process started, for their logs
	bodies                 map[string][]byte
	mu                     sync.Mutex
	registry               *basicRegistry
	registryHost, nodeData string
}

func startSecretsRig(t *testing.T) *secretsRig {
	t.Helper()
	bin := buildBinaries(t)
	if out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/cubesandbox/templatecenter/apps/cubemastercli").CombinedOutput(); err != nil {
		t.Fatalf("go build cubemastercli: %v\n%s", err, out)
	}
	r := &secretsRig{t: t, bin: bin, token: "cb-" + randHex(16), sealingKey: "e2e:" + randHex(20), bearer: "bearer-" + randHex(16), user: "ops-" + randHex(3),
		secret: "sk-" + randHex(16), regUser: "robot", regPassword: "regpw-" + randHex(12), bodies: map[string][]byte{}}
	r.dsn, r.db = freshMariaDB(t)
	if cfg, err := mysql.ParseDSN(strings.TrimPrefix(r.dsn, "mysql://")); err == nil {
		r.dsnPassword = cfg.Passwd
	}

	target, _ := url.Parse("http://" + testenv.Get(t, testenv.Registry))
	r.registry = &basicRegistry{user: r.regUser, password: r.regPassword, next: httputil.NewSingleHostReverseProxy(target)}
	regSrv := httptest.NewServer(r.registry)
	t.Cleanup(regSrv.Close)
	r.registryHost = strings.TrimPrefix(regSrv.URL, "http://")

	dir := t.TempDir()
	r.masterAddr = freeAddr(t)
	r.masterURL = "http://" + r.masterAddr
	tcAddr, nodeAddr := freeAddr(t), freeAddr(t)
	r.nodeData = filepath.Join(dir, "node")
	work := filepath.Join(dir, "work")
	r.tc = &proc{name: "templatecenter", bin: filepath.Join(bin, "templatecenter"), args: []string{"serve", "--listen", tcAddr, "--log-level", "debug"},
		env: []string{
			"CUBE_TEMPLATE_CENTER_DB_DSN=" + r.dsn,
			"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR=" + work,
			"CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR=" + filepath.Join(work, "store"),
			"CUBE_TEMPLATE_CENTER_PLUGIN_DIR=" + bin,
			"CUBE_TEMPLATE_CENTER_BUILDER=ext4stream",
			"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES=" + r.registryHost,
			"CUBE_TEMPLATE_CALLBACK_TOKEN=" + r.token,
			"CUBE_MASTER_ADDR=" + r.masterURL,
		}}
	r.node = &proc{name: "nodeagent", bin: filepath.Join(bin, "nodeagent"),
		args: []string{"--listen", nodeAddr, "--data-dir", r.nodeData, "--node-id", "node-1", "--log-level", "debug", "--master-urls", r.masterURL},
		env:  []string{"CUBE_NODEAGENT_TOKEN=" + e2eNodeToken}}
	r.master = r.newMaster(tcAddr, nodeAddr, "true")
	t.Cleanup(func() {
		for _, p := range append([]*proc{r.master, r.tc, r.node}, r.masters...) {
			p.stop()
			if t.Failed() && p.log != nil {
				t.Logf("---- %s log ----\n%s", p.name, tail(p.log.String(), 6000))
			}
		}
	})
	r.master.start(t)
	waitHTTP(t, r.masterURL+"/notify/health")
	r.tc.start(t)
	waitHTTP(t, "http://"+tcAddr+"/health")
	r.node.start(t)
	waitTCP(t, nodeAddr)
	return r
}

// newMaster is a master process; authOn is CUBE_MASTER_AUTH.
func (r *secretsRig) newMaster(tcAddr, nodeAddr, authOn string) *proc {
	p := &proc{name: "cubemaster (auth " + authOn + ")", bin: filepath.Join(r.bin, "cubemaster"), args: []string{"serve", "--listen", r.masterAddr, "--log-level", "debug"},
		env: []string{
			"CUBE_MASTER_DB_DSN=" + r.dsn,
			"CUBE_TEMPLATE_CENTER_ADDR=http://" + tcAddr,
			"CUBE_TEMPLATE_CALLBACK_TOKEN=" + r.token,
			"CUBE_MASTER_NODES=node-1=" + nodeAddr,
			"CUBE_MASTER_DOWNLOAD_BASE_URL=" + r.masterURL,
			"CUBE_MASTER_SWEEP_INTERVAL=1s",
			"CUBE_MASTER_AUTH=" + authOn,
			"CUBE_MASTER_AUTH_BEARER_TOKENS=" + r.bearer,
			"CUBE_MASTER_AUTH_SECRET_KEYS=" + r.user + "=" + r.secret,
			"CUBE_MASTER_NODE_TOKEN=" + e2eNodeToken,
			"CUBE_MASTER_SEALING_KEYS=" + r.sealingKey,
		}}
	r.masters = append(r.masters, p)
	return p
}

type credential int

const (
	anonymous credential = iota
	bearer
	signed
	wrongBearer
)

// api calls the master and keeps the body under label for the final scan.
func (r *secretsRig) api(label string, cred credential, method, path string, body any) []byte {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.masterURL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	switch cred {
	case bearer:
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	case wrongBearer:
		req.Header.Set("Authorization", "Bearer not-"+r.bearer)
	case signed:
		auth.SetSigned(req.Header, r.user, r.secret, "nonce-"+randHex(8), auth.MethodSHA256, time.Now())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s: %v", label, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r.mu.Lock()
	r.bodies[label] = raw
	r.mu.Unlock()
	return raw
}

type jobView struct {
	Status       string `json:"status"`
	ArtifactID   string `json:"artifact_id"`
	ErrorMessage string `json:"error_message"`
}

// waitJob polls a job (signed requests) until it is READY or FAILED.
func (r *secretsRig) waitJob(jobID string) jobView {
	r.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		raw := r.api("poll "+jobID, signed, http.MethodGet, "/cube/template/from-image?job_id="+jobID, nil)
		var j struct {
			Job jobView `json:"job"`
		}
		json.Unmarshal(raw, &j)
		if j.Job.Status == "READY" || j.Job.Status == "FAILED" {
			return j.Job
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("job %s not done: %s", jobID, raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func retOf(t *testing.T, label string, raw []byte) int {
	t.Helper()
	var e struct {
		Ret struct {
			Code int `json:"ret_code"`
		} `json:"ret"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("%s: not JSON: %q", label, raw)
	}
	return e.Ret.Code
}

// cli runs cubemastercli against the master with env added and keeps its
// output under label.
func (r *secretsRig) cli(label string, env []string, args ...string) string {
	r.t.Helper()
	host, port, _ := strings.Cut(r.masterAddr, ":")
	cmd := exec.Command(filepath.Join(r.bin, "cubemastercli"), append([]string{"-a", host, "-p", port}, args...)...)
	cmd.Env = append(cleanCLIEnv(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("%s: cubemastercli %v: %v\n%s", label, args, err, out)
	}
	r.mu.Lock()
	r.bodies[label] = out
	r.mu.Unlock()
	return string(out)
}

func cleanCLIEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUBE_MASTER_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestSecretsNeverLeak: a template built from a private registry (the
// credentials are really needed), then every read route of the public API
// and the CLI, with authentication on (authenticated callers see the
// artifact download token where a request carries it; refused callers see
// nothing) and off (the token is always redacted). Neither the registry
// password, nor the bearer token, nor the signing key, nor the node
// credential appears in any answer, any CLI output, any log line of any
// process, or the job row; the download token appears in no log line and
// only in answers to authenticated callers.
func TestSecretsNeverLeak(t *testing.T) {
	r := startSecretsRig(t)
	// The image is pushed to the test registry directly and pulled
	// through the private one.
	ref := pushImage(t, testenv.Get(t, testenv.Registry), "private", 0)
	ref = r.registryHost + strings.TrimPrefix(ref, testenv.Get(t, testenv.Registry))
	const tid = "tpl-secrets"

	create := r.api("create", bearer, http.MethodPost, "/cube/template/from-image", map[string]any{
		"requestID": "req-" + randHex(4), "source_image_ref": ref, "template_id": tid, "writable_layer_size": "1Gi",
		"registry_username": r.regUser, "registry_password": r.regPassword,
	})
	var job struct {
		Job struct {
			JobID string `json:"job_id"`
		} `json:"job"`
	}
	if json.Unmarshal(create, &job) != nil || job.Job.JobID == "" {
		t.Fatalf("create: %s", create)
	}
	finished := r.waitJob(job.Job.JobID)
	if finished.Status != "READY" {
		t.Fatalf("job %s: %s", finished.Status, finished.ErrorMessage)
	}
	r.registry.mu.Lock()
	if r.registry.authorized == 0 {
		t.Fatal("the private registry never saw its credentials: the test proves nothing")
	}
	r.registry.mu.Unlock()
	aid := finished.ArtifactID
	var dlSeed string
	if err := r.db.QueryRow("SELECT download_token FROM t_cube_rootfs_artifact WHERE artifact_id = ?", aid).Scan(&dlSeed); err != nil || !core.IsDownloadSeed(dlSeed) {
		t.Fatalf("download token seed of %s: %q %v", aid, dlSeed, err)
	}
	// What nodes download with: derived from the seed and the callback
	// token, never stored.
	dlToken := core.NewDownloadTokens(r.token).For(aid, dlSeed)
	// Wrong credentials: the build fails on the data plane, which logs and
	// reports why; neither the report nor the log may quote the password.
	wrongPassword := "wrongpw-" + randHex(12)
	badCreate := r.api("create with a wrong password", bearer, http.MethodPost, "/cube/template/from-image", map[string]any{
		"requestID": "req-" + randHex(4), "source_image_ref": ref, "template_id": tid + "-denied", "writable_layer_size": "1Gi",
		"registry_username": r.regUser, "registry_password": wrongPassword,
	})
	var badJob struct {
		Job struct {
			JobID string `json:"job_id"`
		} `json:"job"`
	}
	if json.Unmarshal(badCreate, &badJob) != nil || badJob.Job.JobID == "" {
		t.Fatalf("create with a wrong password: %s", badCreate)
	}
	if j := r.waitJob(badJob.Job.JobID); j.Status != "FAILED" {
		t.Fatalf("a build with a wrong registry password is %s", j.Status)
	}
	r.api("failed job", signed, http.MethodGet, "/cube/template/from-image?job_id="+badJob.Job.JobID, nil)
	r.api("failed build status", signed, http.MethodGet, "/cube/template/build/"+badJob.Job.JobID+"/status", nil)
	r.api("failed template", signed, http.MethodGet, "/cube/template?template_id="+tid+"-denied&include_request=true", nil)

	// The job row keeps the credentials sealed, never in the clear.
	var reqJSON, sealed string
	if err := r.db.QueryRow("SELECT COALESCE(request_json,''), COALESCE(registry_auth,'') FROM t_cube_template_image_job WHERE job_id = ?", job.Job.JobID).Scan(&reqJSON, &sealed); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(reqJSON+sealed, r.regPassword) || sealed == "" {
		t.Fatalf("job row: request %q, registry_auth sealed=%v", reqJSON, sealed != "")
	}

	// Every read route, authenticated: the stored and generated requests
	// carry the download token, which these callers may see.
	reqBody := map[string]any{"requestID": "req-r", "annotations": map[string]string{"cube.master.appsnapshot.template.id": tid}}
	reads := func(prefix string, cred credential) {
		r.api(prefix+"list", cred, http.MethodGet, "/cube/template", nil)
		r.api(prefix+"info", cred, http.MethodGet, "/cube/template?template_id="+tid, nil)
		r.api(prefix+"info+request", cred, http.MethodGet, "/cube/template?template_id="+tid+"&include_request=true", nil)
		r.api(prefix+"resolve GET", cred, http.MethodGet, "/cube/template/resolve?template="+tid, nil)
		r.api(prefix+"resolve POST", cred, http.MethodPost, "/cube/template/resolve", reqBody)
		r.api(prefix+"preview", cred, http.MethodPost, "/cube/sandbox/preview", reqBody)
		r.api(prefix+"job", cred, http.MethodGet, "/cube/template/from-image?job_id="+job.Job.JobID, nil)
		r.api(prefix+"build status", cred, http.MethodGet, "/cube/template/build/"+job.Job.JobID+"/status", nil)
		r.api(prefix+"rootfs artifact", cred, http.MethodGet, "/cube/rootfs-artifact?artifact_id="+aid, nil)
		r.api(prefix+"compat", cred, http.MethodGet, "/cube/template/compat", nil)
		r.api(prefix+"alias", cred, http.MethodPut, "/cube/template/"+tid+"/alias", map[string]any{"requestID": "req-a", "alias": "secret-web"})
		r.api(prefix+"info by alias", cred, http.MethodGet, "/cube/template?template_id=secret-web&include_request=1", nil)
		for _, ops := range []string{"/notify/health", "/ready", "/metrics", "/openapi.json"} {
			r.api(prefix+ops, anonymous, http.MethodGet, ops, nil)
		}
	}
	reads("bearer: ", bearer)
	reads("signed: ", signed)
	for _, label := range []string{"bearer: info+request", "bearer: resolve GET", "signed: resolve POST", "signed: preview", "bearer: info by alias"} {
		if code := retOf(t, label, r.bodies[label]); code != 200 {
			t.Fatalf("%s: ret_code %d: %s", label, code, r.bodies[label])
		}
		if !bytes.Contains(r.bodies[label], []byte(dlToken)) {
			t.Errorf("%s: an authenticated caller does not see the download token: %s", label, r.bodies[label])
		}
	}
	redo := r.api("redo", bearer, http.MethodPost, "/cube/template/redo", map[string]any{"requestID": "req-redo", "template_id": tid})
	var redone struct {
		Job struct {
			JobID string `json:"job_id"`
		} `json:"job"`
	}
	if json.Unmarshal(redo, &redone); retOf(t, "redo", redo) != 200 || redone.Job.JobID == "" {
		t.Fatalf("redo: %s", redo)
	}
	if j := r.waitJob(redone.Job.JobID); j.Status != "READY" {
		t.Fatalf("redo job %s: %s", j.Status, j.ErrorMessage)
	}

	// Refused callers: 130401 and nothing else.
	for _, cred := range []credential{anonymous, wrongBearer} {
		for _, path := range []string{"/cube/template?template_id=" + tid + "&include_request=true", "/cube/template/resolve?template=" + tid} {
			label := fmt.Sprintf("refused %d %s", cred, path)
			raw := r.api(label, cred, http.MethodGet, path, nil)
			if retOf(t, label, raw) != 130401 {
				t.Fatalf("%s: %s", label, raw)
			}
			if bytes.Contains(raw, []byte(dlToken)) {
				t.Fatalf("%s shows the download token", label)
			}
		}
	}

	// The CLI, authenticated both ways.
	tokenEnv := []string{"CUBE_MASTER_TOKEN=" + r.bearer}
	signEnv := []string{"CUBE_MASTER_USER_ID=" + r.user, "CUBE_MASTER_SECRET_KEY=" + r.secret}
	renderFile := filepath.Join(t.TempDir(), "req.json")
	b, _ := json.Marshal(reqBody)
	os.WriteFile(renderFile, b, 0o600)
	for name, env := range map[string][]string{"token": tokenEnv, "signed": signEnv} {
		r.cli("cli "+name+" list", env, "tpl", "list")
		info := r.cli("cli "+name+" info", env, "tpl", "info", tid, "--include-request")
		if !strings.Contains(info, dlToken) {
			t.Errorf("cli %s: an authenticated tpl info does not show the download token:\n%s", name, info)
		}
		r.cli("cli "+name+" status", env, "tpl", "status", "--job-id", job.Job.JobID)
		r.cli("cli "+name+" build-status", env, "tpl", "build-status", job.Job.JobID)
		r.cli("cli "+name+" render", env, "tpl", "render", "-f", renderFile, "--json")
	}

	// The node downloaded the artifact; the download is the only place the
	// token travels, in a header and the URL, never into a log line.
	r.mu.Lock()
	authBodies := map[string][]byte{}
	for k, v := range r.bodies {
		authBodies[k] = v
	}
	r.bodies = map[string][]byte{}
	r.mu.Unlock()

	// Authentication off (dev mode's setting): the same reads answer, and
	// the download token is redacted from all of them.
	tcAddr := strings.TrimPrefix(envValue(r.master.env, "CUBE_TEMPLATE_CENTER_ADDR"), "http://")
	nodeAddr := strings.TrimPrefix(envValue(r.master.env, "CUBE_MASTER_NODES"), "node-1=")
	r.master.stop()
	r.master = r.newMaster(tcAddr, nodeAddr, "false")
	r.master.start(t)
	waitHTTP(t, r.masterURL+"/notify/health")
	reads("open: ", anonymous)
	r.cli("cli open info", nil, "tpl", "info", tid, "--include-request")
	r.cli("cli open render", nil, "tpl", "render", "-f", renderFile, "--json")
	for _, label := range []string{"open: info+request", "open: resolve GET", "open: resolve POST", "open: preview"} {
		if code := retOf(t, label, r.bodies[label]); code != 200 {
			t.Fatalf("%s: ret_code %d: %s", label, code, r.bodies[label])
		}
		if !bytes.Contains(r.bodies[label], []byte("REDACTED")) {
			t.Errorf("%s: nothing redacted: %s", label, r.bodies[label])
		}
	}

	// The scan.
	never := map[string]string{"registry password": r.regPassword, "wrong registry password": wrongPassword, "bearer token": r.bearer, "signing key": r.secret,
		"registry basic auth": base64.StdEncoding.EncodeToString([]byte(r.regUser + ":" + r.regPassword)), "callback token": r.token,
		"node credential": e2eNodeToken, "sealing key": strings.TrimPrefix(r.sealingKey, "e2e:"), "download token seed": dlSeed}
	if r.dsnPassword != "" {
		never["database password"] = ":" + r.dsnPassword + "@"
	}
	check := func(where string, text []byte, allowDownloadToken bool) {
		for what, s := range never {
			if bytes.Contains(text, []byte(s)) {
				t.Errorf("%s contains the %s", where, what)
			}
		}
		if !allowDownloadToken && bytes.Contains(text, []byte(dlToken)) {
			t.Errorf("%s contains the download token", where)
		}
	}
	for label, body := range authBodies {
		check("authenticated answer "+strings.TrimSpace(label), body, true)
	}
	for label, body := range r.bodies {
		check("answer "+strings.TrimSpace(label), body, false)
	}
	lines := 0
	for _, p := range append([]*proc{r.tc, r.node}, r.masters...) {
		for i, line := range strings.Split(p.log.String(), "\n") {
			lines++
			check(fmt.Sprintf("%s log line %d", p.name, i+1), []byte(line), false)
		}
	}
	if !strings.Contains(r.tc.log.String(), "build failed") {
		t.Errorf("the data plane did not log the denied build: its failure path was not scanned")
	}
	if lines < 30 {
		t.Fatalf("only %d log lines: are the processes logging?", lines)
	}
	t.Logf("scanned %d answers and %d log lines", len(authBodies)+len(r.bodies), lines)
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}
