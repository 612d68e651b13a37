package harness

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

// Options shape a cluster.
type Options struct {
	Masters    int // default 1
	DataPlanes int // default 2
	Nodes      int // default 2
	// PrivateDB runs the cluster on its own MariaDB server (which the
	// suite may kill); otherwise on a fresh database of
	// CUBE_TEST_MYSQL_DSN.
	PrivateDB bool
	// PrivateRedis runs its own redis-server (which the suite may kill);
	// otherwise CUBE_TEST_REDIS_ADDR is used.
	PrivateRedis bool
	// MaxConcurrentBuilds per data-plane replica (default 4).
	MaxConcurrentBuilds int
	// TCEnv and MasterEnv are added to (and win over) the defaults.
	TCEnv     []string
	MasterEnv []string
	// Defaults runs the services on their default timings: none of the
	// short sweep, probe, reconcile and registry intervals the fault
	// suite sets to finish sooner. Failure paths are then tested as a
	// user meets them.
	Defaults bool
	// NoRedis runs the services without Redis (live progress then reaches
	// the master through the data plane's status reports alone).
	NoRedis bool
}

// Cluster is a running system: masters, data-plane replicas and node
// agents as processes, with proxies between them.
type Cluster struct {
	T     testing.TB
	Dir   string
	Bin   string
	Token string
	// APIToken is the masters' bearer token for the public API.
	APIToken string
	// NodeToken is the node credential masters and node agents share.
	NodeToken string

	DB     *sql.DB
	DBName string
	DSN    string // mysql://... as the services take it
	Maria  *MariaDB
	Redis  *Redis
	// RedisAddr is the Redis the services use.
	RedisAddr string

	// Registry is the real registry; RegProxy the faulty one image
	// references name.
	Registry string
	RegProxy *RegistryProxy
	S3       *S3Proxy
	S3Prefix string

	Masters    []*Proc
	MasterURLs []string
	// MasterLB round-robins over the masters: callbacks (through
	// Callbacks) and node downloads go through it.
	MasterLB  *Balancer
	Callbacks *CallbackProxy

	TCs    []*Proc
	TCURLs []string
	TCDirs []string
	TCLB   *Balancer

	Nodes       []*Proc
	NodeIDs     []string
	NodeAddrs   []string
	NodeDirs    []string
	NodeProxies []*TCPProxy

	opts Options

	mu     sync.Mutex
	broken map[string]bool
	// killedChildren are the children (pid -> executable) of replicas
	// killed with KillTC: they must not outlive them.
	killedChildren map[int]string
}

// Start builds the binaries and starts a cluster; everything stops when
// the test ends.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Masters == 0 {
		o.Masters = 1
	}
	if o.DataPlanes == 0 {
		o.DataPlanes = 2
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.MaxConcurrentBuilds == 0 {
		o.MaxConcurrentBuilds = 4
	}
	c := &Cluster{T: t, Dir: t.TempDir(), Token: "faults-" + RandHex(16), APIToken: "api-" + RandHex(16), NodeToken: "node-" + RandHex(16), opts: o}
	c.Registry = testenv.Get(t, testenv.Registry)
	t0 := time.Now()
	c.Bin = Binaries(t)
	t1 := time.Now()
	c.openDB(t)
	t2 := time.Now()
	switch {
	case o.NoRedis:
	case o.PrivateRedis:
		c.Redis = StartRedis(t)
		c.RedisAddr = c.Redis.Addr
	default:
		c.RedisAddr = testenv.Get(t, testenv.RedisAddr)
	}
	c.RegProxy = NewRegistryProxy(t, c.Registry)
	c.RegProxy.Owners = c.TCPIDs
	c.S3 = NewS3Proxy(t)
	c.S3Prefix = "faults-" + RandHex(4) + "/"

	for i := 0; i < o.Masters; i++ {
		c.MasterURLs = append(c.MasterURLs, "http://"+FreeAddr(t))
	}
	c.MasterLB = NewBalancer(t, c.MasterURLs)
	c.Callbacks = NewCallbackProxy(t, c.MasterLB)
	for i := 0; i < o.DataPlanes; i++ {
		c.TCURLs = append(c.TCURLs, "http://"+FreeAddr(t))
	}
	c.TCLB = NewBalancer(t, c.TCURLs)
	c.TCLB.BuildsOnly = true

	var nodesSpec []string
	for i := 0; i < o.Nodes; i++ {
		addr := FreeAddr(t)
		id := fmt.Sprintf("node-%d", i+1)
		data := filepath.Join(c.Dir, id)
		px := NewTCPProxy(t, addr)
		c.NodeIDs = append(c.NodeIDs, id)
		c.NodeAddrs = append(c.NodeAddrs, addr)
		c.NodeDirs = append(c.NodeDirs, data)
		c.NodeProxies = append(c.NodeProxies, px)
		nodesSpec = append(nodesSpec, id+"="+px.Addr)
		c.Nodes = append(c.Nodes, &Proc{Name: id, Bin: filepath.Join(c.Bin, "nodeagent"), LogPath: filepath.Join(c.Dir, "logs", id+".log"),
			Args: []string{"--listen", addr, "--data-dir", data, "--node-id", id, "--master-urls", c.MasterLB.URL},
			Env:  []string{"CUBE_NODEAGENT_TOKEN=" + c.NodeToken}})
	}
	for i, u := range c.MasterURLs {
		env := []string{
			"CUBE_MASTER_DB_DSN=" + c.DSN,
			"CUBE_TEMPLATE_CENTER_ADDR=" + c.TCLB.URL,
			"CUBE_TEMPLATE_CALLBACK_TOKEN=" + c.Token,
			"CUBE_MASTER_NODES=" + strings.Join(nodesSpec, ","),
			"CUBE_MASTER_DOWNLOAD_BASE_URL=" + c.MasterLB.URL,
			"CUBE_TEMPLATE_CENTER_REDIS_ADDR=" + c.RedisAddr,
			"CUBE_MASTER_AUTH_BEARER_TOKENS=" + c.APIToken,
			"CUBE_MASTER_NODE_TOKEN=" + c.NodeToken,
		}
		if !o.Defaults {
			env = append(env, "CUBE_MASTER_SWEEP_INTERVAL=1s",
				// Healthy nodes are re-probed rarely, so a node that goes
				// down stays a distribution target (an outage between
				// probes); unhealthy nodes are re-checked at once.
				"CUBE_MASTER_NODE_PROBE_INTERVAL=1h")
		}
		name := fmt.Sprintf("cubemaster-%d", i)
		c.Masters = append(c.Masters, &Proc{Name: name, Bin: filepath.Join(c.Bin, "cubemaster"), LogPath: filepath.Join(c.Dir, "logs", name+".log"),
			Args: []string{"serve", "--listen", strings.TrimPrefix(u, "http://")}, Env: append(env, o.MasterEnv...)})
	}
	for i, u := range c.TCURLs {
		work := filepath.Join(c.Dir, fmt.Sprintf("tc%d", i))
		c.TCDirs = append(c.TCDirs, work)
		env := append([]string{
			"CUBE_TEMPLATE_CENTER_DB_DSN=" + c.DSN,
			"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR=" + work,
			"CUBE_TEMPLATE_CENTER_PLUGIN_DIR=" + c.Bin,
			"CUBE_TEMPLATE_CENTER_BUILDER=ext4stream",
			"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES=" + c.RegProxy.Addr,
			"CUBE_TEMPLATE_CENTER_REDIS_ADDR=" + c.RedisAddr,
			"CUBE_TEMPLATE_CALLBACK_TOKEN=" + c.Token,
			"CUBE_MASTER_ADDR=" + c.Callbacks.URL,
			"CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS=" + fmt.Sprint(o.MaxConcurrentBuilds),
		}, c.s3Env(c.S3.URL)...)
		if !o.Defaults {
			env = append(env, "CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT=5s",
				"CUBE_TEMPLATE_CENTER_RECONCILE_INTERVAL=1s",
				"CUBE_TEMPLATE_CENTER_RECONCILE_PENDING_STALE_AFTER=20s",
				"CUBE_TEMPLATE_CENTER_RECONCILE_PULLING_STALE_AFTER=6s",
				"CUBE_TEMPLATE_CENTER_RECONCILE_RUNNING_STALE_AFTER=6s",
				// Unused chunks go at once (a deletion asks for a
				// collection; this is the backstop).
				"CUBE_TEMPLATE_CENTER_CHUNK_GC_INTERVAL=2s",
				"CUBE_TEMPLATE_CENTER_CHUNK_GC_GRACE=0s")
		}
		name := fmt.Sprintf("templatecenter-%d", i)
		c.TCs = append(c.TCs, &Proc{Name: name, Bin: filepath.Join(c.Bin, "templatecenter"), LogPath: filepath.Join(c.Dir, "logs", name+".log"),
			Args: []string{"serve", "--listen", strings.TrimPrefix(u, "http://")}, Env: append(env, o.TCEnv...)})
	}

	c.breakInvariants(t)
	t.Cleanup(func() {
		for _, p := range c.all() {
			p.Close()
			if t.Failed() {
				t.Logf("---- %s log ----\n%s", p.Name, p.Tail(5000))
			}
		}
		if !t.Failed() {
			c.dropObjects()
		}
	})
	// The first master migrates the shared schema.
	for i, p := range c.Masters {
		p.Start(t)
		WaitHTTP(t, c.MasterURLs[i]+"/notify/health", time.Minute)
	}
	for i, p := range c.TCs {
		p.Start(t)
		WaitHTTP(t, c.TCURLs[i]+"/health", time.Minute)
	}
	for i := range c.Nodes {
		c.startNode(t, i)
	}
	if c.broken["active-key"] {
		// Without the unique key, nothing but timing keeps two active jobs
		// of one template apart.
		if _, err := c.DB.Exec("ALTER TABLE t_cube_template_image_job DROP INDEX idx_template_image_active_key"); err != nil {
			t.Fatalf("%s=active-key: %v", BreakEnv, err)
		}
	}
	t.Logf("cluster up: binaries %v, database %v, processes %v", t1.Sub(t0).Round(time.Millisecond),
		t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
	return c
}

func (c *Cluster) s3Env(endpoint string) []string {
	t := c.T
	return []string{
		"CUBE_S3_ENDPOINT=" + endpoint,
		"CUBE_S3_BUCKET=" + testenv.Get(t, testenv.S3Bucket),
		"CUBE_S3_ACCESS_KEY=" + testenv.Get(t, testenv.S3AccessKey),
		"CUBE_S3_SECRET_KEY=" + testenv.Get(t, testenv.S3SecretKey),
		"CUBE_S3_REGION=us-east-1", "CUBE_S3_USE_PATH_STYLE=true", "CUBE_S3_USE_SSL=false",
		"CUBE_S3_ARTIFACT_PREFIX=" + c.S3Prefix,
	}
}

func (c *Cluster) openDB(t testing.TB) {
	t.Helper()
	c.DBName = "cube_faults_" + RandHex(5)
	var base string
	if c.opts.PrivateDB {
		c.Maria = StartMariaDB(t)
		base = c.Maria.DSN("cube")
	} else {
		base = testenv.Get(t, testenv.MySQLDSN)
	}
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("CREATE DATABASE " + c.DBName + " CHARACTER SET utf8mb4"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + c.DBName); admin.Close() })
	cfg.DBName = c.DBName
	cfg.ParseTime = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	c.DB = db
	c.DSN = "mysql://" + cfg.FormatDSN()
}

func (c *Cluster) all() []*Proc {
	return append(append(append([]*Proc(nil), c.Masters...), c.TCs...), c.Nodes...)
}

// BreakEnv deliberately breaks an invariant of the cluster, to show the
// suites fail when it does not hold (comma-separated):
//
//	active-key    drop the unique index on active jobs (I1)
//	reconciler    turn the data plane's reconciler off (I6)
//	callback-auth run the internal routes without a token (both planes)
const BreakEnv = "CUBE_FAULTS_BREAK"

func (c *Cluster) breakInvariants(t testing.TB) {
	c.broken = map[string]bool{}
	for _, b := range strings.Split(os.Getenv(BreakEnv), ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		c.broken[b] = true
		t.Logf("%s: breaking %q on purpose", BreakEnv, b)
		switch b {
		case "active-key":
		case "reconciler":
			for _, p := range c.TCs {
				p.Env = append(p.Env, "CUBE_TEMPLATE_CENTER_RECONCILE_DISABLED=true")
			}
		case "callback-auth":
			for _, p := range append(append([]*Proc(nil), c.Masters...), c.TCs...) {
				p.Env = append(p.Env, "CUBE_TEMPLATE_CALLBACK_TOKEN=", "CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN=true")
			}
		default:
			t.Fatalf("%s: unknown break %q", BreakEnv, b)
		}
	}
}

// TCPIDs are the pids of the running data-plane replicas.
func (c *Cluster) TCPIDs() []int {
	var out []int
	for _, p := range c.TCs {
		if pid := p.PID(); pid != 0 {
			out = append(out, pid)
		}
	}
	return out
}

// Client is a client of master i.
func (c *Cluster) Client(i int) *Client { return NewClient(c.MasterURLs[i], c.APIToken) }

// API is a client of the first master.
func (c *Cluster) API() *Client { return c.Client(0) }

// StartTC (re)starts data-plane replica i and waits for it.
func (c *Cluster) StartTC(i int) {
	c.T.Helper()
	c.TCs[i].Start(c.T)
	WaitHTTP(c.T, c.TCURLs[i]+"/health", time.Minute)
}

// KillTC kills data-plane replica i with SIGKILL, remembering its child
// processes (the builder plugin) so Leftovers can tell whether they died
// with it.
func (c *Cluster) KillTC(i int) {
	kids := Children(c.TCs[i].PID())
	c.mu.Lock()
	if c.killedChildren == nil {
		c.killedChildren = map[int]string{}
	}
	for _, pid := range kids {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
			c.killedChildren[pid] = exe
		}
	}
	c.mu.Unlock()
	c.TCs[i].Kill9()
}

// StartMaster (re)starts master i and waits for it.
func (c *Cluster) StartMaster(i int) {
	c.T.Helper()
	c.Masters[i].Start(c.T)
	WaitHTTP(c.T, c.MasterURLs[i]+"/notify/health", time.Minute)
}

// StartNode (re)starts node agent i and waits for it.
func (c *Cluster) StartNode(i int) {
	c.T.Helper()
	c.Nodes[i].Start(c.T)
	WaitTCP(c.T, c.NodeAddrs[i], 30*time.Second)
}

// NodeArtifact is where node i keeps an artifact.
func (c *Cluster) NodeArtifact(i int, artifactID string) string {
	return filepath.Join(c.NodeDirs[i], "cubebox", artifactID, artifactID+".ext4")
}

// ProxyRef turns a reference on the real registry into one through the
// registry proxy.
func (c *Cluster) ProxyRef(ref string) string {
	return strings.Replace(ref, c.Registry, c.RegProxy.Addr, 1)
}

// PushImage pushes a one-layer image holding size random bytes (plus a
// few small files) to the real registry and returns its reference through
// the proxy and its layer digest.
func (c *Cluster) PushImage(name string, size int) (ref, layerDigest string) {
	c.T.Helper()
	l := RandomLayer(c.T, size)
	d, _ := l.Digest()
	return c.PushLayers(name, l), d.String()
}

// PushLayers pushes an image of layers and returns its reference through
// the proxy.
func (c *Cluster) PushLayers(name string, layers ...v1.Layer) string {
	c.T.Helper()
	img, err := testimage.Image(layers, v1.Config{Cmd: []string{"/bin/app"}})
	if err != nil {
		c.T.Fatal(err)
	}
	ref := fmt.Sprintf("%s/faults/%s:%s", c.Registry, name, RandHex(4))
	if _, err := testimage.Push(ref, img); err != nil {
		c.T.Fatal(err)
	}
	return c.ProxyRef(ref)
}

// RandomLayer is a layer with a few small files and size random bytes in
// data/blob (so every call gives a new digest).
func RandomLayer(t testing.TB, size int) v1.Layer {
	t.Helper()
	entries := []testimage.Entry{
		testimage.Dir("etc", 0o755), testimage.File("etc/os-release", 0o644, "ID=cube-faults\n"),
		testimage.Dir("bin", 0o755), testimage.File("bin/app", 0o755, "#!/bin/sh\necho app\n"),
		testimage.Dir("data", 0o755), testimage.File("data/id", 0o644, RandHex(16)),
	}
	if size > 0 {
		entries = append(entries, testimage.File("data/blob", 0o644, randString(size)))
	}
	l, err := testimage.Layer(entries)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func randString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return string(b)
}

// WaitHTTP waits until u answers 200.
func WaitHTTP(t testing.TB, u string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200", u)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dropObjects removes whatever the cluster left in the bucket (after a
// passing test there is nothing; this is hygiene for the shared bucket).
func (c *Cluster) dropObjects() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range append(c.bucketKeys(ctx), c.S3Prefix+chunkGCState) {
		deleteObject(ctx, c.S3, k)
	}
}

// startNode starts node agent i and waits until it says it listens. The
// port was free when picked, but another test running at the same time
// may take it before the agent binds (the agent then exits, and a wait
// for the port alone would see the other process): the agent is started
// again on a new port, which its proxy then forwards to.
func (c *Cluster) startNode(t testing.TB, i int) {
	t.Helper()
	p := c.Nodes[i]
	for attempt := 1; ; attempt++ {
		p.Start(t)
		deadline := time.Now().Add(30 * time.Second)
		for {
			log := p.Log()
			if k := strings.LastIndex(log, "=== start "); k >= 0 {
				log = log[k:]
			}
			if strings.Contains(log, "node agent listening") {
				return
			}
			if !p.Running() {
				if strings.Contains(log, "address already in use") && attempt < 3 {
					break
				}
				t.Fatalf("%s exited at start:\n%s", p.Name, p.Tail(2000))
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never said it listens:\n%s", p.Name, p.Tail(2000))
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.Stop() // reaped; start may run again
		addr := FreeAddr(t)
		t.Logf("%s: %s was taken before it could bind; starting it on %s", p.Name, c.NodeAddrs[i], addr)
		for k, a := range p.Args {
			if a == c.NodeAddrs[i] {
				p.Args[k] = addr
			}
		}
		c.NodeAddrs[i] = addr
		c.NodeProxies[i].retarget(addr)
	}
}
