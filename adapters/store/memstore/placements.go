package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

type placementRepo struct{ sc scope }

func (r placementRepo) Add(ctx context.Context, p core.Placement) error {
	what := fmt.Sprintf("add placement %s/%s", p.ArtifactID, p.NodeID)
	for _, err := range []error{required("artifact_id", p.ArtifactID), required("node_id", p.NodeID)} {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return r.sc.write(ctx, func(st *state) error {
		k := pair{p.ArtifactID, p.NodeID}
		if old, ok := st.placements[k]; ok {
			p.CreatedAt = old.CreatedAt
		} else {
			p.CreatedAt = r.sc.s.now()
		}
		st.placements[k] = p
		return nil
	})
}

func (r placementRepo) List(ctx context.Context, artifactID string) ([]core.Placement, error) {
	out := []core.Placement{}
	err := r.sc.view(ctx, func(st *state) {
		for k, p := range st.placements {
			if k.a == artifactID {
				out = append(out, p)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b core.Placement) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

func (r placementRepo) Delete(ctx context.Context, artifactID string) (int, error) {
	n := 0
	err := r.sc.write(ctx, func(st *state) error {
		for k := range st.placements {
			if k.a == artifactID {
				delete(st.placements, k)
				n++
			}
		}
		return nil
	})
	return n, err
}
