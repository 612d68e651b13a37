package entstore

import (
	"context"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/artifactnodeplacement"
)

type placementRepo struct{ sc scope }

func (r placementRepo) Add(ctx context.Context, p core.Placement) error {
	t := r.sc.s.now()
	err := r.sc.do(ctx, func(c *ent.Client) error {
		return c.ArtifactNodePlacement.Create().
			SetCreatedAt(t).
			SetUpdatedAt(t).
			SetArtifactID(p.ArtifactID).
			SetNodeID(p.NodeID).
			SetNodeIP(p.NodeIP).
			OnConflictColumns(artifactnodeplacement.FieldArtifactID, artifactnodeplacement.FieldNodeID).
			UpdateNewValues().
			Exec(ctx)
	})
	return mapErr(err, fmt.Sprintf("add placement %s/%s", p.ArtifactID, p.NodeID))
}

func (r placementRepo) List(ctx context.Context, artifactID string) ([]core.Placement, error) {
	var out []core.Placement
	err := r.sc.do(ctx, func(c *ent.Client) error {
		es, err := c.ArtifactNodePlacement.Query().Where(artifactnodeplacement.ArtifactID(artifactID)).
			Order(ent.Asc(artifactnodeplacement.FieldNodeID)).All(ctx)
		if err != nil {
			return err
		}
		out = make([]core.Placement, len(es))
		for i, e := range es {
			out[i] = core.Placement{ArtifactID: e.ArtifactID, NodeID: e.NodeID, NodeIP: e.NodeIP, CreatedAt: e.CreatedAt.UTC()}
		}
		return nil
	})
	return out, mapErr(err, "placements of artifact "+artifactID)
}

func (r placementRepo) Delete(ctx context.Context, artifactID string) (int, error) {
	var n int
	err := r.sc.do(ctx, func(c *ent.Client) error {
		var err error
		n, err = c.ArtifactNodePlacement.Delete().Where(artifactnodeplacement.ArtifactID(artifactID)).Exec(ctx)
		return err
	})
	return n, mapErr(err, "delete placements of artifact "+artifactID)
}
