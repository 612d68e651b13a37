package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Tables whose rows belong to templates; after every template is deleted
// (and GC ran) they must be empty. t_cube_template_node holds the node
// directory, which outlives templates.
var TemplateTables = []string{
	"t_cube_template_image_job", "t_cube_template_definition", "t_cube_template_replica",
	"t_cube_artifact_node_placement", "t_cube_rootfs_artifact", "t_cube_template_name",
}

// rank orders job statuses along the state machine (core.Job.Apply). The
// monitor samples rows, so it may miss intermediate states (PENDING →
// RUNNING → READY within one poll reads as PENDING → READY): any forward
// move is allowed, and BUILT -> RUNNING only into a post-build phase.
var rank = map[string]int{"PENDING": 0, "RUNNING": 1, "BUILT": 2, "READY": 3, "FAILED": 3}

var postBuild = map[string]bool{"DISTRIBUTING": true, "CREATING_TEMPLATE": true, "SNAPSHOTTING": true, "REGISTERING": true, "READY": true}

// Monitor watches every job row while a scenario runs and records
// violations of the job state machine: a terminal job that changes status
// (I3), a status that moves backwards, and two active jobs of one template
// at the same moment (I1).
type Monitor struct {
	c    *Cluster
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	seen       map[string]string // job -> last status
	violations []string
	polls      int
	// Transitions counts status changes seen per job.
	transitions map[string][]string
}

// Watch starts a monitor; it stops (and reports its violations as test
// errors) when the test ends, or at Stop.
func (c *Cluster) Watch(t testing.TB) *Monitor {
	m := &Monitor{c: c, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]string{}, transitions: map[string][]string{}}
	go m.run()
	t.Cleanup(func() {
		m.Stop()
		for _, v := range m.Violations() {
			t.Errorf("invariant violated: %s", v)
		}
	})
	return m
}

func (m *Monitor) run() {
	defer close(m.done)
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for {
		m.poll()
		select {
		case <-m.stop:
			m.poll()
			return
		case <-tk.C:
		}
	}
}

func (m *Monitor) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := m.c.DB.QueryContext(ctx, "SELECT job_id, template_id, operation, COALESCE(status,''), COALESCE(phase,''), active_key IS NOT NULL FROM t_cube_template_image_job")
	if err != nil {
		return // the database may be down on purpose
	}
	defer rows.Close()
	active := map[string][]string{}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.polls++
	for rows.Next() {
		var id, tpl, op, st, phase string
		var hasKey bool
		if rows.Scan(&id, &tpl, &op, &st, &phase, &hasKey) != nil {
			return
		}
		prev, ok := m.seen[id]
		if ok && prev != st {
			m.transitions[id] = append(m.transitions[id], prev+"→"+st)
			switch {
			case prev == "READY" || prev == "FAILED":
				m.violations = append(m.violations, fmt.Sprintf("I3: job %s of %s left terminal %s for %s", id, tpl, prev, st))
			case prev == "BUILT" && st == "RUNNING":
				if !postBuild[phase] {
					m.violations = append(m.violations, fmt.Sprintf("job %s of %s went back from BUILT to build phase %s", id, tpl, phase))
				}
			case rank[st] < rank[prev]:
				m.violations = append(m.violations, fmt.Sprintf("job %s of %s went back from %s to %s", id, tpl, prev, st))
			}
		} else if !ok {
			m.transitions[id] = append(m.transitions[id], st)
		}
		m.seen[id] = st
		if st == "PENDING" || st == "RUNNING" {
			active[tpl+"/"+op] = append(active[tpl+"/"+op], id)
		}
		if hasKey && (st == "READY" || st == "FAILED") {
			m.violations = append(m.violations, fmt.Sprintf("I1: terminal job %s (%s) still holds its active key", id, st))
		}
	}
	for k, ids := range active {
		if len(ids) > 1 {
			m.violations = append(m.violations, fmt.Sprintf("I1: %d active jobs of %s at once: %v", len(ids), k, ids))
		}
	}
}

// Stop stops the monitor (idempotent).
func (m *Monitor) Stop() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// Violations returns what the monitor found so far (deduplicated).
func (m *Monitor) Violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, v := range m.violations {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// Transitions returns the statuses job went through.
func (m *Monitor) Transitions(jobID string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.transitions[jobID]...)
}

// Count runs a COUNT(*) query.
func (c *Cluster) Count(q string, args ...any) int {
	c.T.Helper()
	var n int
	if err := c.DB.QueryRow(q, args...).Scan(&n); err != nil {
		c.T.Fatalf("%s: %v", q, err)
	}
	return n
}

// activeJobs describes the jobs that are not terminal.
func (c *Cluster) activeJobs() string {
	rows, err := c.DB.Query(`SELECT job_id, template_id, status, phase FROM t_cube_template_image_job
		WHERE status NOT IN ('READY','FAILED') ORDER BY job_id LIMIT 10`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, tpl, st, ph string
		rows.Scan(&id, &tpl, &st, &ph)
		out = append(out, fmt.Sprintf("%s (%s) %s/%s", id, tpl, st, ph))
	}
	return strings.Join(out, ", ")
}

// Rows counts the rows of each template table.
func (c *Cluster) Rows() map[string]int {
	out := map[string]int{}
	for _, tb := range TemplateTables {
		var n int
		if err := c.DB.QueryRow("SELECT COUNT(*) FROM " + tb).Scan(&n); err != nil {
			n = -1
		}
		out[tb] = n
	}
	return out
}

// CheckInvariants checks, on the current state, I1 (at most one active job
// per template and kind), I2 (every template's latest READY job has a READY
// artifact whose stored object has the recorded size and sha256, and every
// READY replica's node holds those bytes), I4 (no READY artifact row points
// at a missing or different object) and, when settled is true, I6 (no job
// is left active or BUILT).
func (c *Cluster) CheckInvariants(t testing.TB, settled bool) {
	t.Helper()
	ctx := context.Background()
	var dup []string
	rows, err := c.DB.Query(`SELECT template_id, operation, COUNT(*) FROM t_cube_template_image_job
		WHERE status IN ('PENDING','RUNNING') GROUP BY template_id, operation HAVING COUNT(*) > 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tpl, op string
		var n int
		rows.Scan(&tpl, &op, &n)
		dup = append(dup, fmt.Sprintf("%s/%s: %d", tpl, op, n))
	}
	rows.Close()
	if len(dup) > 0 {
		t.Errorf("I1: several active jobs: %v", dup)
	}
	if settled {
		// A job's last write follows its template's: a scenario that saw
		// the template READY may be a few milliseconds ahead of the job
		// row (a convergence job the scenario does not know of, say).
		const q = "SELECT COUNT(*) FROM t_cube_template_image_job WHERE status NOT IN ('READY','FAILED')"
		if !WaitFor(30*time.Second, func() bool { return c.Count(q) == 0 }) {
			t.Errorf("I6: jobs are not terminal 30 s after the scenarios ended: %s", c.activeJobs())
		}
	}

	// I4: READY artifact rows and their objects.
	type art struct {
		id, sha, key string
		size         int64
	}
	arts := map[string]art{}
	rows, err = c.DB.Query("SELECT artifact_id, COALESCE(ext4_sha256,''), ext4_size_bytes, COALESCE(object_key,'') FROM t_cube_rootfs_artifact WHERE status = 'READY'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a art
		rows.Scan(&a.id, &a.sha, &a.size, &a.key)
		if a.key == "" {
			a.key = a.id + "/" + a.id + ".ext4"
		}
		arts[a.id] = a
	}
	rows.Close()
	for _, a := range arts {
		sum, size, err := c.objectSHA(ctx, a.key)
		switch {
		case err != nil:
			t.Errorf("I4: READY artifact %s: object %s: %v", a.id, a.key, err)
		case sum != a.sha || size != a.size:
			t.Errorf("I4: READY artifact %s: object holds %d bytes sha256 %s, row says %d bytes %s", a.id, size, sum, a.size, a.sha)
		}
	}

	// I2: the latest job of each template.
	rows, err = c.DB.Query(`SELECT j.job_id, j.template_id, COALESCE(j.artifact_id,'') FROM t_cube_template_image_job j
		WHERE j.status = 'READY' AND j.attempt_no = (SELECT MAX(k.attempt_no) FROM t_cube_template_image_job k WHERE k.template_id = j.template_id)`)
	if err != nil {
		t.Fatal(err)
	}
	type ready struct{ job, tpl, aid string }
	var readies []ready
	for rows.Next() {
		var r ready
		rows.Scan(&r.job, &r.tpl, &r.aid)
		readies = append(readies, r)
	}
	rows.Close()
	for _, r := range readies {
		a, ok := arts[r.aid]
		if !ok {
			t.Errorf("I2: READY job %s of %s names artifact %q, which is not a READY row", r.job, r.tpl, r.aid)
			continue
		}
		nodes, err := c.DB.Query("SELECT node_id FROM t_cube_template_replica WHERE template_id = ? AND status = 'READY'", r.tpl)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for nodes.Next() {
			var id string
			nodes.Scan(&id)
			ids = append(ids, id)
		}
		nodes.Close()
		for _, id := range ids {
			i := indexOf(c.NodeIDs, id)
			if i < 0 {
				continue
			}
			got, err := fileSHA(c.NodeArtifact(i, r.aid))
			if err != nil || got != a.sha {
				t.Errorf("I2: template %s READY on %s, but the node holds %q (%v), want sha256 %s", r.tpl, id, got, err, a.sha)
			}
		}
	}
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

func fileSHA(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (c *Cluster) objectSHA(ctx context.Context, key string) (string, int64, error) {
	full := c.S3Prefix + key
	out, err := c.S3.admin.GetObject(ctx, &s3.GetObjectInput{Bucket: &c.S3.Bucket, Key: &full})
	if err != nil {
		return "", 0, err
	}
	defer out.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, out.Body)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// chunkGCState is the chunk collector's one bookkeeping object
// (adapters/chunkstore): it belongs to no template, and stays.
const chunkGCState = "_chunks/gc/state"

// bucketKeys lists the cluster's objects in the bucket, but for the chunk
// collector's state.
func (c *Cluster) bucketKeys(ctx context.Context) []string {
	var keys []string
	var token *string
	for {
		out, err := c.S3.admin.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &c.S3.Bucket, Prefix: aws.String(c.S3Prefix), ContinuationToken: token})
		if err != nil {
			return keys
		}
		for _, o := range out.Contents {
			if *o.Key != c.S3Prefix+chunkGCState {
				keys = append(keys, *o.Key)
			}
		}
		if out.IsTruncated == nil || !*out.IsTruncated {
			return keys
		}
		token = out.NextContinuationToken
	}
}

// BucketObjects counts the cluster's objects and its unfinished multipart
// uploads.
func (c *Cluster) BucketObjects() (objects, uploads int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	objects = len(c.bucketKeys(ctx))
	out, err := c.S3.admin.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &c.S3.Bucket, Prefix: aws.String(c.S3Prefix)})
	if err == nil {
		uploads = len(out.Uploads)
	}
	return objects, uploads
}

func deleteObject(ctx context.Context, p *S3Proxy, key string) {
	p.admin.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &p.Bucket, Key: &key})
}

// Templates lists the template ids in the database.
func (c *Cluster) Templates() []string {
	c.T.Helper()
	rows, err := c.DB.Query("SELECT template_id FROM t_cube_template_definition UNION SELECT template_id FROM t_cube_template_image_job")
	if err != nil {
		c.T.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// DeleteAll deletes every template through the API (retrying refusals
// while jobs finish) and then makes every remaining artifact row due for
// GC, which the masters' sweep collects: the suite ages the rows instead
// of waiting out the 7-day artifact TTL.
func (c *Cluster) DeleteAll(t testing.TB, timeout time.Duration) {
	t.Helper()
	api := c.API()
	deadline := time.Now().Add(timeout)
	for {
		left := c.Templates()
		if len(left) == 0 {
			break
		}
		var last Answer
		for _, id := range left {
			if a := api.Delete(id); !a.OK() && a.Ret.Code != 130404 {
				last = a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("templates %v not deleted after %v (last refusal: %s)", left, timeout, last)
		}
		time.Sleep(300 * time.Millisecond)
	}
	c.AgeArtifacts(t)
}

// AgeArtifacts moves every READY or FAILED artifact row 8 days into the
// past with a passed gc_deadline, as if the artifact TTL had run out.
func (c *Cluster) AgeArtifacts(t testing.TB) {
	t.Helper()
	if _, err := c.DB.Exec(`UPDATE t_cube_rootfs_artifact SET gc_deadline = 1, updated_at = NOW() - INTERVAL 8 DAY
		WHERE status IN ('READY','FAILED')`); err != nil {
		t.Fatal(err)
	}
}

// Leftovers describes what the cluster still holds: template rows, bucket
// objects and unfinished uploads, node files, build scratch directories,
// orphaned plugin processes. Empty means clean. The layer cache is not a
// leftover (it is a cache, bounded by its size cap); its partial downloads
// are counted by Partials.
func (c *Cluster) Leftovers() []string {
	var out []string
	for tb, n := range c.Rows() {
		if n != 0 {
			out = append(out, fmt.Sprintf("%d rows in %s", n, tb))
		}
	}
	if objs, ups := c.BucketObjects(); objs+ups > 0 {
		out = append(out, fmt.Sprintf("%d objects and %d unfinished uploads under %s", objs, ups, c.S3Prefix))
	}
	for i, d := range c.NodeDirs {
		if files := regularFiles(filepath.Join(d, "cubebox")); len(files) > 0 {
			out = append(out, fmt.Sprintf("%s holds %v", c.NodeIDs[i], files))
		}
		if files := regularFiles(filepath.Join(d, "templates")); len(files) > 0 {
			out = append(out, fmt.Sprintf("%s holds run templates %v", c.NodeIDs[i], files))
		}
	}
	for i, d := range c.TCDirs {
		if ds := scratchDirs(d); len(ds) > 0 {
			out = append(out, fmt.Sprintf("templatecenter-%d scratch holds %v", i, ds))
		}
	}
	if orphans := c.OrphanPlugins(); len(orphans) > 0 {
		out = append(out, fmt.Sprintf("ext4stream plugin processes without a live templatecenter: %v", orphans))
	}
	sort.Strings(out)
	return out
}

// CheckClean waits (up to timeout, for the sweeps) until Leftovers is
// empty and fails the test with what is left otherwise.
func (c *Cluster) CheckClean(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := c.Leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind after %v:\n  %s", timeout, strings.Join(left, "\n  "))
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// OrphanPlugins lists the child processes of killed data-plane replicas
// (their builder plugins) that still run.
func (c *Cluster) OrphanPlugins() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for pid, exe := range c.killedChildren {
		if cur, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && cur == exe {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

func regularFiles(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func scratchDirs(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "build-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// CheckIdle waits until no data-plane replica runs a build (a build whose
// job was settled must not keep running).
func (c *Cluster) CheckIdle(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		busy := map[string]float64{}
		for i, u := range c.TCURLs {
			if !c.TCs[i].Running() {
				continue
			}
			if v, err := Metrics(u, "cube_template_active_builds"); err != nil || v != 0 {
				busy[c.TCs[i].Name] = v
			}
		}
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("builds still running %v after their jobs settled: %v", timeout, busy)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Partials counts the partial layer downloads in the replicas' layer
// caches: kept after a failed pull so the next one resumes, deleted by the
// cache when it opens once they are a day old.
func (c *Cluster) Partials() int {
	n := 0
	for _, d := range c.TCDirs {
		n += len(regularFiles(filepath.Join(d, "layer-cache", "tmp")))
	}
	return n
}

// DirBytes is the size of the regular files under dir.
func DirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// ScratchBytes is the size of the build scratch of every replica, layer
// cache excluded.
func (c *Cluster) ScratchBytes() int64 {
	var n int64
	for _, d := range c.TCDirs {
		for _, s := range scratchDirs(d) {
			n += DirBytes(filepath.Join(d, s))
		}
	}
	return n
}

// ProcFigures are resource figures of one process.
type ProcFigures struct {
	Name       string
	PID        int
	OpenFiles  int
	Goroutines int // -1 when the process exposes no metrics
}

// Resources reads open files (/proc) and goroutines (/metrics) of every
// running process of the cluster.
func (c *Cluster) Resources() []ProcFigures {
	var out []ProcFigures
	add := func(p *Proc, base string) {
		f := ProcFigures{Name: p.Name, PID: p.PID(), OpenFiles: OpenFiles(p.PID()), Goroutines: -1}
		if base != "" {
			if v, err := Metrics(base, "go_goroutines"); err == nil {
				f.Goroutines = int(v)
			}
		}
		out = append(out, f)
	}
	for i, p := range c.Masters {
		add(p, c.MasterURLs[i])
	}
	for i, p := range c.TCs {
		add(p, c.TCURLs[i])
	}
	for _, p := range c.Nodes {
		add(p, "")
	}
	return out
}

// ErrNotReady is returned by helpers waiting for a state that did not come.
var ErrNotReady = errors.New("not ready")

// AgeJob moves a job's updated_at back by d, as if d had passed without a
// report: the masters' BUILT sweep only replays jobs idle for two minutes
// (a fixed bound), which the suite does not wait out.
func (c *Cluster) AgeJob(t testing.TB, jobID string, d time.Duration) {
	t.Helper()
	if _, err := c.DB.Exec("UPDATE t_cube_template_image_job SET updated_at = updated_at - INTERVAL ? SECOND WHERE job_id = ?", int(d.Seconds()), jobID); err != nil {
		t.Fatal(err)
	}
}

// JobRow is the stored status of a job.
func (c *Cluster) JobRow(jobID string) (status, phase, artifactID string) {
	c.DB.QueryRow("SELECT COALESCE(status,''), COALESCE(phase,''), COALESCE(artifact_id,'') FROM t_cube_template_image_job WHERE job_id = ?", jobID).Scan(&status, &phase, &artifactID)
	return
}

// ArtifactRow is the stored status of an artifact ("" if no row).
func (c *Cluster) ArtifactRow(artifactID string) (status, sha string) {
	c.DB.QueryRow("SELECT COALESCE(status,''), COALESCE(ext4_sha256,'') FROM t_cube_rootfs_artifact WHERE artifact_id = ?", artifactID).Scan(&status, &sha)
	return
}

// ObjectExists reports whether the artifact's object is in the bucket.
func (c *Cluster) ObjectExists(artifactID string) bool {
	full := c.S3Prefix + artifactID + "/" + artifactID + ".ext4"
	_, err := c.S3.admin.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &c.S3.Bucket, Key: &full})
	return err == nil
}

// WaitFor polls cond every 100ms until it holds or timeout passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
