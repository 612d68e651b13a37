package control_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// lose removes artifact aid from node's disk behind the master's back (a
// DestroyImage from someone else, a wiped disk).
func (e *env) lose(nodeID, aid string) {
	e.set(func() { delete(e.onNode[nodeID], aid) })
}

// checks lists the presence checks (CreateImage without a download URL)
// made so far, as template-less "node/artifact" pairs.
func (e *env) checks() []string {
	var out []string
	for _, c := range e.agent.CreateImageCalls() {
		if c.Art.DownloadURL == "" {
			out = append(out, c.Node.ID+"/"+c.Art.ArtifactID)
		}
	}
	return out
}

// TestReplicaGoneFromItsNodeIsRestoredBySweep: a READY replica whose
// artifact disappeared from its node is marked FAILED by the sweep's
// replica check and converged back in the same pass.
func TestReplicaGoneFromItsNodeIsRestoredBySweep(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-rc", fpA)
	aid := aidOf(fpA)
	e.lose("node-2", aid)
	copies := e.copies()

	e.svc.SweepOnce(e.ctx)
	e.wait()
	reps := e.replicas("tpl-rc")
	if r := reps["node-2"]; r == nil || r.Status != core.ReplicaReady {
		t.Fatalf("node-2 after one sweep: %+v, want READY again", r)
	}
	e.mu.Lock()
	back := e.onNode["node-2"][aid]
	e.mu.Unlock()
	if !back {
		t.Fatal("node-2 did not get the artifact again")
	}
	eq(t, "copies made by the sweep", e.copies()-copies, 1)
	eq(t, "node-1", reps["node-1"].Status, core.ReplicaReady)
	eq(t, "template", e.def("tpl-rc").Status, core.TemplateReady)
	latest := mustLatest(t, e, "tpl-rc")
	eqSlice(t, "convergence scope", latest.RedoScope, []string{"node-2"})
}

// TestReplicaCheckMarksOnlyWhatANodeDenies: the check marks a replica
// FAILED only when its node answers that it lacks the artifact; a node that
// cannot answer, and one that holds it, keep their READY rows. The
// definition keeps its status for convergence to settle.
func TestReplicaCheckMarksOnlyWhatANodeDenies(t *testing.T) {
	e := newEnv(t, "node-1", "node-2", "node-3")
	e.ready("tpl-m", fpA)
	aid := aidOf(fpA)
	e.lose("node-2", aid)
	e.lose("node-3", aid)
	e.set(func() { e.createFail["node-3"] = errors.New("rpc error: code = Unavailable") })

	marked, err := e.svc.CheckReplicas(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(marked) != 1 || marked[0].NodeID != "node-2" {
		t.Fatalf("marked %+v, want node-2 only", marked)
	}
	reps := e.replicas("tpl-m")
	r := reps["node-2"]
	eq(t, "node-2 status", r.Status, core.ReplicaFailed)
	eq(t, "node-2 error phase", r.LastErrorPhase, string(core.PhaseDistributing))
	if !strings.Contains(r.ErrorMessage, "no longer holds artifact "+aid) {
		t.Errorf("node-2 error message %q", r.ErrorMessage)
	}
	eq(t, "node-1 status", reps["node-1"].Status, core.ReplicaReady)
	eq(t, "node-3 status (no answer)", reps["node-3"].Status, core.ReplicaReady)
	eq(t, "template", e.def("tpl-m").Status, core.TemplateReady)
	for _, c := range e.agent.CreateImageCalls() {
		if c.Art.DownloadURL == "" && (c.Art.Token != "" || c.Art.SHA256 == "" || c.Art.SizeBytes <= 0) {
			t.Errorf("presence check %+v: want the sha256 and size, and no token", c.Art)
		}
	}
}

// TestReplicaCheckTakesTurns: each pass checks at most
// ReplicaCheckAtOnce replicas, the next pass the following ones, so every
// replica is checked in turn and none twice before all were.
func TestReplicaCheckTakesTurns(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.svc.Config.ReplicaCheckAtOnce = 2
	for i, fp := range []string{fpA, fpB, testFingerprint("sha256:" + strings.Repeat("c3", 32))} {
		e.ready(fmt.Sprintf("tpl-%d", i), fp)
	}
	before := len(e.checks())
	seen := map[string]int{}
	for pass := range 3 {
		if _, err := e.svc.CheckReplicas(e.ctx); err != nil {
			t.Fatal(err)
		}
		got := e.checks()[before:]
		before += len(got)
		if len(got) != 2 {
			t.Fatalf("pass %d checked %v, want 2 replicas", pass+1, got)
		}
		for _, c := range got {
			seen[c]++
		}
	}
	if len(seen) != 6 {
		t.Fatalf("three passes checked %v, want all 6 replicas once", seen)
	}
	if _, err := e.svc.CheckReplicas(e.ctx); err != nil {
		t.Fatal(err)
	}
	if again := e.checks()[before:]; len(again) != 2 || seen[again[0]] != 1 {
		t.Fatalf("the fourth pass checked %v, want the first ones again", again)
	}
}

// TestReplicaCheckLeavesTemplatesAtWork: a template whose lock is held (a
// redo or delete at work) or whose node is down is left alone, and a
// disabled check asks nothing.
func TestReplicaCheckLeavesTemplatesAtWork(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-w", fpA)
	e.lose("node-1", aidOf(fpA))
	e.lose("node-2", aidOf(fpA))
	lock, err := e.locker.TryLock(e.ctx, "tc_template_tpl-w")
	if err != nil {
		t.Fatal(err)
	}
	e.setHealthy("node-1")
	marked, err := e.svc.CheckReplicas(e.ctx)
	if err != nil || len(marked) != 0 {
		t.Fatalf("marked %+v, %v while the template is locked", marked, err)
	}
	eqSlice(t, "nodes checked", e.checks(), []string{"node-1/" + aidOf(fpA)})
	if err := lock.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	if marked, err := e.svc.CheckReplicas(e.ctx); err != nil || len(marked) != 1 {
		t.Fatalf("after the lock: marked %+v, %v, want node-1", marked, err)
	}

	off := newEnv(t, "node-1")
	off.svc.Config.ReplicaCheckDisabled = true
	off.ready("tpl-off", fpA)
	off.lose("node-1", aidOf(fpA))
	if marked, err := off.svc.CheckReplicas(off.ctx); err != nil || len(marked) != 0 || len(off.checks()) != 0 {
		t.Fatalf("a disabled check asked %v and marked %+v, %v", off.checks(), marked, err)
	}
}
