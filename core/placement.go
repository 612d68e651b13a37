package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PlacementPolicy is what the operator says about where templates live
// (the configuration file CUBE_MASTER_PLACEMENT_POLICY_FILE, or the API).
// Its JSON keys are upstream's preheat keys where upstream has them
// (template_preheat: pinned_templates, per_node_max_templates,
// per_node_max_bytes, per_template_min_redo_interval).
//
// The zero policy pins nothing and limits nothing: every template goes to
// every node of its scope, as it always did (Active is false and nothing
// changes). A policy with per-node limits turns nodes into caches: a
// template created with no nodes named goes to the nodes where it fits,
// convergence only restores a template that has no READY replica left,
// and the placement controller evicts the least recently placed
// replicas of unpinned templates from a node over its budget. Pinned
// templates are kept on at least MinReplicas matching nodes.
type PlacementPolicy struct {
	PinnedTemplates []PinnedTemplate `json:"pinned_templates,omitempty"`
	// PerNodeMaxTemplates bounds the READY replicas of one node (0: no limit).
	PerNodeMaxTemplates int `json:"per_node_max_templates,omitempty"`
	// PerNodeMaxBytes bounds the bytes of one node's READY replicas, each
	// counted as its artifact's ext4 size (0: no limit).
	PerNodeMaxBytes int64 `json:"per_node_max_bytes,omitempty"`
	// PerTemplateMinRedoInterval is the least time between two redos the
	// controller starts for one template.
	PerTemplateMinRedoInterval PolicyDuration `json:"per_template_min_redo_interval,omitempty"`
	// NodeLabels gives nodes labels for node selectors: node id → labels.
	NodeLabels map[string]map[string]string `json:"node_labels,omitempty"`
}

// PinnedTemplate keeps a template warm on some nodes.
type PinnedTemplate struct {
	// TemplateID is the template's id or alias.
	TemplateID string `json:"template_id"`
	// Priority orders pins: higher first (ties by template id).
	Priority int `json:"priority,omitempty"`
	// NodeSelector picks nodes by label (PlacementPolicy.NodeLabels): a
	// node matches when it has every key with the same value.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Nodes picks nodes by id or IP; with NodeSelector both must match.
	Nodes []string `json:"nodes,omitempty"`
	// MinReplicas is how many matching nodes keep a READY replica.
	MinReplicas int `json:"min_replicas"`
	// MaxReplicas caps the matching nodes the template is placed on (0: all).
	MaxReplicas int `json:"max_replicas,omitempty"`
}

// PolicyDuration is a duration written as a Go duration string ("10m")
// or a number of seconds.
type PolicyDuration time.Duration

// MarshalJSON writes the Go duration string.
func (d PolicyDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string or a number of seconds.
func (d *PolicyDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 10m or 90s", s)
		}
		*d = PolicyDuration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("%s is not a duration such as \"10m\" or a number of seconds", b)
	}
	*d = PolicyDuration(time.Duration(f * float64(time.Second)))
	return nil
}

// Limits of a policy document.
const (
	MaxPinnedTemplates  = 1024
	MaxPolicyBytes      = 1 << 20
	maxPolicyLabelBytes = 256
)

// ParsePlacementPolicy reads a policy document (JSON; unknown keys are
// refused, so a misspelt key is not silently ignored) and validates it.
// An empty document is the zero policy.
func ParsePlacementPolicy(doc []byte) (*PlacementPolicy, error) {
	p := &PlacementPolicy{}
	if len(bytes.TrimSpace(doc)) == 0 {
		return p, nil
	}
	if len(doc) > MaxPolicyBytes {
		return nil, fieldErr("placement_policy", "%d bytes, at most %d allowed", len(doc), MaxPolicyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return nil, fieldErr("placement_policy", "not a policy document: %v", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate checks the policy; errors are *FieldError naming the field.
func (p *PlacementPolicy) Validate() error {
	if p.PerNodeMaxTemplates < 0 {
		return fieldErr("per_node_max_templates", "%d is negative; 0 means no limit", p.PerNodeMaxTemplates)
	}
	if p.PerNodeMaxBytes < 0 {
		return fieldErr("per_node_max_bytes", "%d is negative; 0 means no limit", p.PerNodeMaxBytes)
	}
	if p.PerTemplateMinRedoInterval < 0 {
		return fieldErr("per_template_min_redo_interval", "%s is negative", time.Duration(p.PerTemplateMinRedoInterval))
	}
	if len(p.PinnedTemplates) > MaxPinnedTemplates {
		return fieldErr("pinned_templates", "%d pins, at most %d allowed", len(p.PinnedTemplates), MaxPinnedTemplates)
	}
	seen := map[string]int{}
	for i := range p.PinnedTemplates {
		pin := &p.PinnedTemplates[i]
		f := func(name string) string { return fmt.Sprintf("pinned_templates[%d].%s", i, name) }
		pin.TemplateID = strings.TrimSpace(pin.TemplateID)
		if pin.TemplateID == "" || len(pin.TemplateID) > MaxScopeEntryLen || hasControlOrSpace(pin.TemplateID) {
			return fieldErr(f("template_id"), "must be a template id or alias (1-%d characters, no whitespace)", MaxScopeEntryLen)
		}
		if j, dup := seen[pin.TemplateID]; dup {
			return fieldErr(f("template_id"), "%q is already pinned by pinned_templates[%d]", pin.TemplateID, j)
		}
		seen[pin.TemplateID] = i
		if pin.MinReplicas < 0 {
			return fieldErr(f("min_replicas"), "%d is negative", pin.MinReplicas)
		}
		if pin.MaxReplicas < 0 {
			return fieldErr(f("max_replicas"), "%d is negative; 0 means no ceiling", pin.MaxReplicas)
		}
		if pin.MaxReplicas > 0 && pin.MaxReplicas < pin.MinReplicas {
			return fieldErr(f("max_replicas"), "%d is below min_replicas %d", pin.MaxReplicas, pin.MinReplicas)
		}
		if err := NormalizeScope(pin.Nodes); err != nil {
			return fieldErr(f("nodes"), "%v", err)
		}
		if err := checkLabels(f("node_selector"), pin.NodeSelector); err != nil {
			return err
		}
	}
	for id, labels := range p.NodeLabels {
		if strings.TrimSpace(id) == "" {
			return fieldErr("node_labels", "a node id is empty")
		}
		if err := checkLabels("node_labels."+id, labels); err != nil {
			return err
		}
	}
	return nil
}

func checkLabels(field string, m map[string]string) error {
	for k, v := range m {
		if k == "" || len(k) > maxPolicyLabelBytes || hasControlOrSpace(k) {
			return fieldErr(field, "label key %q must be 1-%d characters without whitespace", k, maxPolicyLabelBytes)
		}
		if len(v) > maxPolicyLabelBytes || hasControlOrSpace(v) {
			return fieldErr(field, "label %s: value must be at most %d characters without whitespace", k, maxPolicyLabelBytes)
		}
	}
	return nil
}

// Active reports whether the policy changes anything: it pins a template
// or limits nodes. An inactive policy keeps "every template everywhere".
func (p *PlacementPolicy) Active() bool {
	return p != nil && (len(p.PinnedTemplates) > 0 || p.Budgeted())
}

// Budgeted reports whether nodes have a limit.
func (p *PlacementPolicy) Budgeted() bool {
	return p != nil && (p.PerNodeMaxTemplates > 0 || p.PerNodeMaxBytes > 0)
}

// Pins returns the pins by priority, highest first, ties by template id.
func (p *PlacementPolicy) Pins() []PinnedTemplate {
	if p == nil {
		return nil
	}
	out := slices.Clone(p.PinnedTemplates)
	slices.SortStableFunc(out, func(a, b PinnedTemplate) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return strings.Compare(a.TemplateID, b.TemplateID)
	})
	return out
}

// PinOf returns the pin naming the template by id or alias, or nil.
func (p *PlacementPolicy) PinOf(templateID, alias string) *PinnedTemplate {
	if p == nil {
		return nil
	}
	for i := range p.PinnedTemplates {
		pin := &p.PinnedTemplates[i]
		if pin.TemplateID == templateID || (alias != "" && pin.TemplateID == alias) {
			return pin
		}
	}
	return nil
}

// Matches reports whether the pin's selector takes the node with this id
// and IP: its Nodes name it (when set) and it carries every selector label.
func (p *PlacementPolicy) Matches(pin *PinnedTemplate, id, ip string) bool {
	if len(pin.Nodes) > 0 && !NodeScope(pin.Nodes).Includes(id, ip) {
		return false
	}
	labels := p.NodeLabels[id]
	for k, v := range pin.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// NodeUsage is what a node holds: READY replicas and their bytes.
type NodeUsage struct {
	Templates int
	Bytes     int64
}

// Fits reports whether one more template of size bytes stays within the
// node's limits.
func (p *PlacementPolicy) Fits(u NodeUsage, size int64) bool {
	if p.PerNodeMaxTemplates > 0 && u.Templates+1 > p.PerNodeMaxTemplates {
		return false
	}
	return p.PerNodeMaxBytes <= 0 || u.Bytes+size <= p.PerNodeMaxBytes
}

// Over reports whether the node is beyond its limits.
func (p *PlacementPolicy) Over(u NodeUsage) bool {
	return (p.PerNodeMaxTemplates > 0 && u.Templates > p.PerNodeMaxTemplates) ||
		(p.PerNodeMaxBytes > 0 && u.Bytes > p.PerNodeMaxBytes)
}

// Placement decisions (the decision label of the metric and the record).
const (
	DecisionAdd     = "add"
	DecisionEvict   = "evict"
	DecisionSkipped = "skipped"
	DecisionFailed  = "failed"
)

// Placement decision reasons.
const (
	ReasonBelowMin         = "below_min_replicas"
	ReasonOverBudget       = "node_over_budget"
	ReasonMakeRoom         = "make_room_for_pin"
	ReasonMinMet           = "min_replicas_met"
	ReasonCooldown         = "cooldown"
	ReasonActiveJob        = "active_job"
	ReasonNoCandidates     = "no_candidates"
	ReasonTemplateNotFound = "template_not_found"
	ReasonLastReady        = "last_ready_replica"
	ReasonRateLimited      = "rate_limited"
	ReasonSubmitError      = "submit_error"
	ReasonEvictError       = "evict_error"
	ReasonNotReady         = "template_not_ready"
)

// PlacementDecision is one decision of the placement controller, kept
// (bounded per template) so every master can show it.
type PlacementDecision struct {
	TemplateID string `json:"template_id"`
	NodeID     string `json:"node_id,omitempty"`
	Decision   string `json:"decision"`
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
	// JobID is the redo an add started.
	JobID string `json:"job_id,omitempty"`
	// Master names the master that decided.
	Master string    `json:"master,omitempty"`
	At     time.Time `json:"at"`
}

// Column widths of a stored decision.
const (
	MaxDecisionMessage = 1024
	MaxDecisionField   = 128
)
