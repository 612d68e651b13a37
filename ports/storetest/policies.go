package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

var policyTests = []test{
	{"Policy/SetReadClear", testPolicySetReadClear},
	{"Policy/DecisionsNewestFirstAndBounded", testPolicyDecisions},
	{"Policy/DecisionRejectsEmpty", testPolicyDecisionRejectsEmpty},
	{"Policy/DecisionLongMessageCut", testPolicyDecisionLongMessage},
}

func testPolicySetReadClear(t *testing.T, e *env) {
	pr := e.s.Policies()
	if _, _, err := pr.Policy(e.ctx); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("no policy yet: got %v, want ErrNotFound", err)
	}
	for _, doc := range []string{`{"per_node_max_templates":3}`, `{"per_node_max_bytes":10}`} {
		must(t, pr.SetPolicy(e.ctx, doc), "set policy")
		got, at, err := pr.Policy(e.ctx)
		if err != nil || got != doc || at.IsZero() {
			t.Fatalf("policy: got %q at %v, %v; want %q", got, at, err, doc)
		}
	}
	must(t, pr.SetPolicy(e.ctx, ""), "clear policy")
	if _, _, err := pr.Policy(e.ctx); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("cleared policy: got %v, want ErrNotFound", err)
	}
}

func testPolicyDecisions(t *testing.T, e *env) {
	pr := e.s.Policies()
	for i := range 5 {
		d := core.PlacementDecision{TemplateID: "tpl-a", NodeID: fmt.Sprintf("n%d", i), Decision: core.DecisionAdd,
			Reason: core.ReasonBelowMin, Message: "m", JobID: "job", Master: "m1"}
		must(t, pr.AddDecision(e.ctx, d, 3), "add decision")
	}
	must(t, pr.AddDecision(e.ctx, core.PlacementDecision{TemplateID: "tpl-b", Decision: core.DecisionEvict}, 3), "add other")
	ds, err := pr.Decisions(e.ctx, "tpl-a", 0)
	must(t, err, "decisions")
	var nodes []string
	for _, d := range ds {
		nodes = append(nodes, d.NodeID)
		if d.At.IsZero() || d.Decision != core.DecisionAdd || d.Reason != core.ReasonBelowMin || d.JobID != "job" || d.Master != "m1" {
			t.Fatalf("decision not kept as written: %+v", d)
		}
	}
	if strings.Join(nodes, ",") != "n4,n3,n2" {
		t.Fatalf("decisions of tpl-a: got %v, want the newest three, newest first", nodes)
	}
	if ds, _ := pr.Decisions(e.ctx, "tpl-a", 1); len(ds) != 1 || ds[0].NodeID != "n4" {
		t.Fatalf("limit 1: got %+v", ds)
	}
	if ds, _ := pr.Decisions(e.ctx, "tpl-b", 0); len(ds) != 1 {
		t.Fatalf("another template's decisions are its own: got %+v", ds)
	}
	if ds, err := pr.Decisions(e.ctx, "none", 0); err != nil || len(ds) != 0 {
		t.Fatalf("no decisions: got %+v, %v", ds, err)
	}
}

func testPolicyDecisionRejectsEmpty(t *testing.T, e *env) {
	for _, d := range []core.PlacementDecision{{Decision: core.DecisionAdd}, {TemplateID: "t"}} {
		if err := e.s.Policies().AddDecision(e.ctx, d, 0); !errors.Is(err, core.ErrInvalidArgument) {
			t.Fatalf("AddDecision(%+v): got %v, want ErrInvalidArgument", d, err)
		}
	}
}

func testPolicyDecisionLongMessage(t *testing.T, e *env) {
	long := strings.Repeat("é", core.MaxDecisionMessage)
	must(t, e.s.Policies().AddDecision(e.ctx, core.PlacementDecision{TemplateID: "t", Decision: core.DecisionFailed, Message: long}, 0), "add")
	ds, err := e.s.Policies().Decisions(e.ctx, "t", 0)
	must(t, err, "decisions")
	if len(ds) != 1 || len(ds[0].Message) > core.MaxDecisionMessage || !strings.HasPrefix(long, ds[0].Message) || ds[0].Message == "" {
		t.Fatalf("long message: got %d bytes", len(ds[0].Message))
	}
}
