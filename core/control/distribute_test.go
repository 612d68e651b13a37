package control_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestLostCreateImageAnswerLeavesNoUntrackedCopy: node-2 stores the
// artifact but its answer is lost (a timeout). The copy must still be on
// record, so deleting the template destroys it (before, the placement was
// written only after a successful answer and the copy leaked).
func TestLostCreateImageAnswerLeavesNoUntrackedCopy(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	aid := aidOf(fpA)
	create := e.agent.CreateImageFunc
	e.agent.CreateImageFunc = func(ctx context.Context, n ports.Node, art core.NodeArtifact) error {
		err := create(ctx, n, art) // the node stores the bytes...
		if n.ID == "node-2" {
			return errors.New("rpc error: context deadline exceeded") // ...and the answer is lost
		}
		return err
	}
	job := e.ready("tpl-lost", fpA)
	eq(t, "template status", job.TemplateStatus, string(core.TemplatePartiallyReady))
	eqSlice(t, "placements", e.placementNodes(aid), []string{"node-1", "node-2"})

	if err := e.svc.Delete(e.ctx, "tpl-lost", ""); err != nil {
		t.Fatal(err)
	}
	eqSlice(t, "DestroyImage nodes", e.destroyNodes(), []string{"node-1", "node-2"})
	for _, n := range []string{"node-1", "node-2"} {
		if e.onNode[n][aid] {
			t.Errorf("%s still holds the artifact", n)
		}
	}
}

// TestDefaultWorkersCopyToEightNodesAtOnce: with the default settings a
// template goes to eight nodes in one wave. Upstream's four workers sent
// it in two, so the fleet waited for two node downloads one after the
// other; here every CreateImage waits until all eight are in flight.
func TestDefaultWorkersCopyToEightNodesAtOnce(t *testing.T) {
	ids := []string{"node-1", "node-2", "node-3", "node-4", "node-5", "node-6", "node-7", "node-8"}
	e := newEnv(t, ids...)
	e.svc.Config.DistributionWorkers = 0 // the default
	var mu sync.Mutex
	inFlight, most := 0, 0
	all := make(chan struct{})
	create := e.agent.CreateImageFunc
	e.agent.CreateImageFunc = func(ctx context.Context, n ports.Node, art core.NodeArtifact) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == len(ids) {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return create(ctx, n, art)
	}
	job := e.ready("tpl-wave", fpA)
	eq(t, "template status", job.TemplateStatus, string(core.TemplateReady))
	if most != len(ids) {
		t.Fatalf("at most %d CreateImage calls in flight, want all %d at once", most, len(ids))
	}
}
