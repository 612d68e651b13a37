package control

import (
	"reflect"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// TestHoldings: a node's bytes are its distinct artifacts', leaving with
// the last copy that uses one; what one more copy costs, and the usage
// once some copies go, follow the same rule.
func TestHoldings(t *testing.T) {
	h := newHoldings()
	h.size["art-1"], h.size["art-2"] = 100, 10
	h.add("n1", "art-1") // tpl-a
	h.add("n1", "art-1") // tpl-b, same spec
	h.add("n1", "art-2") // tpl-c
	h.add("n1", "")      // a copy whose artifact is unknown
	type step struct {
		name      string
		got, want any
	}
	steps := []step{
		{"usage", h.usage("n1"), core.NodeUsage{Templates: 4, Bytes: 110}},
		{"unknown node", h.usage("n9"), core.NodeUsage{}},
		{"cost of a held artifact", h.cost("n1", "art-1"), int64(0)},
		{"cost elsewhere", h.cost("n2", "art-1"), int64(100)},
	}
	ra := &core.Replica{TemplateID: "tpl-a", ArtifactID: "art-1"}
	rb := &core.Replica{TemplateID: "tpl-b", ArtifactID: "art-1"}
	artifactOf := func(r *core.Replica) string { return r.ArtifactID }
	u, cost := h.without("n1", []*core.Replica{ra}, artifactOf, "art-1")
	steps = append(steps, step{"without one of two sharing copies", []any{u, cost}, []any{core.NodeUsage{Templates: 3, Bytes: 110}, int64(0)}})
	u, cost = h.without("n1", []*core.Replica{ra, rb}, artifactOf, "art-1")
	steps = append(steps, step{"without both", []any{u, cost}, []any{core.NodeUsage{Templates: 2, Bytes: 10}, int64(100)}})
	for _, s := range steps {
		if !reflect.DeepEqual(s.got, s.want) {
			t.Errorf("%s: %v, want %v", s.name, s.got, s.want)
		}
	}
	if got := h.usage("n1"); got != (core.NodeUsage{Templates: 4, Bytes: 110}) {
		t.Fatalf("without changed the holdings: %+v", got)
	}
	h.remove("n1", "art-1")
	if got := h.usage("n1"); got != (core.NodeUsage{Templates: 3, Bytes: 110}) {
		t.Fatalf("after removing one sharing copy: %+v", got)
	}
	h.remove("n1", "art-1")
	if got := h.usage("n1"); got != (core.NodeUsage{Templates: 2, Bytes: 10}) {
		t.Fatalf("after removing the last copy of art-1: %+v", got)
	}
}
