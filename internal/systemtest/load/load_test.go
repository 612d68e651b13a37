package load

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.Cleanup()
	os.Exit(code)
}

// Sizes; CUBE_LOAD_SPECS and CUBE_LOAD_REQUESTS_PER_SPEC scale them up.
func size(env string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestLoad: every spec gets exactly one job and one build whichever master
// each of its concurrent requests reached (I1), each layer is fetched once
// per data-plane replica, every template ends READY on every node, and the
// deletes that follow leave nothing in the database, the bucket, the nodes
// or the scratch space.
func TestLoad(t *testing.T) {
	specs := size("CUBE_LOAD_SPECS", 20)
	perSpec := size("CUBE_LOAD_REQUESTS_PER_SPEC", 10)
	c := harness.Start(t, harness.Options{Masters: 2, DataPlanes: 2, Nodes: 2, MaxConcurrentBuilds: specs})
	mon := c.Watch(t)

	// One base layer under every image, one small layer of its own each.
	base := harness.RandomLayer(t, 2<<20)
	baseDigest, _ := base.Digest()
	refs := make([]string, specs)
	layers := map[string]bool{baseDigest.String(): true}
	for i := range refs {
		top := harness.RandomLayer(t, 32<<10)
		d, _ := top.Digest()
		layers[d.String()] = true
		refs[i] = c.PushLayers(fmt.Sprintf("load-%02d", i), []v1.Layer{base, top}...)
	}
	c.RegProxy.Reset()

	type answer struct {
		tpl  string
		a    harness.Answer
		took time.Duration
	}
	clients := []*harness.Client{c.Client(0), c.Client(1)}
	answers := make([]answer, specs*perSpec)
	var wg sync.WaitGroup
	start := time.Now()
	release := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			spec := i % specs
			tpl := fmt.Sprintf("tpl-load-%02d", spec)
			<-release
			a := clients[i%2].Create(tpl, refs[spec])
			answers[i] = answer{tpl: tpl, a: a, took: a.Took}
		}(i)
	}
	close(release)
	wg.Wait()
	createsDone := time.Since(start)

	jobOf := map[string]string{}
	var lat []time.Duration
	codes := map[int]int{}
	for _, an := range answers {
		lat = append(lat, an.took)
		codes[an.a.Ret.Code]++
		if !an.a.OK() || an.a.Job == nil {
			t.Errorf("create %s: %s", an.tpl, an.a)
			continue
		}
		if prev, ok := jobOf[an.tpl]; ok && prev != an.a.Job.JobID {
			t.Errorf("I1: %s got jobs %s and %s", an.tpl, prev, an.a.Job.JobID)
		}
		jobOf[an.tpl] = an.a.Job.JobID
	}
	if n := c.Count("SELECT COUNT(*) FROM t_cube_template_image_job"); n != specs {
		t.Errorf("I1: %d job rows for %d specs", n, specs)
	}

	for tpl, job := range jobOf {
		a := clients[0].WaitJobUntil(job, 5*time.Minute, func(j *harness.Job) bool {
			return j.Terminal() && (j.Status == "FAILED" || j.ReadyNodeCount == len(c.Nodes))
		})
		if a.Job == nil || a.Job.Status != "READY" || a.Job.ReadyNodeCount != len(c.Nodes) {
			t.Errorf("%s: %s", tpl, a)
		}
	}
	allReady := time.Since(start)
	c.CheckIdle(t, time.Minute)
	c.CheckInvariants(t, true)

	// One build per spec: the replicas' build counters (a reuse of a READY
	// artifact observes no build phase) and the uploads to the bucket.
	builds := map[string]float64{}
	total := 0.0
	for i, u := range c.TCURLs {
		v, _ := harness.Metrics(u, `cube_template_build_phase_duration_seconds_count{phase="BUILDING_EXT4"}`)
		builds[c.TCs[i].Name] = v
		total += v
	}
	if int(total) != specs {
		t.Errorf("%v builds for %d specs (%v)", total, specs, builds)
	}
	if puts := c.S3.Count(harness.S3Put, true) + c.S3.Count(harness.S3Complete, true); puts != specs {
		t.Errorf("%d artifacts uploaded for %d specs", puts, specs)
	}
	if n := c.Count("SELECT COUNT(*) FROM t_cube_rootfs_artifact WHERE status = 'READY'"); n != specs {
		t.Errorf("%d READY artifacts for %d specs", n, specs)
	}
	// Each layer fetched at most once by each replica.
	perReplica := map[int]int{}
	for d := range layers {
		for pid, n := range c.RegProxy.BlobGets(d) {
			if pid == 0 {
				t.Errorf("layer %s fetched by a process that is not a replica", d)
			}
			if n > 1 {
				t.Errorf("layer %s fetched %d times by replica pid %d, want once", d, n, pid)
			}
			perReplica[pid] += n
		}
	}

	// As many deletes, at both masters at once.
	delAnswers := make([]harness.Answer, specs*perSpec)
	delStart := time.Now()
	release = make(chan struct{})
	for i := range delAnswers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-release
			delAnswers[i] = clients[i%2].Delete(fmt.Sprintf("tpl-load-%02d", i%specs))
		}(i)
	}
	close(release)
	wg.Wait()
	var delLat []time.Duration
	delCodes := map[int]int{}
	for _, a := range delAnswers {
		delLat = append(delLat, a.Took)
		delCodes[a.Ret.Code]++
		if a.Err != nil || (a.Ret.Code != 200 && a.Ret.Code != 130404) {
			t.Errorf("delete: %s", a)
		}
	}
	c.CheckClean(t, 2*time.Minute)
	allGone := time.Since(delStart)
	mon.Stop()

	harness.Record(t, harness.Figure{Suite: "load", Name: "ConcurrentCreatesAndDeletes", Outcome: outcome(t), Seconds: time.Since(start).Seconds(),
		Proves: fmt.Sprintf("%d concurrent creates over %d specs sharing a base layer, at 2 masters with 2 data-plane replicas on one MariaDB and one bucket: one job and one build per spec (I1), each layer fetched at most once per replica, all READY on 2 nodes; %d deletes leave nothing", specs*perSpec, specs, specs*perSpec),
		Values: map[string]any{
			"requests": specs * perSpec, "specs": specs, "create_codes": codes, "delete_codes": delCodes,
			"create_p50_s": pct(lat, 50), "create_p99_s": pct(lat, 99), "all_creates_answered_s": createsDone.Seconds(),
			"time_to_all_ready_s": allReady.Seconds(), "delete_p50_s": pct(delLat, 50), "delete_p99_s": pct(delLat, 99),
			"time_to_all_gone_s": allGone.Seconds(), "builds_per_replica": builds, "layer_fetches_per_replica_pid": perReplica,
			"distinct_layers": len(layers),
		}})
}

func outcome(t *testing.T) string {
	if t.Failed() {
		return "FAIL"
	}
	return "pass"
}

// pct is the p-th percentile in seconds.
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i].Seconds()
}
