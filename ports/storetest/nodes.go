package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

var nodeTests = []test{
	{"Node/UpsertListDelete", testNodes},
	{"Node/UpsertKeepsCreatedAt", testNodeUpsertKeepsCreatedAt},
	{"Node/UpsertRejectsEmptyID", testNodeUpsertRejectsEmptyID},
	{"Node/TxRollback", testNodeTxRollback},
}

// sameNode compares everything but the timestamps, which the store sets.
func sameNode(t *testing.T, what string, want, got ports.NodeRecord) {
	t.Helper()
	got.CreatedAt, got.UpdatedAt = want.CreatedAt, want.UpdatedAt
	if got != want {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testNodes(t *testing.T, e *env) {
	nr := e.s.Nodes()
	if ns, err := nr.List(e.ctx); err != nil || len(ns) != 0 {
		t.Fatalf("empty table: %v, %v", ns, err)
	}
	b := ports.NodeRecord{NodeID: "node-b", NodeIP: "10.0.0.2", GRPCAddr: "10.0.0.2:7001", InstanceType: "cubebox"}
	a := ports.NodeRecord{NodeID: "node-a", NodeIP: "10.0.0.1", GRPCAddr: "10.0.0.1:7001", InstanceType: "cubebox", Disabled: true}
	// Node ids compare byte for byte, as aliases do.
	upper := ports.NodeRecord{NodeID: "Node-a", GRPCAddr: "h:1"}
	for _, n := range []ports.NodeRecord{b, a, upper} {
		must(t, nr.Upsert(e.ctx, n), "upsert "+n.NodeID)
	}
	ns, err := nr.List(e.ctx)
	must(t, err, "list")
	if len(ns) != 3 {
		t.Fatalf("list: %+v, want 3 rows", ns)
	}
	// Ordered by node id, byte order.
	sameNode(t, "first", upper, ns[0])
	sameNode(t, "second", a, ns[1])
	sameNode(t, "third", b, ns[2])
	for _, n := range ns {
		if n.CreatedAt.IsZero() || n.UpdatedAt.IsZero() {
			t.Fatalf("timestamps not set: %+v", n)
		}
	}

	// Upsert of an existing id overwrites every field, disabled included.
	a2 := ports.NodeRecord{NodeID: "node-a", NodeIP: "10.0.0.9", GRPCAddr: "10.0.0.9:7002", InstanceType: "other"}
	must(t, nr.Upsert(e.ctx, a2), "re-upsert node-a")
	ns, err = nr.List(e.ctx)
	must(t, err, "list after re-upsert")
	if len(ns) != 3 {
		t.Fatalf("re-upsert added a row: %+v", ns)
	}
	sameNode(t, "re-upserted", a2, ns[1])

	must(t, nr.Delete(e.ctx, "node-a"), "delete node-a")
	must(t, nr.Delete(e.ctx, "node-a"), "delete missing node-a")
	must(t, nr.Delete(e.ctx, "never-there"), "delete unknown")
	ns, err = nr.List(e.ctx)
	must(t, err, "list after delete")
	if len(ns) != 2 || ns[0].NodeID != "Node-a" || ns[1].NodeID != "node-b" {
		t.Fatalf("after delete: %+v", ns)
	}
}

func testNodeUpsertKeepsCreatedAt(t *testing.T, e *env) {
	nr := e.s.Nodes()
	must(t, nr.Upsert(e.ctx, ports.NodeRecord{NodeID: "n1", GRPCAddr: "h:1"}), "upsert")
	ns, err := nr.List(e.ctx)
	must(t, err, "list")
	first := ns[0]
	waitPast(first.UpdatedAt)
	must(t, nr.Upsert(e.ctx, ports.NodeRecord{NodeID: "n1", GRPCAddr: "h:2"}), "re-upsert")
	ns, err = nr.List(e.ctx)
	must(t, err, "list again")
	got := ns[0]
	if !got.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("created_at moved: %v -> %v", first.CreatedAt, got.CreatedAt)
	}
	if !got.UpdatedAt.After(first.UpdatedAt) || got.GRPCAddr != "h:2" {
		t.Fatalf("re-upsert not written: %+v (before %+v)", got, first)
	}
}

func testNodeUpsertRejectsEmptyID(t *testing.T, e *env) {
	err := e.s.Nodes().Upsert(e.ctx, ports.NodeRecord{GRPCAddr: "h:1"})
	mustErrIs(t, err, core.ErrInvalidArgument, "upsert without node id")
	if ns, err := e.s.Nodes().List(e.ctx); err != nil || len(ns) != 0 {
		t.Fatalf("rejected upsert wrote %v (%v)", ns, err)
	}
}

func testNodeTxRollback(t *testing.T, e *env) {
	boom := errors.New("boom")
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		if err := r.Nodes().Upsert(ctx, ports.NodeRecord{NodeID: "n-tx", GRPCAddr: "h:1"}); err != nil {
			return err
		}
		if ns, err := r.Nodes().List(ctx); err != nil || len(ns) != 1 {
			t.Errorf("inside the tx: %v, %v", ns, err)
		}
		return boom
	})
	mustErrIs(t, err, boom, "tx")
	if ns, err := e.s.Nodes().List(e.ctx); err != nil || len(ns) != 0 {
		t.Fatalf("rolled back upsert is visible: %v (%v)", ns, err)
	}
}
