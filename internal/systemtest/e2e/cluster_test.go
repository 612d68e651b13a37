package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// proc is one child process with its log.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	cmd  *exec.Cmd
	log  *testenv.Buffer
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	if p.log == nil {
		p.log = &testenv.Buffer{}
	}
	fmt.Fprintf(p.log, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
}

// stop ends the process gracefully (SIGTERM), then waits.
func (p *proc) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// kill9 ends the process the hard way, as a crash would.
func (p *proc) kill9() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.cmd = nil
}

// cluster is the running system.
type cluster struct {
	t         *testing.T
	dir       string
	registry  string
	token     string
	tc        []*proc
	tcURLs    []string
	master    *proc
	masterURL string
	nodes     []*proc
	nodeAddrs []string
	nodeDirs  []string
	db        *sql.DB
	// s3Prefix is the key prefix of the cluster's artifacts in the test
	// bucket; masterLocalDir is the master's legacy local artifact root.
	s3Prefix       string
	masterLocalDir string
	lb             *balancer
}

func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range []string{"apps/templatecenter", "apps/cubemaster", "apps/nodeagent", "plugins/ext4stream"} {
		out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/cubesandbox/templatecenter/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
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

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// freshMariaDB creates a database for this run and returns its DSN and a
// handle for assertions.
func freshMariaDB(t *testing.T) (string, *sql.DB) {
	t.Helper()
	base := testenv.Get(t, testenv.MySQLDSN)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	name := "cube_e2e_" + randHex(6)
	if _, err := admin.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name); admin.Close() })
	cfg.DBName = name
	cfg.ParseTime = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return "mysql://" + cfg.FormatDSN(), db
}

// balancer stands in for a Service in front of the templatecenter
// replicas: builds go round-robin, everything else to the first replica up;
// replicas that do not accept connections are skipped. It records which
// replica took each build.
type balancer struct {
	urls   []string
	mu     sync.Mutex
	next   int
	builds []int
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	isBuild := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/build")
	start := 0
	if isBuild {
		b.mu.Lock()
		start = b.next
		b.next = (b.next + 1) % len(b.urls)
		b.mu.Unlock()
	}
	for i := range b.urls {
		idx := (start + i) % len(b.urls)
		target, _ := url.Parse(b.urls[idx])
		conn, err := net.DialTimeout("tcp", target.Host, time.Second)
		if err != nil {
			continue
		}
		conn.Close()
		if isBuild {
			b.mu.Lock()
			b.builds = append(b.builds, idx)
			b.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
		return
	}
	http.Error(w, "no templatecenter replica is up", http.StatusBadGateway)
}

// lastBuilds returns the replicas that took the last n builds.
func (b *balancer) lastBuilds(n int) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.builds) < n {
		return append([]int(nil), b.builds...)
	}
	return append([]int(nil), b.builds[len(b.builds)-n:]...)
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), token: "e2e-" + randHex(16)}
	c.registry = testenv.Get(t, testenv.Registry)
	redis := testenv.Get(t, testenv.RedisAddr)
	c.s3Prefix = "e2e-" + randHex(4) + "/"
	c.masterLocalDir = filepath.Join(c.dir, "master-local")
	s3 := []string{
		"CUBE_S3_ENDPOINT=" + testenv.Get(t, testenv.S3Endpoint),
		"CUBE_S3_BUCKET=" + testenv.Get(t, testenv.S3Bucket),
		"CUBE_S3_ACCESS_KEY=" + testenv.Get(t, testenv.S3AccessKey),
		"CUBE_S3_SECRET_KEY=" + testenv.Get(t, testenv.S3SecretKey),
		"CUBE_S3_REGION=us-east-1", "CUBE_S3_USE_PATH_STYLE=true", "CUBE_S3_USE_SSL=false",
		"CUBE_S3_ARTIFACT_PREFIX=" + c.s3Prefix,
	}
	dsn, db := freshMariaDB(t)
	c.db = db
	bin := buildBinaries(t)

	masterAddr := freeAddr(t)
	c.masterURL = "http://" + masterAddr
	for i := 0; i < 2; i++ {
		addr := freeAddr(t)
		c.tcURLs = append(c.tcURLs, "http://"+addr)
		work := filepath.Join(c.dir, fmt.Sprintf("tc%d", i))
		p := &proc{name: fmt.Sprintf("templatecenter-%d", i), bin: filepath.Join(bin, "templatecenter"), args: []string{"serve", "--listen", addr},
			env: append([]string{
				"CUBE_TEMPLATE_CENTER_DB_DSN=" + dsn,
				"CUBE_TEMPLATE_CENTER_CHUNKS=true", // the default; TestChunkedDistribution needs it
				"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR=" + work,
				"CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR=" + filepath.Join(work, "store"),
				"CUBE_TEMPLATE_CENTER_PLUGIN_DIR=" + bin,
				"CUBE_TEMPLATE_CENTER_BUILDER=ext4stream",
				"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES=" + c.registry,
				"CUBE_TEMPLATE_CENTER_REDIS_ADDR=" + redis,
				"CUBE_TEMPLATE_CALLBACK_TOKEN=" + c.token,
				"CUBE_MASTER_ADDR=" + c.masterURL,
				"CUBE_TEMPLATE_CENTER_RECONCILE_INTERVAL=1s",
				"CUBE_TEMPLATE_CENTER_RECONCILE_PENDING_STALE_AFTER=20s",
				"CUBE_TEMPLATE_CENTER_RECONCILE_PULLING_STALE_AFTER=8s",
				"CUBE_TEMPLATE_CENTER_RECONCILE_RUNNING_STALE_AFTER=8s",
			}, s3...)}
		c.tc = append(c.tc, p)
	}
	c.lb = &balancer{urls: c.tcURLs}
	lb := httptest.NewServer(c.lb)
	t.Cleanup(lb.Close)

	var nodesSpec []string
	for i := 0; i < 2; i++ {
		addr := freeAddr(t)
		data := filepath.Join(c.dir, fmt.Sprintf("node%d", i))
		c.nodeAddrs = append(c.nodeAddrs, addr)
		c.nodeDirs = append(c.nodeDirs, data)
		id := fmt.Sprintf("node-%d", i+1)
		nodesSpec = append(nodesSpec, id+"="+addr)
		c.nodes = append(c.nodes, &proc{name: id, bin: filepath.Join(bin, "nodeagent"),
			args: []string{"--listen", addr, "--data-dir", data, "--node-id", id, "--master-urls", c.masterURL},
			env:  []string{"CUBE_NODEAGENT_TOKEN=" + e2eNodeToken}})
	}
	c.master = &proc{name: "cubemaster", bin: filepath.Join(bin, "cubemaster"), args: []string{"serve", "--listen", masterAddr},
		env: []string{
			"CUBE_MASTER_DB_DSN=" + dsn,
			"CUBE_TEMPLATE_CENTER_ADDR=" + lb.URL,
			"CUBE_TEMPLATE_CALLBACK_TOKEN=" + c.token,
			"CUBE_MASTER_NODES=" + strings.Join(nodesSpec, ","),
			"CUBE_MASTER_DOWNLOAD_BASE_URL=" + c.masterURL,
			"CUBE_TEMPLATE_CENTER_REDIS_ADDR=" + redis,
			"CUBE_MASTER_SWEEP_INTERVAL=2s",
			// Healthy nodes are re-probed rarely, so a node that goes down
			// is still a distribution target (what a real outage between
			// probes looks like); unhealthy nodes are re-checked at once.
			"CUBE_MASTER_NODE_PROBE_INTERVAL=1h",
			"CUBE_MASTER_LOCAL_ARTIFACT_DIR=" + c.masterLocalDir,
			"CUBE_MASTER_AUTH_BEARER_TOKENS=" + c.apiToken(),
			"CUBE_MASTER_NODE_TOKEN=" + e2eNodeToken,
		}}

	t.Cleanup(func() {
		for _, p := range append(append([]*proc{c.master}, c.tc...), c.nodes...) {
			p.stop()
			if t.Failed() && p.log != nil {
				t.Logf("---- %s log ----\n%s", p.name, tail(p.log.String(), 6000))
			}
		}
	})
	// The master migrates the shared schema; start it first.
	c.master.start(t)
	waitHTTP(t, c.masterURL+"/notify/health")
	for i, p := range c.tc {
		p.start(t)
		waitHTTP(t, c.tcURLs[i]+"/health")
	}
	for _, p := range c.nodes {
		p.start(t)
	}
	for _, a := range c.nodeAddrs {
		waitTCP(t, a)
	}
	return c
}

// e2eNodeToken is the node credential the test masters and node agents
// share.
const e2eNodeToken = "e2e-node-token-0123456789"

func tail(s string, n int) string {
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

func waitHTTP(t *testing.T, u string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200", u)
}

func waitTCP(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never accepted connections", addr)
}

// envelope is the upstream response shape.
type envelope struct {
	RequestID string `json:"requestID"`
	Ret       struct {
		Code int    `json:"ret_code"`
		Msg  string `json:"ret_msg"`
	} `json:"ret"`
	Job *struct {
		JobID             string `json:"job_id"`
		TemplateID        string `json:"template_id"`
		Status            string `json:"status"`
		Phase             string `json:"phase"`
		ErrorMessage      string `json:"error_message"`
		ArtifactID        string `json:"artifact_id"`
		ExpectedNodeCount int    `json:"expected_node_count"`
		ReadyNodeCount    int    `json:"ready_node_count"`
		FailedNodeCount   int    `json:"failed_node_count"`
		TemplateStatus    string `json:"template_status"`
		Artifact          *struct {
			SHA256 string `json:"ext4_sha256"`
			Size   int64  `json:"ext4_size_bytes"`
		} `json:"artifact"`
	} `json:"job"`
	Raw json.RawMessage `json:"-"`
}

func (c *cluster) call(method, path string, body any) envelope {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(context.Background(), method, c.masterURL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.apiToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e envelope
	if err := json.Unmarshal(raw, &e); err != nil {
		c.t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, raw, err)
	}
	e.Raw = raw
	return e
}

func (c *cluster) createFromImage(templateID, image string) envelope {
	return c.call(http.MethodPost, "/cube/template/from-image", map[string]any{
		"requestID": "req-" + randHex(4), "source_image_ref": image, "template_id": templateID,
		"writable_layer_size": "1Gi",
	})
}

// waitJob polls the job until it is terminal.
func (c *cluster) waitJob(jobID string, timeout time.Duration) envelope {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var e envelope
	for time.Now().Before(deadline) {
		e = c.call(http.MethodGet, "/cube/template/from-image?job_id="+jobID, nil)
		if e.Job != nil && (e.Job.Status == "READY" || e.Job.Status == "FAILED") {
			return e
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("job %s not terminal after %v: %s", jobID, timeout, e.Raw)
	return e
}

// nodeArtifact is where a node agent keeps an artifact.
func (c *cluster) nodeArtifact(node int, artifactID string) string {
	return filepath.Join(c.nodeDirs[node], "cubebox", artifactID, artifactID+".ext4")
}

// waitTemplateStatus polls GET /cube/template until the template has status.
func (c *cluster) waitTemplateStatus(templateID, status string, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var raw []byte
	for time.Now().Before(deadline) {
		e := c.call(http.MethodGet, "/cube/template?template_id="+templateID, nil)
		raw = e.Raw
		var t struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(e.Raw, &t) == nil && t.Status == status {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	c.t.Fatalf("template %s not %s after %v: %s", templateID, status, timeout, raw)
}

// freshBuilds sums, over the template-center replicas, the builds that
// made an image (a reuse of a READY artifact observes no phase).
func (c *cluster) freshBuilds(t *testing.T) int {
	t.Helper()
	n := 0
	for _, u := range c.tcURLs {
		v, _ := value(scrape(t, u+"/metrics"), `cube_template_build_phase_duration_seconds_count{phase="BUILDING_EXT4"}`)
		n += int(v)
	}
	return n
}

// waitIdle waits until no replica runs a build, so every finished build is
// counted in its metrics (a build is counted before it stops being active).
func (c *cluster) waitIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		active := 0.0
		for _, u := range c.tcURLs {
			v, ok := value(scrape(t, u+"/metrics"), "cube_template_active_builds")
			if !ok {
				t.Fatalf("%s/metrics has no cube_template_active_builds", u)
			}
			active += v
		}
		if active == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v builds still active", active)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jobReused reports whether a replica logged that job jobID reused an
// artifact instead of building it.
func (c *cluster) jobReused(jobID string) bool {
	for _, p := range c.tc {
		for _, line := range strings.Split(p.log.String(), "\n") {
			if strings.Contains(line, "reusing") && strings.Contains(line, jobID) {
				return true
			}
		}
	}
	return false
}
