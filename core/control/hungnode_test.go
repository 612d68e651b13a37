package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// hangOn makes CreateImage on node id block until its context ends (a
// stopped node agent), telling started when it does.
func (e *env) hangOn(id string) (started <-chan struct{}) {
	c := make(chan struct{}, 1)
	next := e.agent.CreateImageFunc
	e.agent.CreateImageFunc = func(ctx context.Context, n ports.Node, art core.NodeArtifact) error {
		if n.ID != id {
			return next(ctx, n, art)
		}
		c <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	return c
}

// TestHungNodeIsCancelledWhenItsProbeFails: a node that stops answering
// during its copy holds the job only until its health probe fails; the job
// then ends, the node's replica saying what happened. Meanwhile the job's
// replica rows name the node the job still waits for.
func TestHungNodeIsCancelledWhenItsProbeFails(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	started := e.hangOn("node-2")
	job := e.create(request("tpl-hung"))
	e.build(job.JobID, fpA)
	<-started
	// node-1's copy ends while node-2's hangs: node-1 DISTRIBUTED, node-2
	// still DISTRIBUTING.
	waitFor(t, "node-1 copied", func() bool {
		r := e.replicas("tpl-hung")["node-1"]
		return r != nil && r.Phase == core.ReplicaPhaseDistributed
	})
	nodes, err := e.svc.JobNodes(e.ctx, e.job(job.JobID))
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for _, r := range nodes {
		phases = append(phases, r.NodeID+"="+string(r.Phase))
	}
	eq(t, "job nodes while node-2 hangs", strings.Join(phases, ","), "node-1=DISTRIBUTED,node-2=DISTRIBUTING")

	e.setHealthy("node-1") // node-2 fails its probe
	e.wait()
	j := e.job(job.JobID)
	eq(t, "job", j.Status, core.JobReady)
	eq(t, "template", j.TemplateStatus, string(core.TemplatePartiallyReady))
	r := e.replicas("tpl-hung")["node-2"]
	if r.Status != core.ReplicaFailed || !strings.Contains(r.ErrorMessage, "stopped answering its health check") {
		t.Errorf("node-2: %s %q; want FAILED, saying it stopped answering", r.Status, r.ErrorMessage)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReplicaCheckOfAHungNodeEndsWhenItsProbeFails: the sweep's presence
// check of a node that stops answering ends once the node fails its
// health probe, not after the check's own minute, and leaves its replica
// as it was (a node that cannot answer changes nothing).
func TestReplicaCheckOfAHungNodeEndsWhenItsProbeFails(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-hung-check", fpA)
	started := e.hangOn("node-2")
	type result struct {
		marked []*core.Replica
		err    error
	}
	done := make(chan result, 1)
	go func() {
		marked, err := e.svc.CheckReplicas(e.ctx)
		done <- result{marked, err}
	}()
	<-started
	e.setHealthy("node-1") // node-2 fails its probe
	var res result
	waitFor(t, "the replica check to end", func() bool {
		select {
		case res = <-done:
			return true
		default:
			return false
		}
	})
	if res.err != nil || len(res.marked) != 0 {
		t.Fatalf("check: marked %v, err %v; want nothing marked", res.marked, res.err)
	}
	eq(t, "node-2", e.replicas("tpl-hung-check")["node-2"].Status, core.ReplicaReady)
}
