package entstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
)

// placementTable has upstream's shape: the primary key (artifact_id,
// node_id) and created_at in unix seconds, with no id or deleted_at. ent
// models every table with an id, so this one is read and written in SQL.
const placementTable = "t_cube_artifact_node_placement"

type placementRepo struct{ sc scope }

func (r placementRepo) q(query string) string { return r.sc.s.rebind(query) }

func (r placementRepo) Add(ctx context.Context, p core.Placement) error {
	upsert := " ON CONFLICT (artifact_id, node_id) DO UPDATE SET node_ip = excluded.node_ip"
	if r.sc.s.dialect == "mysql" {
		upsert = " ON DUPLICATE KEY UPDATE node_ip = VALUES(node_ip)"
	}
	stmt := r.q("INSERT INTO " + placementTable + " (artifact_id, node_id, node_ip, created_at) VALUES (?, ?, ?, ?)" + upsert)
	t := r.sc.s.now().Unix()
	err := r.sc.do(ctx, func(c *ent.Client) error {
		_, err := c.ExecContext(ctx, stmt, p.ArtifactID, p.NodeID, p.NodeIP, t)
		return err
	})
	return mapErr(err, fmt.Sprintf("add placement %s/%s", p.ArtifactID, p.NodeID))
}

func (r placementRepo) List(ctx context.Context, artifactID string) ([]core.Placement, error) {
	stmt := r.q("SELECT artifact_id, node_id, node_ip, created_at FROM " + placementTable + " WHERE artifact_id = ? ORDER BY node_id")
	var out []core.Placement
	err := r.sc.do(ctx, func(c *ent.Client) error {
		out = nil
		rows, err := c.QueryContext(ctx, stmt, artifactID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p core.Placement
			var created int64
			if err := rows.Scan(&p.ArtifactID, &p.NodeID, &p.NodeIP, &created); err != nil {
				return err
			}
			p.CreatedAt = time.Unix(created, 0).UTC()
			out = append(out, p)
		}
		return rows.Err()
	})
	return out, mapErr(err, "placements of artifact "+artifactID)
}

func (r placementRepo) Delete(ctx context.Context, artifactID string) (int, error) {
	stmt := r.q("DELETE FROM " + placementTable + " WHERE artifact_id = ?")
	var n int
	err := r.sc.do(ctx, func(c *ent.Client) error {
		res, err := c.ExecContext(ctx, stmt, artifactID)
		if err != nil {
			return err
		}
		m, err := res.RowsAffected()
		n = int(m)
		return err
	})
	return n, mapErr(err, "delete placements of artifact "+artifactID)
}
