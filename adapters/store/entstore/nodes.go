package entstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/templatenode"
	"github.com/cubesandbox/templatecenter/ports"
)

type nodeRepo struct{ sc scope }

func (r nodeRepo) List(ctx context.Context) ([]ports.NodeRecord, error) {
	var out []ports.NodeRecord
	err := r.sc.do(ctx, func(c *ent.Client) error {
		es, err := c.TemplateNode.Query().Order(ent.Asc(templatenode.FieldNodeID)).All(ctx)
		if err != nil {
			return err
		}
		out = make([]ports.NodeRecord, len(es))
		for i, e := range es {
			out[i] = ports.NodeRecord{NodeID: e.NodeID, NodeIP: e.NodeIP, GRPCAddr: e.GrpcAddr, InstanceType: e.InstanceType,
				Disabled: e.Disabled, CreatedAt: e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC()}
		}
		return nil
	})
	return out, mapErr(err, "list nodes")
}

func (r nodeRepo) Upsert(ctx context.Context, n ports.NodeRecord) error {
	if strings.TrimSpace(n.NodeID) == "" {
		return fmt.Errorf("upsert node: %w", &core.FieldError{Field: "node_id", Reason: "is required"})
	}
	t := r.sc.s.now()
	err := r.sc.do(ctx, func(c *ent.Client) error {
		// UpdateNewValues leaves the immutable columns (node_id,
		// created_at) of an existing row alone.
		return c.TemplateNode.Create().
			SetCreatedAt(t).
			SetUpdatedAt(t).
			SetNodeID(n.NodeID).
			SetNodeIP(n.NodeIP).
			SetGrpcAddr(n.GRPCAddr).
			SetInstanceType(n.InstanceType).
			SetDisabled(n.Disabled).
			OnConflictColumns(templatenode.FieldNodeID).
			UpdateNewValues().
			Exec(ctx)
	})
	return mapErr(err, "upsert node "+n.NodeID)
}

func (r nodeRepo) Delete(ctx context.Context, nodeID string) error {
	err := r.sc.do(ctx, func(c *ent.Client) error {
		_, err := c.TemplateNode.Delete().Where(templatenode.NodeID(nodeID)).Exec(ctx)
		return err
	})
	return mapErr(err, "delete node "+nodeID)
}
