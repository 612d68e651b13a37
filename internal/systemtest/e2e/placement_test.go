package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/mysqllock"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// placementRig is two masters, one data plane and three node agents on
// one MariaDB database, the masters running the placement controller
// every second.
type placementRig struct {
	*cluster
	masters    []*proc
	masterURLs []string
}

func startPlacementRig(t *testing.T) *placementRig {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), token: "e2e-" + randHex(16)}
	c.registry = testenv.Get(t, testenv.Registry)
	dsn, db := freshMariaDB(t)
	c.db = db
	bin := buildBinaries(t)
	r := &placementRig{cluster: c}
	for range 2 {
		r.masterURLs = append(r.masterURLs, "http://"+freeAddr(t))
	}
	c.masterURL = r.masterURLs[0]
	tcAddr := freeAddr(t)
	work := filepath.Join(c.dir, "tc")
	c.tc = []*proc{{name: "templatecenter", bin: filepath.Join(bin, "templatecenter"), args: []string{"serve", "--listen", tcAddr},
		env: []string{
			"CUBE_TEMPLATE_CENTER_DB_DSN=" + dsn,
			"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR=" + work,
			"CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR=" + filepath.Join(work, "store"),
			"CUBE_TEMPLATE_CENTER_PLUGIN_DIR=" + bin,
			"CUBE_TEMPLATE_CENTER_BUILDER=ext4stream",
			"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES=" + c.registry,
			"CUBE_TEMPLATE_CALLBACK_TOKEN=" + c.token,
			"CUBE_MASTER_ADDR=" + r.masterURLs[0],
		}}}
	var nodesSpec []string
	for i := range 3 {
		addr := freeAddr(t)
		data := filepath.Join(c.dir, fmt.Sprintf("node%d", i))
		id := fmt.Sprintf("node-%d", i+1)
		c.nodeAddrs, c.nodeDirs = append(c.nodeAddrs, addr), append(c.nodeDirs, data)
		nodesSpec = append(nodesSpec, id+"="+addr)
		c.nodes = append(c.nodes, &proc{name: id, bin: filepath.Join(bin, "nodeagent"),
			args: []string{"--listen", addr, "--data-dir", data, "--node-id", id, "--master-urls", strings.Join(r.masterURLs, ",")},
			env:  []string{"CUBE_NODEAGENT_TOKEN=" + e2eNodeToken}})
	}
	for i, u := range r.masterURLs {
		r.masters = append(r.masters, &proc{name: fmt.Sprintf("cubemaster-%d", i), bin: filepath.Join(bin, "cubemaster"),
			args: []string{"serve", "--listen", strings.TrimPrefix(u, "http://"), "--log-level", "debug"},
			env: []string{
				"CUBE_MASTER_DB_DSN=" + dsn,
				"CUBE_TEMPLATE_CENTER_ADDR=http://" + tcAddr,
				"CUBE_TEMPLATE_CALLBACK_TOKEN=" + c.token,
				"CUBE_MASTER_NODES=" + strings.Join(nodesSpec, ","),
				"CUBE_MASTER_DOWNLOAD_BASE_URL=" + u,
				"CUBE_MASTER_SWEEP_INTERVAL=2s",
				"CUBE_MASTER_NODE_PROBE_INTERVAL=1s",
				"CUBE_MASTER_PLACEMENT_INTERVAL=1s",
				"CUBE_MASTER_AUTH_BEARER_TOKENS=" + c.apiToken(),
				"CUBE_MASTER_NODE_TOKEN=" + e2eNodeToken,
			}})
	}
	c.master = r.masters[0]
	t.Cleanup(func() {
		for _, p := range append(append(slices.Clone(r.masters), c.tc...), c.nodes...) {
			p.stop()
			if t.Failed() && p.log != nil {
				t.Logf("---- %s log ----\n%s", p.name, tail(p.log.String(), 8000))
			}
		}
	})
	r.masters[0].start(t) // migrates the schema
	waitHTTP(t, r.masterURLs[0]+"/notify/health")
	r.masters[1].start(t)
	waitHTTP(t, r.masterURLs[1]+"/notify/health")
	c.tc[0].start(t)
	waitHTTP(t, "http://"+tcAddr+"/health")
	for _, p := range c.nodes {
		p.start(t)
	}
	for _, a := range c.nodeAddrs {
		waitTCP(t, a)
	}
	return r
}

// on calls master i.
func (r *placementRig) on(i int, method, path string, body any) envelope {
	r.t.Helper()
	saved := r.masterURL
	r.masterURL = r.masterURLs[i]
	defer func() { r.masterURL = saved }()
	return r.call(method, path, body)
}

// readyOn lists the nodes with a READY replica of tid (the rows
// sandboxes are scheduled by).
func (r *placementRig) readyOn(tid string) []string {
	r.t.Helper()
	rows, err := r.db.Query("SELECT node_id FROM t_cube_template_replica WHERE template_id = ? AND status = 'READY' AND cleanup_required = false ORDER BY node_id", tid)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		out = append(out, id)
	}
	return out
}

// waitFor polls cond until it holds (or fails the test after a minute).
func (r *placementRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// create builds a template with no nodes named and waits for its job.
func (r *placementRig) create(tid, image string) envelope {
	r.t.Helper()
	e := r.createFromImage(tid, image)
	if e.Ret.Code != 200 || e.Job == nil {
		r.t.Fatalf("create %s: %s", tid, e.Raw)
	}
	done := r.waitJob(e.Job.JobID, 3*time.Minute)
	if done.Job.Status != "READY" {
		r.t.Fatalf("create %s: %s", tid, done.Raw)
	}
	return done
}

type decisionView struct {
	TemplateID string `json:"template_id"`
	NodeID     string `json:"node_id"`
	Decision   string `json:"decision"`
	Reason     string `json:"reason"`
	JobID      string `json:"job_id"`
	Master     string `json:"master"`
}

// decisions reads a template's decisions from master i.
func (r *placementRig) decisions(i int, tid string) []decisionView {
	r.t.Helper()
	e := r.on(i, http.MethodGet, "/cube/template/"+tid+"/placement", nil)
	var v struct {
		Data struct {
			Decisions []decisionView `json:"decisions"`
		} `json:"data"`
	}
	if e.Ret.Code != 200 || json.Unmarshal(e.Raw, &v) != nil {
		r.t.Fatalf("decisions of %s: %s", tid, e.Raw)
	}
	return v.Data.Decisions
}

func hasDecision(ds []decisionView, decision, reason, node string) bool {
	return slices.ContainsFunc(ds, func(d decisionView) bool {
		return d.Decision == decision && d.Reason == reason && (node == "" || d.NodeID == node)
	})
}

// decisionCount sums a decision's counter over both masters' metrics.
func (r *placementRig) decisionCount(t *testing.T, decision, reason string) float64 {
	n := 0.0
	for _, u := range r.masterURLs {
		v, _ := value(scrape(t, u+"/metrics"), fmt.Sprintf(`cube_template_placement_decisions_total{decision=%q,reason=%q}`, decision, reason))
		n += v
	}
	return n
}

// TestPlacementAcrossMastersAndNodes drives the placement controller
// through real processes: two masters sharing a database, three node
// agents, one data plane.
//
//  1. Without a policy every template goes everywhere.
//  2. A policy set through one master (a byte budget of two templates per
//     node, a template pinned to two nodes) is the other's too. The pinned
//     template, created with no nodes named, goes to two nodes over their
//     budget; the controller evicts the least recently placed unpinned
//     replicas there, never a template's last READY one.
//  3. While the test holds the controller's lock, neither master acts.
//  4. A node holding the pin dies: the pin's minimum holds on the third
//     node, at its byte budget, by evicting an unpinned replica there. The
//     node comes back and nothing more is added.
//  5. Every decision is in the API (from either master) and the metrics.
func TestPlacementAcrossMastersAndNodes(t *testing.T) {
	r := startPlacementRig(t)
	// An image of its own per template (a few random bytes each): templates
	// sharing an artifact are charged its bytes once per node, and the
	// budget below is counted in distinct artifacts.
	image := func(name string) string { return pushImage(t, r.registry, "placement-"+name, 16) }

	// 1. Default: everything everywhere.
	a := r.create("pl-a", image("a"))
	r.create("pl-b", image("b"))
	all := []string{"node-1", "node-2", "node-3"}
	for _, tid := range []string{"pl-a", "pl-b"} {
		if got := r.readyOn(tid); !slices.Equal(got, all) {
			t.Fatalf("%s without a policy: READY on %v, want every node", tid, got)
		}
	}
	size := a.Job.Artifact.Size
	if size <= 0 {
		t.Fatalf("artifact size %d", size)
	}

	// 2. A budget of two templates' bytes per node; pl-p pinned to two.
	policy := map[string]any{
		"per_node_max_bytes": 2*size + size/2,
		"pinned_templates":   []map[string]any{{"template_id": "pl-p", "min_replicas": 2, "max_replicas": 2, "priority": 10}},
	}
	if e := r.on(0, http.MethodPut, "/cube/placement/policy", policy); e.Ret.Code != 200 {
		t.Fatalf("PUT policy: %s", e.Raw)
	}
	if e := r.on(1, http.MethodGet, "/cube/placement/policy", nil); !strings.Contains(string(e.Raw), `"source":"api"`) ||
		!strings.Contains(string(e.Raw), `"pl-p"`) {
		t.Fatalf("the other master's policy: %s", e.Raw)
	}
	if e := r.on(1, http.MethodPut, "/cube/placement/policy", map[string]any{"per_node_max_bytes": -1}); e.Ret.Code == 200 ||
		!strings.Contains(e.Ret.Msg, "per_node_max_bytes") {
		t.Fatalf("a bad policy: %s", e.Raw)
	}
	r.create("pl-p", image("p"))
	// Placed on its two nodes although they are full; then each of them
	// loses pl-a, the least recently placed unpinned template (node-3
	// keeps both: it is within its budget).
	r.waitFor("evictions on the pinned nodes", func() bool {
		return len(r.readyOn("pl-a")) == 1
	})
	if got := r.readyOn("pl-p"); !slices.Equal(got, []string{"node-1", "node-2"}) {
		t.Fatalf("pl-p: READY on %v, want node-1 and node-2", got)
	}
	eqNodes(t, "pl-a", r.readyOn("pl-a"), []string{"node-3"})
	eqNodes(t, "pl-b", r.readyOn("pl-b"), all)

	// 3. The test holds the controller's lock: neither master acts, even
	// when the policy asks for more (pl-b pinned to three nodes is met;
	// pl-a pinned to two is not).
	// Lock, not TryLock: a master's pass may hold it for a moment.
	lctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := mysqllock.New(r.db).Lock(lctx, control.PlacementLockName)
	if err != nil {
		t.Fatalf("take the controller's lock: %v", err)
	}
	skipsBefore := []int{strings.Count(r.masters[0].log.String(), "placement controller runs on another master"),
		strings.Count(r.masters[1].log.String(), "placement controller runs on another master")}
	policy["pinned_templates"] = append(policy["pinned_templates"].([]map[string]any), map[string]any{"template_id": "pl-a", "min_replicas": 2})
	if e := r.on(1, http.MethodPut, "/cube/placement/policy", policy); e.Ret.Code != 200 {
		t.Fatalf("PUT policy: %s", e.Raw)
	}
	// Both masters try (and skip) at least twice after the change.
	r.waitFor("both masters skip their passes", func() bool {
		for i, m := range r.masters {
			if strings.Count(m.log.String(), "placement controller runs on another master") < skipsBefore[i]+2 {
				return false
			}
		}
		return true
	})
	eqNodes(t, "pl-a while the lock is held elsewhere", r.readyOn("pl-a"), []string{"node-3"})
	held.Unlock(context.Background())
	// Released: one of them adds pl-a to node-1 or node-2, both at their
	// budget (pl-b and pl-p), after evicting pl-b there (on three nodes).
	r.waitFor("pl-a back at its pin's minimum", func() bool { return len(r.readyOn("pl-a")) >= 2 })
	if !hasDecision(r.decisions(1, "pl-a"), "add", "below_min_replicas", "") {
		t.Fatalf("no add decision for pl-a: %+v", r.decisions(1, "pl-a"))
	}

	// 4. node-1 dies; pl-p is down to one READY replica on a healthy node.
	// Back to the first policy (pl-a unpinned again).
	policy["pinned_templates"] = policy["pinned_templates"].([]map[string]any)[:1]
	if e := r.on(0, http.MethodPut, "/cube/placement/policy", policy); e.Ret.Code != 200 {
		t.Fatalf("PUT policy: %s", e.Raw)
	}
	r.nodes[0].kill9()
	r.waitFor("pl-p on node-3", func() bool { return slices.Contains(r.readyOn("pl-p"), "node-3") })
	ds := r.decisions(0, "pl-p")
	if !hasDecision(ds, "add", "below_min_replicas", "node-3") {
		t.Fatalf("pl-p decisions: %+v", ds)
	}
	// node-3 was at its budget: something unpinned went from it, and
	// every template still has a READY replica on a healthy node.
	evictedOn3 := false
	for _, tid := range []string{"pl-a", "pl-b"} {
		if hasDecision(r.decisions(0, tid), "evict", "make_room_for_pin", "node-3") {
			evictedOn3 = true
		}
		if !slices.ContainsFunc(r.readyOn(tid), func(n string) bool { return n != "node-1" }) {
			t.Errorf("%s has no READY replica on a healthy node: %v", tid, r.readyOn(tid))
		}
	}
	if !evictedOn3 {
		t.Error("no unpinned replica was evicted from node-3 to make room for pl-p")
	}
	// node-1 comes back: the pin is met; nothing more is added for it.
	adds := len(r.decisions(0, "pl-p"))
	r.nodes[0].start(t)
	waitTCP(t, r.nodeAddrs[0])
	skips := r.decisionCount(t, "skipped", "min_replicas_met")
	r.waitFor("passes after node-1 is back", func() bool { return r.decisionCount(t, "skipped", "min_replicas_met") >= skips+3 })
	if n := len(r.decisions(0, "pl-p")); n != adds {
		t.Errorf("pl-p got %d more decisions after node-1 came back: %+v", n-adds, r.decisions(0, "pl-p"))
	}

	// 5. The metrics of the two masters count the decisions.
	for _, dr := range [][2]string{{"add", "below_min_replicas"}, {"evict", "node_over_budget"}, {"evict", "make_room_for_pin"}} {
		if r.decisionCount(t, dr[0], dr[1]) < 1 {
			t.Errorf("no %s/%s in the masters' metrics", dr[0], dr[1])
		}
	}
	// Every evict and add in the store came from one master at a time:
	// the decisions name the master that made them.
	for _, tid := range []string{"pl-a", "pl-b", "pl-p"} {
		for _, d := range r.decisions(1, tid) {
			if d.Master == "" {
				t.Errorf("decision without its master: %+v", d)
			}
		}
	}
}

func eqNodes(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: READY on %v, want %v", what, got, want)
	}
}
