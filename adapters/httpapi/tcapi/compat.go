package tcapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
)

// Compat produces the compat report: each template's recorded component
// versions checked against the release manifest, if one is installed. A
// missing manifest is not an error (it ships only with the one-click bundle;
// seed §8): the report says so and statuses are UNKNOWN.
type Compat interface {
	// Report returns the last scan.
	Report(ctx context.Context) (*CompatReport, error)
	// Rescan re-reads the manifest and the recorded versions.
	Rescan(ctx context.Context) (*CompatReport, error)
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
	s.compat(w, r, "", func(c Compat) (*CompatReport, error) { return c.Report(r.Context()) })
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
	s.compat(w, r, body.RequestID, func(c Compat) (*CompatReport, error) { return c.Rescan(r.Context()) })
}

func (s *server) compat(w http.ResponseWriter, r *http.Request, requestID string, run func(Compat) (*CompatReport, error)) {
	if s.cfg.Compat == nil {
		envelope.WriteError(w, r, s.log, requestID, errCompatOff)
		return
	}
	rep, err := run(s.cfg.Compat)
	if err != nil {
		envelope.WriteError(w, r, s.log, requestID, err)
		return
	}
	envelope.Write(w, compatResponse{Response: envelope.OK(requestID), Data: rep})
}
