package core

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParsePlacementPolicy(t *testing.T) {
	cases := []struct {
		doc       string
		wantField string // "" = valid
		check     func(*PlacementPolicy) bool
	}{
		{doc: ``, check: func(p *PlacementPolicy) bool { return !p.Active() }},
		{doc: `{}`, check: func(p *PlacementPolicy) bool { return !p.Active() }},
		{doc: `{"per_node_max_bytes": 1024, "per_template_min_redo_interval": "10m"}`, check: func(p *PlacementPolicy) bool {
			return p.Budgeted() && time.Duration(p.PerTemplateMinRedoInterval) == 10*time.Minute
		}},
		{doc: `{"per_template_min_redo_interval": 90}`, check: func(p *PlacementPolicy) bool {
			return time.Duration(p.PerTemplateMinRedoInterval) == 90*time.Second && !p.Active()
		}},
		{doc: `{"pinned_templates": [{"template_id": " b ", "min_replicas": 1, "priority": 1}, {"template_id": "a", "min_replicas": 2, "priority": 5}, {"template_id": "c", "priority": 5}]}`,
			check: func(p *PlacementPolicy) bool {
				pins := p.Pins()
				return p.Active() && !p.Budgeted() && pins[0].TemplateID == "a" && pins[1].TemplateID == "c" && pins[2].TemplateID == "b"
			}},
		{doc: `{"per_node_max_templates": -1}`, wantField: "per_node_max_templates"},
		{doc: `{"per_node_max_bytes": -5}`, wantField: "per_node_max_bytes"},
		{doc: `{"per_template_min_redo_interval": "soon"}`, wantField: "placement_policy"},
		{doc: `{"per_template_min_redo_interval": "-1m"}`, wantField: "per_template_min_redo_interval"},
		{doc: `{"pinned_templates": [{"template_id": ""}]}`, wantField: "pinned_templates[0].template_id"},
		{doc: `{"pinned_templates": [{"template_id": "a"}, {"template_id": "a"}]}`, wantField: "pinned_templates[1].template_id"},
		{doc: `{"pinned_templates": [{"template_id": "a", "min_replicas": -1}]}`, wantField: "pinned_templates[0].min_replicas"},
		{doc: `{"pinned_templates": [{"template_id": "a", "min_replicas": 3, "max_replicas": 2}]}`, wantField: "pinned_templates[0].max_replicas"},
		{doc: `{"pinned_templates": [{"template_id": "a", "nodes": [""]}]}`, wantField: "pinned_templates[0].nodes"},
		{doc: `{"pinned_templates": [{"template_id": "a", "node_selector": {"": "x"}}]}`, wantField: "pinned_templates[0].node_selector"},
		{doc: `{"node_labels": {"n1": {"zone": "a b"}}}`, wantField: "node_labels.n1"},
		{doc: `{"pinned_tempaltes": []}`, wantField: "placement_policy"},
		{doc: `[1]`, wantField: "placement_policy"},
	}
	for _, tc := range cases {
		p, err := ParsePlacementPolicy([]byte(tc.doc))
		if tc.wantField == "" {
			if err != nil || !tc.check(p) {
				t.Errorf("%s: %+v, %v", tc.doc, p, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.wantField || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v; want a field error naming %s", tc.doc, err, tc.wantField)
		}
	}
}

func TestPlacementPolicyMatchesAndFits(t *testing.T) {
	p := &PlacementPolicy{PerNodeMaxTemplates: 2, PerNodeMaxBytes: 100,
		NodeLabels: map[string]map[string]string{"n1": {"zone": "a", "gpu": "yes"}, "n2": {"zone": "b"}}}
	pin := &PinnedTemplate{TemplateID: "t", NodeSelector: map[string]string{"zone": "a"}}
	byName := &PinnedTemplate{TemplateID: "t", Nodes: []string{"10.0.0.2"}}
	cases := []struct {
		name string
		got  bool
		want bool
	}{
		{"label match", p.Matches(pin, "n1", "10.0.0.1"), true},
		{"label mismatch", p.Matches(pin, "n2", "10.0.0.2"), false},
		{"unlabelled node", p.Matches(pin, "n3", ""), false},
		{"by ip", p.Matches(byName, "n2", "10.0.0.2"), true},
		{"by ip, other node", p.Matches(byName, "n1", "10.0.0.1"), false},
		{"fits", p.Fits(NodeUsage{Templates: 1, Bytes: 50}, 50), true},
		{"too many templates", p.Fits(NodeUsage{Templates: 2}, 1), false},
		{"too many bytes", p.Fits(NodeUsage{Templates: 0, Bytes: 60}, 41), false},
		{"over", p.Over(NodeUsage{Templates: 3}), true},
		{"at limit is not over", p.Over(NodeUsage{Templates: 2, Bytes: 100}), false},
		{"pin by alias", p2().PinOf("tpl-1", "web") != nil, true},
		{"no pin", p2().PinOf("tpl-2", "") != nil, false},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if !strings.Contains(string(must(PolicyDuration(time.Minute).MarshalJSON())), "1m0s") {
		t.Error("duration marshals as a Go duration string")
	}
}

func p2() *PlacementPolicy {
	return &PlacementPolicy{PinnedTemplates: []PinnedTemplate{{TemplateID: "web"}}}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
