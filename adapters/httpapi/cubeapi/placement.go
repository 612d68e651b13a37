package cubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// Placement reads and replaces the placement policy and reads the
// controller's decisions (implemented by *control.Service).
type Placement interface {
	Policy(ctx context.Context) (control.PolicyInForce, error)
	// SetPolicy replaces the policy with a policy document; an empty one
	// brings back the configuration's.
	SetPolicy(ctx context.Context, doc []byte) (control.PolicyInForce, error)
	PlacementDecisions(ctx context.Context, templateIDOrAlias string) ([]core.PlacementDecision, error)
}

// Placement routes.
const (
	PathPlacementPolicy    = "/cube/placement/policy"
	PathTemplatePlacements = "/cube/template/{template_id}/placement"
)

var errPlacementOff = errors.New("placement is not configured on this master")

type placementPolicyResponse struct {
	envelope.Response
	Data cubeview.PlacementPolicy `json:"data"`
}

type placementDecisionsResponse struct {
	envelope.Response
	Data cubeview.PlacementDecisions `json:"data"`
}

// getPlacementPolicy is GET /cube/placement/policy.
func (s *server) getPlacementPolicy(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Placement == nil {
		s.fail(w, r, "", errPlacementOff)
		return
	}
	pf, err := s.cfg.Placement.Policy(r.Context())
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	s.write(w, r, placementPolicyResponse{Response: envelope.OK(""), Data: cubeview.NewPlacementPolicy(pf.Policy, pf.Source, pf.SetAt)})
}

// putPlacementPolicy is PUT /cube/placement/policy: the body is the
// policy document ({} or an empty body brings back the configuration's).
func (s *server) putPlacementPolicy(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Placement == nil {
		s.fail(w, r, "", errPlacementOff)
		return
	}
	var doc json.RawMessage
	if r.ContentLength != 0 && !s.decode(w, r, &doc) {
		return
	}
	if string(doc) == "{}" {
		doc = nil
	}
	pf, err := s.cfg.Placement.SetPolicy(r.Context(), doc)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	s.write(w, r, placementPolicyResponse{Response: envelope.OK(""), Data: cubeview.NewPlacementPolicy(pf.Policy, pf.Source, pf.SetAt)})
}

// templatePlacements is GET /cube/template/{template_id}/placement.
func (s *server) templatePlacements(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Placement == nil {
		s.fail(w, r, "", errPlacementOff)
		return
	}
	id, ok := s.templateKey(w, r, "", chi.URLParam(r, "template_id"))
	if !ok {
		return
	}
	ds, err := s.cfg.Placement.PlacementDecisions(r.Context(), id)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	if ds == nil {
		ds = []core.PlacementDecision{}
	}
	s.write(w, r, placementDecisionsResponse{Response: envelope.OK(""), Data: cubeview.PlacementDecisions{TemplateID: id, Decisions: ds}})
}
