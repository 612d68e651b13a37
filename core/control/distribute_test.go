package control_test

import (
	"context"
	"errors"
	"testing"

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
