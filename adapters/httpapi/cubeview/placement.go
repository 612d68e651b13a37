package cubeview

import (
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// PlacementPolicy is the data of GET and PUT /cube/placement/policy: the
// policy in force and where it came from ("api", "file" or "default").
type PlacementPolicy struct {
	Policy *core.PlacementPolicy `json:"policy"`
	Source string                `json:"source"`
	// SetAt is when the API set it (RFC 3339), empty otherwise.
	SetAt string `json:"set_at,omitempty"`
}

// NewPlacementPolicy is the view of a policy.
func NewPlacementPolicy(p *core.PlacementPolicy, source string, setAt time.Time) PlacementPolicy {
	v := PlacementPolicy{Policy: p, Source: source}
	if !setAt.IsZero() {
		v.SetAt = setAt.UTC().Format(time.RFC3339)
	}
	return v
}

// PlacementDecisions is the data of GET
// /cube/template/{template_id}/placement: the placement controller's
// recent decisions about the template, newest first.
type PlacementDecisions struct {
	TemplateID string                   `json:"template_id"`
	Decisions  []core.PlacementDecision `json:"decisions"`
}
