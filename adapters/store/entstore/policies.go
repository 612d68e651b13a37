package entstore

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/placementdecision"
	"github.com/cubesandbox/templatecenter/ent/placementpolicy"
)

// policyName is the one row of t_cube_placement_policy.
const policyName = "default"

type policyRepo struct{ sc scope }

func (r policyRepo) Policy(ctx context.Context) (string, time.Time, error) {
	var doc string
	var at time.Time
	err := r.sc.do(ctx, func(c *ent.Client) error {
		e, err := c.PlacementPolicy.Query().Where(placementpolicy.Name(policyName)).Only(ctx)
		if err != nil {
			return err
		}
		doc, at = e.Doc, e.UpdatedAt.UTC()
		return nil
	})
	if err == nil && doc == "" {
		err = fmt.Errorf("placement policy is empty: %w", core.ErrNotFound)
	}
	return doc, at, mapErr(err, "placement policy")
}

func (r policyRepo) SetPolicy(ctx context.Context, doc string) error {
	err := r.sc.do(ctx, func(c *ent.Client) error {
		if doc == "" {
			_, err := c.PlacementPolicy.Delete().Where(placementpolicy.Name(policyName)).Exec(ctx)
			return err
		}
		return c.PlacementPolicy.Create().SetName(policyName).SetDoc(doc).SetUpdatedAt(r.sc.s.now()).
			OnConflictColumns(placementpolicy.FieldName).UpdateNewValues().Exec(ctx)
	})
	return mapErr(err, "set placement policy")
}

func (r policyRepo) AddDecision(ctx context.Context, d core.PlacementDecision, keep int) error {
	if d.TemplateID == "" || d.Decision == "" {
		return fmt.Errorf("add placement decision: template id and decision are required: %w", core.ErrInvalidArgument)
	}
	err := r.sc.do(ctx, func(c *ent.Client) error {
		if err := c.PlacementDecision.Create().
			SetTemplateID(cutRunes(d.TemplateID, core.MaxDecisionField)).
			SetNodeID(cutRunes(d.NodeID, core.MaxDecisionField)).
			SetDecision(cutRunes(d.Decision, 32)).
			SetReason(cutRunes(d.Reason, 64)).
			SetMessage(cutRunes(d.Message, core.MaxDecisionMessage)).
			SetJobID(cutRunes(d.JobID, core.MaxDecisionField)).
			SetMaster(cutRunes(d.Master, core.MaxDecisionField)).
			SetCreatedAt(r.sc.s.now()).
			Exec(ctx); err != nil {
			return err
		}
		if keep <= 0 {
			return nil
		}
		// The id of the oldest decision to keep; older ones go.
		ids, err := c.PlacementDecision.Query().Where(placementdecision.TemplateID(d.TemplateID)).
			Order(ent.Desc(placementdecision.FieldID)).Offset(keep - 1).Limit(1).IDs(ctx)
		if err != nil || len(ids) == 0 {
			return err
		}
		_, err = c.PlacementDecision.Delete().Where(placementdecision.TemplateID(d.TemplateID), placementdecision.IDLT(ids[0])).Exec(ctx)
		return err
	})
	return mapErr(err, "add placement decision for "+d.TemplateID)
}

func (r policyRepo) Decisions(ctx context.Context, templateID string, limit int) ([]core.PlacementDecision, error) {
	var out []core.PlacementDecision
	err := r.sc.do(ctx, func(c *ent.Client) error {
		q := c.PlacementDecision.Query().Where(placementdecision.TemplateID(templateID)).Order(ent.Desc(placementdecision.FieldID))
		if limit > 0 {
			q = q.Limit(limit)
		}
		es, err := q.All(ctx)
		if err != nil {
			return err
		}
		out = make([]core.PlacementDecision, len(es))
		for i, e := range es {
			out[i] = core.PlacementDecision{TemplateID: e.TemplateID, NodeID: e.NodeID, Decision: e.Decision, Reason: e.Reason,
				Message: e.Message, JobID: e.JobID, Master: e.Master, At: e.CreatedAt.UTC()}
		}
		return nil
	})
	return out, mapErr(err, "placement decisions of "+templateID)
}

// cutRunes shortens s to at most n bytes on a character boundary (the
// column's width either way), so a long message never fails the insert.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
