package control_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// setPolicy sets the API's policy.
func (e *env) setPolicy(doc string) {
	e.t.Helper()
	if _, err := e.svc.SetPolicy(e.ctx, []byte(doc)); err != nil {
		e.t.Fatalf("SetPolicy(%s): %v", doc, err)
	}
}

// readyOn lists the nodes holding a READY replica of tid.
func (e *env) readyOn(tid string) []string {
	var out []string
	for id, r := range e.replicas(tid) {
		if r.Status == core.ReplicaReady {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// pass runs one controller pass and waits for the redos it started.
func (e *env) pass() control.PlacementReport {
	e.t.Helper()
	rep, err := e.svc.PlacementPass(e.ctx)
	if err != nil {
		e.t.Fatalf("placement pass: %v", err)
	}
	e.wait()
	return rep
}

// fpOf is a fingerprint of its own (an artifact of its own) per name.
func fpOf(name string) string {
	sum := sha256.Sum256([]byte(name))
	return testFingerprint("sha256:" + hex.EncodeToString(sum[:]))
}

func decisionsOf(rep control.PlacementReport, decision string) []string {
	var out []string
	for _, d := range rep.Decisions {
		if d.Decision == decision {
			out = append(out, d.TemplateID+"@"+d.NodeID+":"+d.Reason)
		}
	}
	sort.Strings(out)
	return out
}

// TestPlacementByPolicy: what create, the controller and convergence do
// under a policy, table-driven. Each case builds templates in order (one
// clock tick apart, so "least recently placed" is the order they were
// built), sets nodes' health, runs a pass, and checks where every template
// is READY.
func TestPlacementByPolicy(t *testing.T) {
	type tmpl struct {
		id    string
		scope []string
		fp    string // its build's fingerprint; fpA (one artifact for all) when ""
	}
	cases := []struct {
		name   string
		nodes  []string
		policy string
		// policyAfter is set after the templates are built.
		policyAfter string
		templates   []tmpl
		down        []string // nodes down before the pass
		wantBefore  map[string][]string
		wantAfter   map[string][]string
		wantEvicted []string
		wantAdded   []string
		wantRan     bool
	}{
		{
			name:  "no policy: every template everywhere, the controller does nothing",
			nodes: []string{"node-1", "node-2"}, templates: []tmpl{{id: "tpl-a"}, {id: "tpl-b"}},
			wantBefore: map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1", "node-2"}},
			wantAfter:  map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1", "node-2"}},
		},
		{
			name:  "node budget: a new template goes where it fits, else to the node with most room, whose least recently placed replica is evicted",
			nodes: []string{"node-1", "node-2"}, policy: `{"per_node_max_templates": 1}`,
			templates:   []tmpl{{id: "tpl-a"}, {id: "tpl-b"}},
			wantBefore:  map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1"}},
			wantAfter:   map[string][]string{"tpl-a": {"node-2"}, "tpl-b": {"node-1"}},
			wantEvicted: []string{"tpl-a@node-1:node_over_budget"},
			wantRan:     true,
		},
		{
			name:  "byte budget: a pinned template is placed over budget on both nodes; unpinned replicas make room, the last READY one of each stays",
			nodes: []string{"node-1", "node-2"}, policy: `{"per_node_max_bytes": 134217728, "pinned_templates": [{"template_id": "tpl-pin", "min_replicas": 2}]}`,
			templates: []tmpl{{id: "tpl-a", fp: fpOf("a")}, {id: "tpl-b", fp: fpOf("b")}, {id: "tpl-pin", fp: fpOf("pin")}},
			wantBefore: map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1", "node-2"},
				"tpl-pin": {"node-1", "node-2"}},
			wantAfter:   map[string][]string{"tpl-a": {"node-2"}, "tpl-b": {"node-1"}, "tpl-pin": {"node-1", "node-2"}},
			wantEvicted: []string{"tpl-a@node-1:node_over_budget", "tpl-b@node-2:node_over_budget"},
			wantRan:     true,
		},
		{
			name:  "byte budget: templates sharing one artifact are charged its bytes once per node, so nothing is over budget",
			nodes: []string{"node-1", "node-2"}, policy: `{"per_node_max_bytes": 134217728, "pinned_templates": [{"template_id": "tpl-pin", "min_replicas": 2}]}`,
			templates: []tmpl{{id: "tpl-a"}, {id: "tpl-b"}, {id: "tpl-pin"}},
			wantBefore: map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1", "node-2"},
				"tpl-pin": {"node-1", "node-2"}},
			wantAfter: map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1", "node-2"}, "tpl-pin": {"node-1", "node-2"}},
			wantRan:   true,
		},
		{
			name:  "byte budget: a new template sharing the artifact a full node holds goes there too",
			nodes: []string{"node-1", "node-2"}, policy: `{"per_node_max_bytes": 67108864}`,
			templates:  []tmpl{{id: "tpl-a", scope: []string{"node-2"}}, {id: "tpl-c", scope: []string{"node-1"}, fp: fpOf("c")}, {id: "tpl-b"}},
			wantBefore: map[string][]string{"tpl-a": {"node-2"}, "tpl-c": {"node-1"}, "tpl-b": {"node-2"}},
			wantAfter:  map[string][]string{"tpl-a": {"node-2"}, "tpl-c": {"node-1"}, "tpl-b": {"node-2"}},
			wantRan:    true,
		},
		{
			name:  "nothing evicted that would leave a template with no READY replica",
			nodes: []string{"node-1"}, templates: []tmpl{{id: "tpl-a"}, {id: "tpl-b"}},
			policyAfter: `{"per_node_max_templates": 1}`,
			wantBefore:  map[string][]string{"tpl-a": {"node-1"}, "tpl-b": {"node-1"}},
			wantAfter:   map[string][]string{"tpl-a": {"node-1"}, "tpl-b": {"node-1"}},
			wantRan:     true,
		},
		{
			name:  "templates created with named nodes are never evicted",
			nodes: []string{"node-1", "node-2"}, templates: []tmpl{{id: "tpl-a", scope: []string{"node-1", "node-2"}}, {id: "tpl-b", scope: []string{"node-1", "node-2"}}},
			policyAfter: `{"per_node_max_templates": 1}`,
			wantBefore:  map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1", "node-2"}},
			wantAfter:   map[string][]string{"tpl-a": {"node-1", "node-2"}, "tpl-b": {"node-1", "node-2"}},
			wantRan:     true,
		},
		{
			name:  "a pin with max_replicas and a name selector",
			nodes: []string{"node-1", "node-2", "node-3"}, policy: `{"pinned_templates": [{"template_id": "tpl-pin", "min_replicas": 1, "max_replicas": 2, "nodes": ["node-2", "10.0.0.3"]}]}`,
			templates:  []tmpl{{id: "tpl-pin"}, {id: "tpl-a"}},
			wantBefore: map[string][]string{"tpl-pin": {"node-2", "node-3"}, "tpl-a": {"node-1", "node-2", "node-3"}},
			wantAfter:  map[string][]string{"tpl-pin": {"node-2", "node-3"}, "tpl-a": {"node-1", "node-2", "node-3"}},
			wantRan:    true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.nodes...)
			if tc.policy != "" {
				e.setPolicy(tc.policy)
			}
			for _, tp := range tc.templates {
				req := request(tp.id)
				req.DistributionScope = tp.scope
				job := e.create(req)
				fp := tp.fp
				if fp == "" {
					fp = fpA
				}
				e.build(job.JobID, fp)
				e.wait()
				e.clock.Advance(1)
			}
			for tid, want := range tc.wantBefore {
				eqSlice(t, tid+" READY on, before", e.readyOn(tid), want)
			}
			if tc.policyAfter != "" {
				e.setPolicy(tc.policyAfter)
			}
			if tc.down != nil {
				var up []string
				for _, n := range tc.nodes {
					if !slices.Contains(tc.down, n) {
						up = append(up, n)
					}
				}
				e.setHealthy(up...)
			}
			rep := e.pass()
			eq(t, "pass ran", rep.Ran, tc.wantRan)
			for tid, want := range tc.wantAfter {
				eqSlice(t, tid+" READY on, after", e.readyOn(tid), want)
			}
			eqSlice(t, "evicted", decisionsOf(rep, core.DecisionEvict), tc.wantEvicted)
			eqSlice(t, "added", decisionsOf(rep, core.DecisionAdd), tc.wantAdded)
			// Every template keeps a READY replica, whatever was evicted.
			for _, tp := range tc.templates {
				if len(e.readyOn(tp.id)) == 0 {
					t.Errorf("%s has no READY replica left", tp.id)
				}
			}
		})
	}
}

// TestPinnedMinimumHoldsWhenANodeDies: tpl-pin is pinned to two of three
// nodes with a two-template budget per node; node-1 dies, and the
// controller puts it on node-3 after evicting the unpinned tpl-a there
// (READY on node-2 too), never tpl-b (its only replica). When node-1
// comes back nothing more is added.
func TestPinnedMinimumHoldsWhenANodeDies(t *testing.T) {
	e := newEnv(t, "node-1", "node-2", "node-3")
	e.setPolicy(`{"pinned_templates": [{"template_id": "tpl-pin", "min_replicas": 2, "max_replicas": 2}], "per_node_max_templates": 2}`)
	job := e.create(request("tpl-pin"))
	e.build(job.JobID, fpA)
	e.wait()
	eqSlice(t, "pin placed on max_replicas nodes", e.readyOn("tpl-pin"), []string{"node-1", "node-2"})
	for _, tid := range []string{"tpl-a", "tpl-b"} {
		e.clock.Advance(1)
		j := e.create(request(tid))
		e.build(j.JobID, fpA)
		e.wait()
	}
	// tpl-a: fits node-1..3 (1 each on node-1, node-2; 0 on node-3).
	eqSlice(t, "tpl-a", e.readyOn("tpl-a"), []string{"node-1", "node-2", "node-3"})
	eqSlice(t, "tpl-b", e.readyOn("tpl-b"), []string{"node-3"})

	e.setHealthy("node-2", "node-3") // node-1 dies
	rep := e.pass()
	// node-3 holds tpl-a and tpl-b (2 of 2): tpl-a is evictable there
	// (READY on node-2 too), tpl-b is not (its only replica).
	eqSlice(t, "evicted", decisionsOf(rep, core.DecisionEvict), []string{"tpl-a@node-3:make_room_for_pin"})
	eqSlice(t, "added", decisionsOf(rep, core.DecisionAdd), []string{"tpl-pin@node-3:below_min_replicas"})
	eqSlice(t, "tpl-pin after node-1 died", e.readyOn("tpl-pin"), []string{"node-1", "node-2", "node-3"})

	// node-1 comes back: the pin is at its minimum on healthy nodes; nothing to add.
	e.setHealthy("node-1", "node-2", "node-3")
	rep = e.pass()
	eqSlice(t, "added after the return", decisionsOf(rep, core.DecisionAdd), nil)

	// The decisions are kept per template and readable by id.
	ds, err := e.svc.PlacementDecisions(e.ctx, "tpl-pin")
	if err != nil || len(ds) == 0 || ds[0].Decision != core.DecisionAdd || ds[0].JobID == "" {
		t.Fatalf("decisions of tpl-pin: %+v, %v", ds, err)
	}
	ds, _ = e.svc.PlacementDecisions(e.ctx, "tpl-a")
	if len(ds) == 0 || ds[0].Decision != core.DecisionEvict || ds[0].NodeID != "node-3" {
		t.Fatalf("decisions of tpl-a: %+v", ds)
	}
}

// TestConvergenceRespectsPolicy: convergence does not bring an unpinned
// template to a node that joins when nodes have budgets, and leaves pins
// to the controller; without a policy it does, as before.
func TestConvergenceRespectsPolicy(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.setHealthy("node-1")
	e.setPolicy(`{"per_node_max_templates": 5}`)
	e.ready("tpl-a", fpA)
	eqSlice(t, "tpl-a", e.readyOn("tpl-a"), []string{"node-1"})
	e.setHealthy("node-1", "node-2")
	started, err := e.svc.Converge(e.ctx)
	if err != nil || len(started) != 0 {
		t.Fatalf("convergence under budgets started %d jobs, %v", len(started), err)
	}
	e.setPolicy("") // back to the default: everything everywhere
	started, err = e.svc.Converge(e.ctx)
	if err != nil || len(started) != 1 {
		t.Fatalf("convergence without a policy: %d jobs, %v", len(started), err)
	}
	e.wait()
	eqSlice(t, "tpl-a, converged", e.readyOn("tpl-a"), []string{"node-1", "node-2"})
}

// TestPlacementOneMasterAtATime: a master whose pass cannot take the
// controller's lock does nothing; a pass whose lock is lost while it
// evicts stops before its next write (the replica row stays, no other
// replica is evicted, no decision is stored after the loss).
func TestPlacementOneMasterAtATime(t *testing.T) {
	e := newEnv(t, "node-1", "node-2", "node-3")
	e.setPolicy(`{"per_node_max_templates": 1}`)
	for _, tid := range []string{"tpl-a", "tpl-b", "tpl-c"} {
		j := e.create(request(tid))
		e.build(j.JobID, fpA)
		e.wait()
		e.clock.Advance(1)
	}
	// tpl-a everywhere; tpl-b fits nowhere: node-1; tpl-c: node-2. Two
	// evictions are due: tpl-a from node-1 and from node-2.
	eqSlice(t, "tpl-a", e.readyOn("tpl-a"), []string{"node-1", "node-2", "node-3"})
	eqSlice(t, "tpl-c", e.readyOn("tpl-c"), []string{"node-2"})
	held, err := e.locker.TryLock(e.ctx, control.PlacementLockName)
	if err != nil {
		t.Fatal(err)
	}
	other := e.otherMaster()
	rep, err := other.PlacementPass(e.ctx)
	if err != nil || rep.Ran || len(rep.Decisions) != 0 {
		t.Fatalf("a master without the lock acted: %+v, %v", rep, err)
	}
	_ = held.Unlock(e.ctx)

	ll := &losableLocker{Locker: e.locker, lost: map[string]chan struct{}{}}
	e.svc.Locker = ll
	var cleanups atomic.Int32
	e.agent.CleanupTemplateFunc = func(context.Context, ports.Node, string, string) error {
		cleanups.Add(1)
		ll.die(control.PlacementLockName) // the session dies during the first eviction
		return nil
	}
	if _, err = e.svc.PlacementPass(e.ctx); err == nil {
		t.Error("a pass that lost its lock reported success")
	}
	eq(t, "evictions started", cleanups.Load(), int32(1))
	eqSlice(t, "tpl-a after the lost pass (the second eviction never ran)", e.readyOn("tpl-a"), []string{"node-2", "node-3"})
	for _, tid := range []string{"tpl-a", "tpl-b", "tpl-c"} {
		if ds, _ := e.store.Policies().Decisions(e.ctx, tid, 0); len(ds) != 0 {
			t.Errorf("%s: decisions stored after the lock was lost: %+v", tid, ds)
		}
	}
	// The lock is free again: the next pass (any master's) finishes.
	e.agent.CleanupTemplateFunc = func(context.Context, ports.Node, string, string) error { return nil }
	if _, err := other.PlacementPass(e.ctx); err != nil {
		t.Fatal(err)
	}
	eqSlice(t, "tpl-a after the next pass", e.readyOn("tpl-a"), []string{"node-3"})
}

// TestPolicyAPI: the API's policy takes the configuration's place, a bad
// one is refused naming the field, and clearing it brings the
// configuration's back.
func TestPolicyAPI(t *testing.T) {
	e := newEnv(t, "node-1")
	pf, err := e.svc.Policy(e.ctx)
	if err != nil || pf.Source != control.PolicySourceDefault || pf.Policy.Active() {
		t.Fatalf("default policy: %+v, %v", pf, err)
	}
	e.svc.Config.PlacementPolicy = &core.PlacementPolicy{PerNodeMaxTemplates: 9}
	if pf, _ = e.svc.Policy(e.ctx); pf.Source != control.PolicySourceFile || pf.Policy.PerNodeMaxTemplates != 9 {
		t.Fatalf("file policy: %+v", pf)
	}
	for _, tc := range []struct{ doc, field string }{
		{`{"per_node_max_bytes": -1}`, "per_node_max_bytes"},
		{`{"pinned_templates": [{"template_id": "a", "min_replicas": 3, "max_replicas": 2}]}`, "pinned_templates[0].max_replicas"},
		{`{"pinned_tempaltes": []}`, "placement_policy"},
	} {
		_, err := e.svc.SetPolicy(e.ctx, []byte(tc.doc))
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("SetPolicy(%s): %v; want an error naming %s", tc.doc, err, tc.field)
		}
	}
	e.setPolicy(`{"per_node_max_templates": 3, "per_template_min_redo_interval": "10m"}`)
	if pf, _ = e.svc.Policy(e.ctx); pf.Source != control.PolicySourceAPI || pf.Policy.PerNodeMaxTemplates != 3 {
		t.Fatalf("api policy: %+v", pf)
	}
	e.setPolicy("")
	if pf, _ = e.svc.Policy(e.ctx); pf.Source != control.PolicySourceFile {
		t.Fatalf("cleared: %+v", pf)
	}
}

// TestPinCooldownAndJoiningNode: a pin below its minimum whose redo did
// not bring it up (the node's snapshot fails) is not redone again before
// per_template_min_redo_interval; after it, it is. A node that joins with
// the pin's label gets the pinned template; one without it does not.
func TestPinCooldownAndJoiningNode(t *testing.T) {
	e := newEnv(t, "node-1", "node-2", "node-3", "node-4")
	e.setHealthy("node-1", "node-2")
	e.setPolicy(`{"per_template_min_redo_interval": "10m",
		"node_labels": {"node-1": {"tier": "hot"}, "node-2": {"tier": "hot"}, "node-3": {"tier": "hot"}},
		"pinned_templates": [{"template_id": "tpl-pin", "min_replicas": 3, "node_selector": {"tier": "hot"}}]}`)
	e.set(func() { e.snapFail["node-2"] = errors.New("snapshot failed") })
	j := e.create(request("tpl-pin"))
	e.build(j.JobID, fpA)
	e.wait()
	eqSlice(t, "tpl-pin at first", e.readyOn("tpl-pin"), []string{"node-1"})

	rep := e.pass()
	eqSlice(t, "first pass", decisionsOf(rep, core.DecisionAdd), []string{"tpl-pin@node-2:below_min_replicas"})
	eqSlice(t, "after a failed redo", e.readyOn("tpl-pin"), []string{"node-1"})
	rep = e.pass()
	eqSlice(t, "second pass, within the interval", decisionsOf(rep, core.DecisionSkipped), []string{"tpl-pin@:cooldown"})

	e.set(func() { delete(e.snapFail, "node-2") })
	e.clock.Advance(11 * time.Minute)
	rep = e.pass()
	eqSlice(t, "after the interval", decisionsOf(rep, core.DecisionAdd), []string{"tpl-pin@node-2:below_min_replicas"})
	eqSlice(t, "tpl-pin", e.readyOn("tpl-pin"), []string{"node-1", "node-2"})

	// node-3 (tier hot) and node-4 (no label) join.
	e.clock.Advance(11 * time.Minute)
	e.setHealthy("node-1", "node-2", "node-3", "node-4")
	rep = e.pass()
	eqSlice(t, "joining nodes", decisionsOf(rep, core.DecisionAdd), []string{"tpl-pin@node-3:below_min_replicas"})
	eqSlice(t, "tpl-pin after the join", e.readyOn("tpl-pin"), []string{"node-1", "node-2", "node-3"})
}

// TestSynchronousCreatePlacesByPolicy: a template created from a sandbox
// request with no nodes named snapshots only on its pin's nodes.
func TestSynchronousCreatePlacesByPolicy(t *testing.T) {
	e := newEnv(t, "node-1", "node-2", "node-3")
	e.setPolicy(`{"pinned_templates": [{"template_id": "tpl-sync", "min_replicas": 1, "nodes": ["node-3"]}]}`)
	if _, err := e.createTemplate(sandboxCreate("tpl-sync")); err != nil {
		t.Fatal(err)
	}
	eqSlice(t, "tpl-sync", e.readyOn("tpl-sync"), []string{"node-3"})
}

// TestStuckDecisionKeptOnce: a node over budget whose replicas must all
// stay says so every pass, but the record keeps it once.
func TestStuckDecisionKeptOnce(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	e.ready("tpl-b", fpA)
	e.setPolicy(`{"per_node_max_templates": 1}`)
	for range 3 {
		rep := e.pass()
		eqSlice(t, "kept", decisionsOf(rep, core.DecisionSkipped), []string{"tpl-a@node-1:last_ready_replica", "tpl-b@node-1:last_ready_replica"})
	}
	ds, err := e.svc.PlacementDecisions(e.ctx, "tpl-a")
	if err != nil || len(ds) != 1 || ds[0].Reason != core.ReasonLastReady {
		t.Fatalf("tpl-a's record: %+v, %v", ds, err)
	}
}
