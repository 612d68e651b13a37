package core

import (
	"slices"
	"testing"
)

func TestEvaluate(t *testing.T) {
	full := &ReleaseManifest{Components: map[string]string{
		ComponentGuestImage: "g1", ComponentAgent: "a1", ComponentKernel: "k1", ComponentShim: "s1",
	}}
	rec := func(g, a, k, s string) *Replica {
		return &Replica{NodeID: "n1", GuestImageVersion: g, AgentVersion: a, KernelVersion: k, ShimVersion: s}
	}
	cases := []struct {
		name    string
		m       *ReleaseManifest
		r       *Replica
		want    CompatStatus
		reasons int
	}{
		{"no manifest", nil, rec("g1", "a1", "k1", "s1"), CompatUnknown, 0},
		{"nothing recorded", full, rec("", "", "", ""), CompatUnknown, 0},
		{"all equal", full, rec("g1", "a1", "k1", "s1"), CompatCompatible, 0},
		{"partial record, equal", full, rec("g1", "", "k1", ""), CompatCompatible, 0},
		{"kernel differs", full, rec("g1", "a1", "k2", "s1"), CompatIncompatible, 1},
		{"two differ", full, rec("g2", "a2", "k1", ""), CompatIncompatible, 2},
		{"manifest silent on recorded", &ReleaseManifest{Components: map[string]string{ComponentShim: "s1"}}, rec("g1", "a1", "k1", ""), CompatUnknown, 0},
		{"empty manifest", &ReleaseManifest{}, rec("g1", "", "", ""), CompatUnknown, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, reasons := Evaluate(c.m, c.r)
			if got != c.want || len(reasons) != c.reasons {
				t.Fatalf("Evaluate = %s %q, want %s with %d reasons", got, reasons, c.want, c.reasons)
			}
		})
	}
}

func TestSummarizeCompat(t *testing.T) {
	cases := []struct {
		in   []CompatStatus
		want CompatStatus
	}{
		{nil, CompatUnknown},
		{[]CompatStatus{CompatCompatible, CompatCompatible}, CompatCompatible},
		{[]CompatStatus{CompatCompatible, CompatUnknown}, CompatUnknown},
		{[]CompatStatus{CompatCompatible, ""}, CompatUnknown},
		{[]CompatStatus{CompatUnknown, CompatIncompatible}, CompatIncompatible},
	}
	for _, c := range cases {
		if got := SummarizeCompat(c.in); got != c.want {
			t.Errorf("SummarizeCompat(%v) = %s, want %s", c.in, got, c.want)
		}
	}
	if !slices.Equal(ComponentNames, []string{"guest_image", "agent", "kernel", "shim"}) {
		t.Fatalf("ComponentNames = %v", ComponentNames)
	}
}
