package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// policyRow is the stored placement policy ("" when none).
type policyRow struct {
	doc string
	at  time.Time
}

type policyRepo struct{ sc scope }

func (r policyRepo) Policy(ctx context.Context) (string, time.Time, error) {
	var row policyRow
	if err := r.sc.view(ctx, func(st *state) { row = st.policy }); err != nil {
		return "", time.Time{}, err
	}
	if row.doc == "" {
		return "", time.Time{}, fmt.Errorf("placement policy: %w", core.ErrNotFound)
	}
	return row.doc, row.at, nil
}

func (r policyRepo) SetPolicy(ctx context.Context, doc string) error {
	return r.sc.write(ctx, func(st *state) error {
		st.policy = policyRow{doc: doc, at: r.sc.s.now()}
		if doc == "" {
			st.policy = policyRow{}
		}
		return nil
	})
}

func (r policyRepo) AddDecision(ctx context.Context, d core.PlacementDecision, keep int) error {
	if d.TemplateID == "" || d.Decision == "" {
		return fmt.Errorf("add placement decision: template id and decision are required: %w", core.ErrInvalidArgument)
	}
	d.Message = cut(d.Message, core.MaxDecisionMessage)
	return r.sc.write(ctx, func(st *state) error {
		d.At = r.sc.s.now()
		list := append([]core.PlacementDecision{d}, st.decisions[d.TemplateID]...)
		if keep > 0 && len(list) > keep {
			list = list[:keep]
		}
		st.decisions[d.TemplateID] = list
		return nil
	})
}

func (r policyRepo) Decisions(ctx context.Context, templateID string, limit int) ([]core.PlacementDecision, error) {
	var out []core.PlacementDecision
	err := r.sc.view(ctx, func(st *state) { out = slices.Clone(st.decisions[templateID]) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, err
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
