package control_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// TestNodesConvergeOnTheirOwn: node-2 and node-3 are down when the
// template is distributed: the job counts them and their replicas say they
// were down (not skipped silently). node-2 comes back and gets the
// template from the next sweep without a redo call; node-3 comes back
// later and gets it too.
func TestNodesConvergeOnTheirOwn(t *testing.T) {
	e := newEnv(t, "node-1", "node-2", "node-3")
	e.setHealthy("node-1")
	job := e.ready("tpl-conv", fpA)
	eq(t, "first", job.Status, core.JobReady)
	eq(t, "template at first", job.TemplateStatus, string(core.TemplatePartiallyReady))
	eq(t, "expected nodes", job.ExpectedNodeCount, 3)
	eq(t, "failed nodes", job.FailedNodeCount, 2)
	first := e.replicas("tpl-conv")
	eq(t, "replicas at first", len(first), 3)
	for _, id := range []string{"node-2", "node-3"} {
		if r := first[id]; r.Status != core.ReplicaFailed || !strings.Contains(r.ErrorMessage, "not healthy") {
			t.Errorf("%s, down during the build: %s %q; want FAILED saying it was not healthy", id, r.Status, r.ErrorMessage)
		}
	}

	e.setHealthy("node-1", "node-2")
	e.svc.SweepOnce(e.ctx)
	e.wait()
	reps := e.replicas("tpl-conv")
	if r := reps["node-2"]; r == nil || r.Status != core.ReplicaReady {
		t.Fatalf("node-2 after it came back: %+v", r)
	}
	latest := mustLatest(t, e, "tpl-conv")
	eq(t, "convergence job", latest.Operation, core.OpRedo)
	if !strings.HasPrefix(latest.RequestID, "converge-") {
		t.Errorf("convergence job request id %q", latest.RequestID)
	}
	eqSlice(t, "convergence scope", latest.RedoScope, []string{"node-2"})

	// A pass with nothing to do starts nothing.
	before := e.copies()
	started, err := e.svc.Converge(e.ctx)
	if err != nil || len(started) != 0 {
		t.Fatalf("idle pass started %d jobs, %v", len(started), err)
	}

	e.setHealthy("node-1", "node-2", "node-3") // back later
	e.svc.SweepOnce(e.ctx)
	e.wait()
	if r := e.replicas("tpl-conv")["node-3"]; r == nil || r.Status != core.ReplicaReady {
		t.Fatalf("node-3 after it joined: %+v", r)
	}
	eq(t, "def status", e.def("tpl-conv").Status, core.TemplateReady)
	eq(t, "node-1 untouched", e.copies()-before, 1)
}

// TestConvergenceRespectsScopeAndBacksOff: a template scoped to node-1 never
// goes to node-2; a node that keeps failing is retried only after the
// backoff.
func TestConvergenceRespectsScopeAndBacksOff(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	req := request("tpl-scoped")
	req.DistributionScope = []string{"node-1"}
	job := e.create(req)
	e.build(job.JobID, fpA)
	e.wait()
	started, err := e.svc.Converge(e.ctx)
	if err != nil || len(started) != 0 {
		t.Fatalf("converged a scoped template: %d, %v", len(started), err)
	}

	e2 := newEnv(t, "node-1", "node-2")
	e2.setHealthy("node-1")
	e2.ready("tpl-flaky", fpB)
	e2.setHealthy("node-1", "node-2")
	e2.createFail["node-2"] = errors.New("disk full")
	started, err = e2.svc.Converge(e2.ctx)
	if err != nil || len(started) != 1 {
		t.Fatalf("first pass: %d, %v", len(started), err)
	}
	e2.wait()
	if started, _ := e2.svc.Converge(e2.ctx); len(started) != 0 {
		t.Fatal("a failing node was retried at once")
	}
	e2.clock.Advance(11 * time.Minute)
	if started, _ := e2.svc.Converge(e2.ctx); len(started) != 1 {
		t.Fatal("a failing node was not retried after the backoff")
	}
}

// TestConvergenceBacksOffANodeThatStaysUnready: node-2 comes back but its
// convergence keeps failing, whether the copy fails (the redo job FAILS) or
// only the snapshot does (the job ends READY, the template PARTIALLY_READY).
// Either way it is retried only after the backoff; before, a snapshot
// failure started a new redo on every sweep.
func TestConvergenceBacksOffANodeThatStaysUnready(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(e *env)
	}{
		{"copy fails", func(e *env) { e.createFail["node-2"] = errors.New("disk full") }},
		{"snapshot fails", func(e *env) { e.snapFail["node-2"] = errors.New("snapshot broke") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1", "node-2")
			e.setHealthy("node-1")
			e.ready("tpl-flaky", fpB)
			e.setHealthy("node-1", "node-2")
			e.set(func() { tc.fail(e) })
			if started, err := e.svc.Converge(e.ctx); err != nil || len(started) != 1 {
				t.Fatalf("first pass: %d, %v", len(started), err)
			}
			e.wait()
			for i := range 3 {
				e.clock.Advance(time.Minute)
				if started, err := e.svc.Converge(e.ctx); err != nil || len(started) != 0 {
					t.Fatalf("pass %d within the backoff started %d jobs, %v", i+2, len(started), err)
				}
				e.wait()
			}
			e.clock.Advance(10 * time.Minute)
			if started, _ := e.svc.Converge(e.ctx); len(started) != 1 {
				t.Fatal("a failing node was not retried after the backoff")
			}
			e.wait()
			jobs, err := e.store.Jobs().ListByTemplate(e.ctx, "tpl-flaky")
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "jobs (create and two convergence attempts)", len(jobs), 3)
		})
	}
}
