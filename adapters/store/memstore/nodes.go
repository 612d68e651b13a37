package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

type nodeRepo struct{ sc scope }

func (r nodeRepo) List(ctx context.Context) ([]ports.NodeRecord, error) {
	out := []ports.NodeRecord{}
	err := r.sc.view(ctx, func(st *state) {
		for _, n := range st.nodes {
			out = append(out, n)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ports.NodeRecord) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

func (r nodeRepo) Upsert(ctx context.Context, n ports.NodeRecord) error {
	if strings.TrimSpace(n.NodeID) == "" {
		return fmt.Errorf("upsert node: %w", &core.FieldError{Field: "node_id", Reason: "is required"})
	}
	return r.sc.write(ctx, func(st *state) error {
		n.UpdatedAt = r.sc.s.now()
		n.CreatedAt = n.UpdatedAt
		if old, ok := st.nodes[n.NodeID]; ok {
			n.CreatedAt = old.CreatedAt
		}
		st.nodes[n.NodeID] = n
		return nil
	})
}

func (r nodeRepo) Delete(ctx context.Context, nodeID string) error {
	return r.sc.write(ctx, func(st *state) error {
		delete(st.nodes, nodeID)
		return nil
	})
}
