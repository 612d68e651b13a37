package tcapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/core"
)

// Compat produces the compat report: each template's recorded component
// versions checked against the release manifest, if one is installed. A
// missing manifest is not an error (it ships only with the one-click bundle;
// seed §8): the report says so and statuses are UNKNOWN.
type Compat interface {
	// Report returns the last scan.
	Report(ctx context.Context) (*core.CompatReport, error)
	// Rescan re-reads the manifest and the recorded versions.
	Rescan(ctx context.Context) (*core.CompatReport, error)
}

// Compat statuses.
const (
	CompatCompatible   = "COMPATIBLE"
	CompatIncompatible = "INCOMPATIBLE"
	CompatUnknown      = "UNKNOWN"
)

// CompatReport is the data of GET|POST /cube/template/compat.
type CompatReport struct {
	// ManifestPath is where the manifest was looked for; ManifestFound says
	// whether it was there.
	ManifestPath  string `json:"manifest_path,omitempty"`
	ManifestFound bool   `json:"manifest_found"`
	// Declared are the component versions the manifest declares.
	Declared  map[string]string `json:"declared_components,omitempty"`
	CheckedAt time.Time         `json:"checked_at,omitzero"`
	Templates []TemplateCompat  `json:"templates"`
}

// TemplateCompat is one template's entry. Components are set when every
// replica recorded the same versions; Replicas always has the detail.
type TemplateCompat struct {
	TemplateID string            `json:"template_id"`
	Components map[string]string `json:"components,omitempty"`
	Status     string            `json:"compat_status"`
	Reasons    []string          `json:"reasons,omitempty"`
	Replicas   []ReplicaCompat   `json:"replicas,omitempty"`
}

// ReplicaCompat is one node's copy of a template: the versions the node
// recorded and the last verdict on them.
type ReplicaCompat struct {
	NodeID     string            `json:"node_id"`
	Components map[string]string `json:"components,omitempty"`
	Status     string            `json:"compat_status"`
	CheckedAt  time.Time         `json:"checked_at,omitzero"`
}

type compatResponse struct {
	envelope.Response
	Data *CompatReport `json:"data,omitempty"`
}

var errCompatOff = errors.New("compat scanning is not configured on this template center")

func (s *server) compatReport(w http.ResponseWriter, r *http.Request) {
	s.compat(w, r, "", func(c Compat) (*core.CompatReport, error) { return c.Report(r.Context()) })
}

// compatRescan takes an optional {"requestID"} body.
func (s *server) compatRescan(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RequestID string `json:"requestID"`
	}
	if r.ContentLength != 0 {
		if err := envelope.Decode(w, r, s.cfg.MaxBodyBytes, &body); err != nil {
			envelope.WriteError(w, r, s.log, "", err)
			return
		}
	}
	s.compat(w, r, body.RequestID, func(c Compat) (*core.CompatReport, error) { return c.Rescan(r.Context()) })
}

func (s *server) compat(w http.ResponseWriter, r *http.Request, requestID string, run func(Compat) (*core.CompatReport, error)) {
	if s.cfg.Compat == nil {
		envelope.WriteError(w, r, s.log, requestID, errCompatOff)
		return
	}
	rep, err := run(s.cfg.Compat)
	if err != nil {
		envelope.WriteError(w, r, s.log, requestID, err)
		return
	}
	envelope.Write(w, compatResponse{Response: envelope.OK(requestID), Data: compatView(rep)})
}

// compatView is the wire form of a compat report.
func compatView(r *core.CompatReport) *CompatReport {
	out := &CompatReport{ManifestPath: r.ManifestSource, ManifestFound: r.ManifestFound, Declared: r.Declared,
		CheckedAt: r.CheckedAt, Templates: make([]TemplateCompat, 0, len(r.Templates))}
	for _, t := range r.Templates {
		tc := TemplateCompat{TemplateID: t.TemplateID, Components: t.Components, Status: string(t.Status), Reasons: t.Reasons}
		for _, rc := range t.Replicas {
			tc.Replicas = append(tc.Replicas, ReplicaCompat{NodeID: rc.NodeID, Components: rc.Components, Status: string(rc.Status), CheckedAt: rc.CheckedAt})
		}
		out.Templates = append(out.Templates, tc)
	}
	return out
}
