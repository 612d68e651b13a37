package entstore

import (
	"context"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/templatedefinition"
	"github.com/cubesandbox/templatecenter/ent/templatereplica"
)

type templateRepo struct{ sc scope }

func (r templateRepo) getDef(ctx context.Context, sc scope, what string, lock bool, q func(c *ent.Client) *ent.TemplateDefinitionQuery) (*ent.TemplateDefinition, error) {
	var out *ent.TemplateDefinition
	err := sc.do(ctx, func(c *ent.Client) error {
		qq := q(c)
		if lock {
			qq = qq.ForUpdate()
		}
		var err error
		out, err = qq.Only(ctx)
		return err
	})
	return out, mapErr(err, what)
}

func (r templateRepo) GetDefinition(ctx context.Context, templateID string) (*core.Definition, error) {
	e, err := r.getDef(ctx, r.sc, "template "+templateID, false, func(c *ent.Client) *ent.TemplateDefinitionQuery {
		return c.TemplateDefinition.Query().Where(templatedefinition.TemplateID(templateID))
	})
	if err != nil {
		return nil, err
	}
	return definitionFromEnt(e), nil
}

func (r templateRepo) GetDefinitionByAlias(ctx context.Context, alias string) (*core.Definition, error) {
	if alias == "" {
		return nil, fmt.Errorf("template alias: empty: %w", core.ErrNotFound)
	}
	e, err := r.getDef(ctx, r.sc, "template alias "+alias, false, func(c *ent.Client) *ent.TemplateDefinitionQuery {
		return c.TemplateDefinition.Query().Where(templatedefinition.Or(
			templatedefinition.Alias(alias),
			// Aliased by an upstream master (display_name only).
			templatedefinition.And(templatedefinition.AliasIsNil(), templatedefinition.Kind(kindTemplate), templatedefinition.DisplayName(alias)),
		))
	})
	if err != nil {
		return nil, err
	}
	return definitionFromEnt(e), nil
}

func (r templateRepo) ListDefinitions(ctx context.Context) ([]*core.Definition, error) {
	var out []*core.Definition
	err := r.sc.do(ctx, func(c *ent.Client) error {
		es, err := c.TemplateDefinition.Query().Order(ent.Asc(templatedefinition.FieldTemplateID)).All(ctx)
		if err != nil {
			return err
		}
		out = make([]*core.Definition, len(es))
		for i, e := range es {
			out[i] = definitionFromEnt(e)
		}
		return nil
	})
	return out, mapErr(err, "list templates")
}

func (r templateRepo) CreateDefinition(ctx context.Context, def *core.Definition) error {
	if def == nil {
		return fmt.Errorf("create template: %w", core.ErrInvalidArgument)
	}
	t := r.sc.s.now()
	row := *def
	row.CreatedAt, row.UpdatedAt = t, t
	err := r.sc.do(ctx, func(c *ent.Client) error {
		if err := r.sc.purgeSoftDeleted(ctx, c, "t_cube_template_definition", "template_id = ?", def.TemplateID); err != nil {
			return err
		}
		b := c.TemplateDefinition.Create().SetTemplateID(def.TemplateID).SetCreatedAt(t)
		setDefinition(b.Mutation(), &row, false)
		return b.Exec(ctx)
	})
	if err != nil {
		return mapErr(err, "create template "+def.TemplateID)
	}
	def.CreatedAt, def.UpdatedAt = t, t
	return nil
}

func (r templateRepo) UpdateDefinition(ctx context.Context, templateID string, fn func(*core.Definition) error) (*core.Definition, error) {
	var out *core.Definition
	err := r.sc.inTx(ctx, func(sc scope) error {
		e, err := r.getDef(ctx, sc, "template "+templateID, sc.lockRows(), func(c *ent.Client) *ent.TemplateDefinitionQuery {
			return c.TemplateDefinition.Query().Where(templatedefinition.TemplateID(templateID))
		})
		if err != nil {
			return err
		}
		cur := definitionFromEnt(e)
		next := *cur
		if err := fn(&next); err != nil {
			return err
		}
		next.TemplateID, next.CreatedAt = cur.TemplateID, cur.CreatedAt
		next.UpdatedAt = r.sc.s.after(cur.UpdatedAt)
		u := sc.c.TemplateDefinition.UpdateOneID(e.ID)
		setDefinition(u.Mutation(), &next, true)
		if err := u.Exec(ctx); err != nil {
			return mapErr(err, "update template "+templateID)
		}
		out = &next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (r templateRepo) DeleteDefinition(ctx context.Context, templateID string) error {
	err := r.sc.do(ctx, func(c *ent.Client) error {
		_, err := c.TemplateDefinition.Delete().Where(templatedefinition.TemplateID(templateID)).Exec(ctx)
		return err
	})
	return mapErr(err, "delete template "+templateID)
}

func (r templateRepo) UpsertReplica(ctx context.Context, rp *core.Replica) error {
	if rp == nil {
		return fmt.Errorf("upsert replica: %w", core.ErrInvalidArgument)
	}
	t := r.sc.s.now()
	err := r.sc.do(ctx, func(c *ent.Client) error {
		// created_at, template_id and node_id are immutable, so the upsert's
		// update part leaves them as they were.
		return c.TemplateReplica.Create().
			SetCreatedAt(t).
			SetUpdatedAt(t).
			SetTemplateID(rp.TemplateID).
			SetNodeID(rp.NodeID).
			SetNodeIP(rp.NodeIP).
			SetInstanceType(rp.InstanceType).
			SetSpec(rp.Spec).
			SetSnapshotPath(rp.SnapshotPath).
			SetStatus(string(rp.Status)).
			SetPhase(string(rp.Phase)).
			SetArtifactID(rp.ArtifactID).
			SetLastJobID(rp.LastJobID).
			SetLastErrorPhase(rp.LastErrorPhase).
			SetCleanupRequired(rp.CleanupRequired).
			SetErrorMessage(rp.ErrorMessage).
			SetGuestImageVersion(rp.GuestImageVersion).
			SetAgentVersion(rp.AgentVersion).
			SetKernelVersion(rp.KernelVersion).
			SetShimVersion(rp.ShimVersion).
			SetCompatStatus(string(rp.CompatStatus)).
			SetCompatCheckedUnix(rp.CompatCheckedUnix).
			OnConflictColumns(templatereplica.FieldTemplateID, templatereplica.FieldNodeID).
			UpdateNewValues().
			// A soft-deleted row with the key is replaced, not kept hidden.
			Update(func(u *ent.TemplateReplicaUpsert) { u.ClearDeletedAt() }).
			Exec(ctx)
	})
	if err != nil {
		return mapErr(err, fmt.Sprintf("upsert replica %s/%s", rp.TemplateID, rp.NodeID))
	}
	rp.UpdatedAt = t
	return nil
}

func (r templateRepo) SetReplicaCompat(ctx context.Context, templateID, nodeID string, status core.CompatStatus, checkedUnix int64) error {
	what := fmt.Sprintf("replica %s/%s compat", templateID, nodeID)
	var n int
	err := r.sc.do(ctx, func(c *ent.Client) error {
		var err error
		n, err = c.TemplateReplica.Update().
			Where(templatereplica.TemplateID(templateID), templatereplica.NodeID(nodeID)).
			SetCompatStatus(string(status)).
			SetCompatCheckedUnix(checkedUnix).
			Save(ctx)
		return err
	})
	if err != nil {
		return mapErr(err, what)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, core.ErrNotFound)
	}
	return nil
}

func (r templateRepo) replicas(ctx context.Context, what string, q func(c *ent.Client) *ent.TemplateReplicaQuery) ([]*core.Replica, error) {
	var out []*core.Replica
	err := r.sc.do(ctx, func(c *ent.Client) error {
		es, err := q(c).All(ctx)
		if err != nil {
			return err
		}
		out = make([]*core.Replica, len(es))
		for i, e := range es {
			out[i] = replicaFromEnt(e)
		}
		return nil
	})
	return out, mapErr(err, what)
}

func (r templateRepo) ListReplicas(ctx context.Context, templateID string) ([]*core.Replica, error) {
	return r.replicas(ctx, "replicas of template "+templateID, func(c *ent.Client) *ent.TemplateReplicaQuery {
		return c.TemplateReplica.Query().Where(templatereplica.TemplateID(templateID)).
			Order(ent.Asc(templatereplica.FieldNodeID))
	})
}

func (r templateRepo) ListReplicasByArtifact(ctx context.Context, artifactID string) ([]*core.Replica, error) {
	return r.replicas(ctx, "replicas of artifact "+artifactID, func(c *ent.Client) *ent.TemplateReplicaQuery {
		return c.TemplateReplica.Query().Where(templatereplica.ArtifactID(artifactID)).
			Order(ent.Asc(templatereplica.FieldTemplateID), ent.Asc(templatereplica.FieldNodeID))
	})
}

func (r templateRepo) DeleteReplicas(ctx context.Context, templateID string, nodeIDs ...string) (int, error) {
	var n int
	err := r.sc.do(ctx, func(c *ent.Client) error {
		d := c.TemplateReplica.Delete().Where(templatereplica.TemplateID(templateID))
		if len(nodeIDs) > 0 {
			d = d.Where(templatereplica.NodeIDIn(nodeIDs...))
		}
		var err error
		n, err = d.Exec(ctx)
		return err
	})
	return n, mapErr(err, "delete replicas of template "+templateID)
}
