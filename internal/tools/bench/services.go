package bench

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cubesandbox/templatecenter/core"
)

// The services part runs the system as real processes on loopback: one
// cubemaster and one templatecenter on a fresh MariaDB database, the file
// artifact store, and N node agents, and measures what users and nodes
// wait for:
//
//   - time to READY of a new template on 1 node and on 8 (the build, then
//     distribution: BUILT -> READY), and of a second template with the same
//     spec (answered from the existing artifact, no layer touched);
//   - the floor under distribution on this machine: what N nodes must do
//     at the least with the artifact, without the network (copyBound);
//   - artifact download throughput to 8 concurrent clients, from the
//     templatecenter (file store) and through the master's proxy;
//   - status polling latency at a fixed 1,000 requests/s.

// proc is one child process of the stack.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   sync.Mutex
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *proc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return tailOf(p.log.String(), 3000)
}

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
}

// stack is a running system.
type stack struct {
	o         Options
	links     *links // nil: every process on loopback
	dir       string
	token     string
	apiToken  string // the master's public API bearer token
	masterURL string
	tcURL     string
	db        *sql.DB
	dbName    string
	admin     *sql.DB
	procs     []*proc
	nodeDirs  []string
}

func freeAddr(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *stack) start(name, bin string, args, env []string) (*proc, error) {
	return s.startIn(-1, name, bin, args, env)
}

// startIn starts bin in node's network namespace (node >= 0 with links),
// else on the host.
func (s *stack) startIn(node int, name, bin string, args, env []string) (*proc, error) {
	p := &proc{name: name, log: &bytes.Buffer{}}
	argv := append([]string{filepath.Join(s.o.Bin, bin)}, args...)
	if node >= 0 && s.links != nil {
		argv = s.links.wrap(node, argv)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.procs = append(s.procs, p)
	return p, nil
}

func (s *stack) close() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop()
	}
	if s.db != nil {
		s.db.Close()
	}
	if s.admin != nil {
		s.admin.Exec("DROP DATABASE IF EXISTS " + s.dbName)
		s.admin.Close()
	}
	os.RemoveAll(s.dir)
}

// nodeToken is the node credential the stack's master and node agents
// share.
func (s *stack) nodeToken() string { return "node-" + s.token }

// startStack starts master, templatecenter and nodes node agents.
// tcEnv is added to the templatecenter's environment (the links-chunks
// part turns chunks off with it).
func startStack(o Options, nodes int, l *links, logf func(string, ...any), tcEnv ...string) (_ *stack, err error) {
	s := &stack{o: o, links: l, token: "bench-" + randHex(16), apiToken: "bench-api-" + randHex(16)}
	defer func() {
		if err != nil {
			for _, p := range s.procs {
				logf("---- %s log ----\n%s", p.name, p.tail())
			}
			s.close()
		}
	}()
	if s.dir, err = os.MkdirTemp(o.Work, "stack-"); err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(o.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("MariaDB DSN: %w", err)
	}
	if s.admin, err = sql.Open("mysql", o.MySQLDSN); err != nil {
		return nil, err
	}
	s.dbName = "cube_bench_" + randHex(4)
	if _, err := s.admin.Exec("CREATE DATABASE " + s.dbName + " CHARACTER SET utf8mb4"); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	cfg.DBName, cfg.ParseTime = s.dbName, true
	dsn := "mysql://" + cfg.FormatDSN()
	if s.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return nil, err
	}
	masterHost := "127.0.0.1"
	if l != nil { // the nodes reach the master over their links
		masterHost = l.hostAddr()
	}
	masterAddr, err := freeAddr(masterHost)
	if err != nil {
		return nil, err
	}
	tcAddr, err := freeAddr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	s.masterURL, s.tcURL = "http://"+masterAddr, "http://"+tcAddr
	var spec []string
	var nodeArgs [][]string
	for i := range nodes {
		// With links, a namespace of its own: any port is free there.
		addr := ""
		if l != nil {
			addr = net.JoinHostPort(l.nodeAddr(i), "7101")
		} else if addr, err = freeAddr("127.0.0.1"); err != nil {
			return nil, err
		}
		data := filepath.Join(s.dir, fmt.Sprintf("node%d", i))
		s.nodeDirs = append(s.nodeDirs, data)
		id := fmt.Sprintf("node-%d", i+1)
		spec = append(spec, id+"="+addr)
		nodeArgs = append(nodeArgs, []string{"--listen", addr, "--data-dir", data, "--node-id", id, "--master-urls", s.masterURL})
	}
	if _, err := s.start("cubemaster", "cubemaster", []string{"serve", "--listen", masterAddr}, []string{
		"CUBE_MASTER_DB_DSN=" + dsn,
		"CUBE_TEMPLATE_CENTER_ADDR=" + s.tcURL,
		"CUBE_TEMPLATE_CALLBACK_TOKEN=" + s.token,
		"CUBE_MASTER_NODES=" + strings.Join(spec, ","),
		"CUBE_MASTER_DOWNLOAD_BASE_URL=" + s.masterURL,
		"CUBE_MASTER_AUTH_BEARER_TOKENS=" + s.apiToken,
		"CUBE_MASTER_NODE_TOKEN=" + s.nodeToken(),
	}); err != nil {
		return nil, err
	}
	if err := waitHTTP(s.masterURL + "/notify/health"); err != nil {
		return nil, err
	}
	work := filepath.Join(s.dir, "tc")
	if _, err := s.start("templatecenter", "templatecenter", []string{"serve", "--listen", tcAddr}, append([]string{
		"CUBE_TEMPLATE_CENTER_DB_DSN=" + dsn,
		"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR=" + work,
		"CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR=" + filepath.Join(work, "store"),
		"CUBE_TEMPLATE_CENTER_LAYER_CACHE_DIR=" + filepath.Join(work, "cache"),
		"CUBE_TEMPLATE_CENTER_PLUGIN_DIR=" + o.Bin,
		"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES=" + o.Registry,
		"CUBE_TEMPLATE_CALLBACK_TOKEN=" + s.token,
		"CUBE_MASTER_ADDR=" + s.masterURL,
	}, tcEnv...)); err != nil {
		return nil, err
	}
	if err := waitHTTP(s.tcURL + "/health"); err != nil {
		return nil, err
	}
	for i, a := range nodeArgs {
		if _, err := s.startIn(i, fmt.Sprintf("node-%d", i+1), "nodeagent", a, []string{"CUBE_NODEAGENT_TOKEN=" + s.nodeToken()}); err != nil {
			return nil, err
		}
	}
	for _, a := range nodeArgs {
		if err := waitTCP(a[1]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// copyBound times the least that len(s.nodeDirs) nodes on this machine
// must do with an artifact, without the network: each hashes it (Go's
// crypto/sha256, as fast as sha256 gets here; coreutils sha256sum is
// several times slower) and writes it to a file of its own with direct
// I/O and an fsync (dd oflag=direct conv=fsync), all at once. However the
// bytes are sent, n copies on one machine share its disk and cores; this
// is the floor under distribution here. The nodes' own copies are removed
// first (the disk may not hold two sets), so it runs last in a round.
func (s *stack) copyBound(artifactID string) (time.Duration, error) {
	src, err := s.artifactFile(artifactID)
	if err != nil {
		return 0, err
	}
	for _, d := range s.nodeDirs {
		if err := os.RemoveAll(d); err != nil {
			return 0, err
		}
	}
	syscall.Sync()
	errs := make([]error, 2*len(s.nodeDirs))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range s.nodeDirs {
		dst := filepath.Join(s.dir, fmt.Sprintf("floor-%d.ext4", i))
		defer os.Remove(dst)
		wg.Go(func() {
			f, err := os.Open(src)
			if err != nil {
				errs[2*i] = err
				return
			}
			defer f.Close()
			_, errs[2*i] = io.CopyBuffer(sha256.New(), f, make([]byte, 4<<20))
		})
		wg.Go(func() {
			var stderr bytes.Buffer
			c := exec.Command("dd", "if="+src, "of="+dst, "bs=4M", "oflag=direct", "conv=fsync", "status=none")
			c.Stderr = &stderr
			if err := c.Run(); err != nil {
				errs[2*i+1] = fmt.Errorf("%s: %w: %s", strings.Join(c.Args, " "), err, bytes.TrimSpace(stderr.Bytes()))
			}
		})
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// artifactFile is where the file store keeps artifactID's whole file.
func (s *stack) artifactFile(artifactID string) (string, error) {
	var src string
	err := filepath.WalkDir(filepath.Join(s.dir, "tc", "store"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() == artifactID+".ext4" {
			src = p
		}
		return err
	})
	if err != nil {
		return "", err
	}
	if src == "" {
		return "", fmt.Errorf("artifact %s not found in the file store", artifactID)
	}
	return src, nil
}

// buildPhases reads the template center's per-phase build time sums
// (cube_template_build_phase_duration_seconds) from /metrics: on a fresh
// stack after one build, that build's phases.
func (s *stack) buildPhases() (string, error) {
	resp, err := http.Get(s.tcURL + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	const prefix = `cube_template_build_phase_duration_seconds_sum{phase="`
	var out []string
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		phase, val, ok := strings.Cut(rest, `"} `)
		if ok {
			out = append(out, phase+" "+strings.TrimSpace(val)+"s")
		}
	}
	return strings.Join(out, ", "), nil
}

func waitHTTP(u string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s never answered 200", u)
}

func waitTCP(addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s never accepted connections", addr)
}

// job is what the public API says about an image job.
type job struct {
	JobID          string `json:"job_id"`
	Status         string `json:"status"`
	Phase          string `json:"phase"`
	ErrorMessage   string `json:"error_message"`
	ArtifactID     string `json:"artifact_id"`
	ReadyNodeCount int    `json:"ready_node_count"`
}

type envelope struct {
	Ret struct {
		Code int    `json:"ret_code"`
		Msg  string `json:"ret_msg"`
	} `json:"ret"`
	Job *job `json:"job"`
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}

func (s *stack) call(method, path string, body any) (envelope, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.masterURL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.apiToken)
	resp, err := client.Do(req)
	if err != nil {
		return envelope{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e envelope
	if err := json.Unmarshal(raw, &e); err != nil {
		return e, fmt.Errorf("%s %s: %d %q: %v", method, path, resp.StatusCode, raw, err)
	}
	return e, nil
}

// pastBuild reports whether a job in status and phase has its artifact
// built. BUILT lasts only until the master picks the job up (milliseconds,
// often between two polls): a RUNNING job in one of the master's phases
// (registering, distributing, defining the template) is past it too.
func pastBuild(status, phase string) bool {
	switch status {
	case "BUILT", "READY":
		return true
	case "RUNNING":
		switch phase {
		case "REGISTERING", "DISTRIBUTING", "CREATING_TEMPLATE", "SNAPSHOTTING":
			return true
		}
	}
	return false
}

// jobTimes is when a job was first seen in each status.
type jobTimes struct {
	job          job
	built, ready time.Duration // since the create request was sent
	slowest      time.Duration // the slowest status read while waiting
	// nodeReady is when each node was first counted ready (the job's
	// ready_node_count), in order.
	nodeReady []time.Duration
}

// createAndWait creates a template from the image and polls its job every
// 5 ms until READY, noting when it was first seen BUILT (or past it).
func (s *stack) createAndWait(templateID, ref, wls string, timeout time.Duration) (jobTimes, error) {
	start := time.Now()
	e, err := s.call(http.MethodPost, "/cube/template/from-image", map[string]any{
		"requestID": "req-" + randHex(4), "source_image_ref": ref, "template_id": templateID, "writable_layer_size": wls,
	})
	if err != nil {
		return jobTimes{}, err
	}
	if e.Ret.Code != 200 || e.Job == nil {
		return jobTimes{}, fmt.Errorf("create %s: %d %s", templateID, e.Ret.Code, e.Ret.Msg)
	}
	var jt jobTimes
	id := e.Job.JobID
	for time.Since(start) < timeout {
		t0 := time.Now()
		e, err := s.call(http.MethodGet, "/cube/template/from-image?job_id="+url.QueryEscape(id), nil)
		jt.slowest = max(jt.slowest, time.Since(t0))
		if err != nil {
			return jt, err
		}
		if e.Ret.Code != 200 {
			return jt, fmt.Errorf("status of job %s: %d %s", id, e.Ret.Code, e.Ret.Msg)
		}
		if e.Job != nil {
			jt.job = *e.Job
			if jt.built == 0 && pastBuild(e.Job.Status, e.Job.Phase) {
				jt.built = time.Since(start)
			}
			for len(jt.nodeReady) < e.Job.ReadyNodeCount {
				jt.nodeReady = append(jt.nodeReady, time.Since(start))
			}
			switch e.Job.Status {
			case "FAILED":
				return jt, fmt.Errorf("job %s failed: %s", id, e.Job.ErrorMessage)
			case "READY":
				jt.ready = time.Since(start)
				return jt, nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return jt, fmt.Errorf("job %s not READY after %s (%s/%s)", id, timeout, jt.job.Status, jt.job.Phase)
}

// download fetches u with n concurrent clients and returns bytes per
// second, aggregated.
func download(u string, n int) (float64, int64, error) {
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	var errs []error
	for range n {
		wg.Go(func() {
			resp, err := client.Get(u)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				mu.Lock()
				errs = append(errs, fmt.Errorf("GET %s: %s", u, resp.Status))
				mu.Unlock()
				return
			}
			k, err := io.CopyBuffer(io.Discard, resp.Body, make([]byte, 1<<20))
			mu.Lock()
			total += k
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start)
	return float64(total) / el.Seconds(), total, errors.Join(errs...)
}

// poll sends GETs of path at rate per second for d (open loop: a request
// is due every 1/rate whatever the previous ones do) and returns the
// latencies and the rate achieved.
func (s *stack) poll(path string, rate int, d time.Duration) ([]time.Duration, float64, int, error) {
	n := int(float64(rate) * d.Seconds())
	lat := make([]time.Duration, n)
	fails := 0
	var mu sync.Mutex
	due := make(chan time.Time, n)
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() {
			for at := range due {
				if w := time.Until(at); w > 0 {
					time.Sleep(w)
				}
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodGet, s.masterURL+path, nil)
				req.Header.Set("Authorization", "Bearer "+s.apiToken)
				resp, err := client.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				// Latency counts from when the request was due, so a
				// backlog shows (no coordinated omission).
				l := time.Since(at)
				if t0.Before(at) {
					l = time.Since(t0)
				}
				mu.Lock()
				lat = append(lat, l)
				if !ok {
					fails++
				}
				mu.Unlock()
			}
		})
	}
	lat = lat[:0]
	start := time.Now().Add(10 * time.Millisecond)
	for i := range n {
		due <- start.Add(time.Duration(i) * time.Second / time.Duration(rate))
	}
	close(due)
	wg.Wait()
	el := time.Since(start)
	return lat, float64(len(lat)) / el.Seconds(), fails, nil
}

// downloadToken is the token nodes download artifactID with: derived from
// the seed its row keeps and the callback token, as the master derives it.
func (s *stack) downloadToken(artifactID string) (string, error) {
	var seed string
	err := s.db.QueryRow("SELECT download_token FROM t_cube_rootfs_artifact WHERE artifact_id = ?", artifactID).Scan(&seed)
	return core.NewDownloadTokens(s.token).For(artifactID, seed), err
}

func services(o Options, out io.Writer, logf func(string, ...any)) error {
	if o.MySQLDSN == "" {
		return errors.New("no MariaDB: set CUBE_TEST_MYSQL_DSN or -mysql (make bench starts one)")
	}
	for _, f := range []string{"cubemaster", "nodeagent"} {
		if _, err := os.Stat(filepath.Join(o.Bin, f)); err != nil {
			return fmt.Errorf("%s not built in %s (run make build): %w", f, o.Bin, err)
		}
	}
	img, err := MakeImage(filepath.Join(o.Work, "image"), filepath.Join(o.Bin, "templatecenter"), logf)
	if err != nil {
		return err
	}
	ref := o.Registry + "/bench/rootfs:" + strings.ReplaceAll(imageFormat, "/", "-")
	if _, err := img.Push(ref); err != nil {
		return err
	}
	var l *links
	heading, where := "Services", "node agents on loopback"
	if o.NodeLinkMbit > 0 {
		l = &links{nodes: 8, mbit: o.NodeLinkMbit}
		if err := l.setup(); err != nil {
			return err
		}
		defer l.teardown()
		heading = fmt.Sprintf("Services, a %d Mbit/s link per node agent", o.NodeLinkMbit)
		where = fmt.Sprintf("each node agent in a network namespace of its own, its link from the master shaped to %d Mbit/s (tc tbf on a veth pair; the master listens on the bridge)", o.NodeLinkMbit)
	}
	fmt.Fprintf(out, "\n## %s\n\nOne cubemaster and one templatecenter (file store, default builder) on a fresh MariaDB database, %s; the image of the builds part. Load average at start: %s\n\n", heading, where, Load())

	type dist struct {
		nodes              int
		build, distribute  []time.Duration
		floor              []time.Duration
		dupBuilt, dupReady []time.Duration
		download, proxy    []float64
		lat                []time.Duration
		rate               float64
		fails              int
		artifactBytes      int64
	}
	var results []*dist
	for _, nodes := range []int{1, 8} {
		d := &dist{nodes: nodes}
		results = append(results, d)
		for round := 1; round <= o.Rounds; round++ {
			s, err := startStack(o, nodes, l, logf)
			if err != nil {
				return err
			}
			jt, err := s.createAndWait("bench-a", ref, "20Gi", 10*time.Minute)
			if err != nil {
				for _, p := range s.procs {
					logf("---- %s log ----\n%s", p.name, p.tail())
				}
				s.close()
				return err
			}
			d.build = append(d.build, jt.built)
			d.distribute = append(d.distribute, jt.ready-jt.built)
			if ph, err := s.buildPhases(); err == nil {
				logf("%d node(s), round %d: the build's phases in the template center: %s", nodes, round, ph)
			} else {
				logf("build phases: %v", err)
			}
			dup, err := s.createAndWait("bench-b", ref, "20Gi", time.Minute)
			if err != nil {
				s.close()
				return err
			}
			d.dupBuilt = append(d.dupBuilt, dup.built)
			d.dupReady = append(d.dupReady, dup.ready)
			logf("%d node(s), round %d: new template built %.2fs, distributed in %.2fs (slowest status read %.0f ms); same spec again: answered %.0f ms, READY %.0f ms",
				nodes, round, jt.built.Seconds(), (jt.ready - jt.built).Seconds(), jt.slowest.Seconds()*1000, dup.built.Seconds()*1000, dup.ready.Seconds()*1000)
			if nodes == 8 {
				tok, err := s.downloadToken(jt.job.ArtifactID)
				if err != nil {
					s.close()
					return fmt.Errorf("download token: %w", err)
				}
				q := "?artifact_id=" + url.QueryEscape(jt.job.ArtifactID) + "&token=" + url.QueryEscape(tok)
				direct, n, err := download(s.tcURL+"/cube/template/artifact/download"+q, 8)
				if err != nil {
					s.close()
					return fmt.Errorf("download from templatecenter: %w", err)
				}
				viaMaster, _, err := download(s.masterURL+"/cube/template/artifact/download"+q, 8)
				if err != nil {
					s.close()
					return fmt.Errorf("download through the master: %w", err)
				}
				d.download, d.proxy, d.artifactBytes = append(d.download, direct), append(d.proxy, viaMaster), n/8
				syscall.Sync() // what the round left dirty (layer cache, artifacts) is not written back while polling is timed
				lat, rate, fails, err := s.poll("/cube/template/from-image?job_id="+url.QueryEscape(jt.job.JobID), 1000, 10*time.Second)
				if err != nil {
					s.close()
					return err
				}
				d.lat, d.rate, d.fails = append(d.lat, lat...), rate, d.fails+fails
				logf("8 clients: %.0f MB/s from templatecenter, %.0f MB/s through the master; polling at %.0f req/s: p50 %.1f ms, p99 %.1f ms, %d failed",
					direct/1e6, viaMaster/1e6, rate, ms(Percentile(lat, 50)), ms(Percentile(lat, 99)), fails)
			}
			floor, err := s.copyBound(jt.job.ArtifactID)
			if err != nil {
				s.close()
				return fmt.Errorf("distribution floor: %w", err)
			}
			d.floor = append(d.floor, floor)
			logf("%d node(s), round %d: distribution floor %.2fs", nodes, round, floor.Seconds())
			s.close()
		}
	}
	one, eight := results[0], results[1]
	t := Table{Header: []string{"measure", "1 node", "8 nodes", "8 / 1"}}
	row := func(what string, a, b []time.Duration) {
		t.Rows = append(t.Rows, []string{what, Secs(Median(a)), Secs(Median(b)), fmt.Sprintf("%.2f", Ratio(Median(b), Median(a)))})
	}
	row("new template: create -> BUILT (cold build, s)", one.build, eight.build)
	row("distribution: BUILT -> READY (s)", one.distribute, eight.distribute)
	row("distribution floor on this machine: per node a sha256 pass + dd oflag=direct conv=fsync, all at once, no network (s)", one.floor, eight.floor)
	t.Rows = append(t.Rows, []string{"distribution / its floor",
		fmt.Sprintf("%.2f", Ratio(Median(one.distribute), Median(one.floor))),
		fmt.Sprintf("%.2f", Ratio(Median(eight.distribute), Median(eight.floor))), ""})
	if l != nil {
		// What one link takes for the artifact at its rate, whatever else.
		wire := time.Duration(float64(eight.artifactBytes*8) / float64(l.mbit*1e6) * float64(time.Second))
		t.Rows = append(t.Rows, []string{fmt.Sprintf("the artifact over one %d Mbit/s link (s)", l.mbit), Secs(wire), Secs(wire), "1.00"},
			[]string{"distribution / one link's time", fmt.Sprintf("%.2f", Ratio(Median(one.distribute), wire)), fmt.Sprintf("%.2f", Ratio(Median(eight.distribute), wire)), ""})
	}
	var tot1, tot8 []time.Duration
	for i := range one.build {
		tot1 = append(tot1, one.build[i]+one.distribute[i])
	}
	for i := range eight.build {
		tot8 = append(tot8, eight.build[i]+eight.distribute[i])
	}
	row("new template: create -> READY (s)", tot1, tot8)
	row("same spec again: create -> BUILT (s)", one.dupBuilt, eight.dupBuilt)
	row("same spec again: create -> READY (s)", one.dupReady, eight.dupReady)
	t.Write(out)
	fmt.Fprintf(out, "\nmedians of %d rounds; statuses polled every 5 ms\n\n", o.Rounds)
	sort.Float64s(eight.download)
	sort.Float64s(eight.proxy)
	t2 := Table{Header: []string{"measure", "median", "runs"}}
	fmtRates := func(v []float64) string {
		var s []string
		for _, x := range v {
			s = append(s, fmt.Sprintf("%.0f", x/1e6))
		}
		return strings.Join(s, " ")
	}
	t2.Rows = append(t2.Rows,
		[]string{fmt.Sprintf("artifact download, 8 concurrent clients, from templatecenter (file store), MB/s (artifact %d MB)", eight.artifactBytes/1e6), fmt.Sprintf("%.0f", medianF(eight.download)/1e6), fmtRates(eight.download)},
		[]string{"artifact download, 8 concurrent clients, through the master's proxy, MB/s", fmt.Sprintf("%.0f", medianF(eight.proxy)/1e6), fmtRates(eight.proxy)},
		[]string{fmt.Sprintf("status polling at 1,000 req/s for 10 s (achieved %.0f req/s, %d failed): p50 / p99 / max ms", eight.rate, eight.fails),
			fmt.Sprintf("%.1f / %.1f / %.1f", ms(Percentile(eight.lat, 50)), ms(Percentile(eight.lat, 99)), ms(Percentile(eight.lat, 100))), fmt.Sprintf("%d requests", len(eight.lat))},
	)
	t2.Write(out)
	return nil
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
