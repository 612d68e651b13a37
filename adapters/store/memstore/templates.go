package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

type templateRepo struct{ sc scope }

// aliasClash reports another definition (any but self) holding d's alias.
// An empty alias is NULL and never clashes; aliases differing only in
// letter case clash (upstream's case-folded key), others compare byte for
// byte.
func (st *state) aliasClash(d *core.Definition, self string) error {
	if d.Alias == "" {
		return nil
	}
	for id, row := range st.defs {
		if id != self && strings.EqualFold(row.def.Alias, d.Alias) {
			return fmt.Errorf("alias %s is taken by template %s: %w", d.Alias, id, core.ErrConflict)
		}
	}
	return nil
}

func (r templateRepo) GetDefinition(ctx context.Context, templateID string) (*core.Definition, error) {
	var out *core.Definition
	err := r.sc.view(ctx, func(st *state) {
		if row, ok := st.defs[templateID]; ok {
			d := row.def
			out = &d
		}
	})
	switch {
	case err != nil:
		return nil, err
	case out == nil:
		return nil, fmt.Errorf("template %s: %w", templateID, core.ErrNotFound)
	}
	return out, nil
}

func (r templateRepo) GetDefinitionByAlias(ctx context.Context, alias string) (*core.Definition, error) {
	if alias == "" {
		return nil, fmt.Errorf("template alias: empty: %w", core.ErrNotFound)
	}
	var out *core.Definition
	err := r.sc.view(ctx, func(st *state) {
		for _, row := range st.defs {
			if row.def.Alias == alias {
				d := row.def
				out = &d
				return
			}
		}
	})
	switch {
	case err != nil:
		return nil, err
	case out == nil:
		return nil, fmt.Errorf("template alias %s: %w", alias, core.ErrNotFound)
	}
	return out, nil
}

func (r templateRepo) ListDefinitions(ctx context.Context) ([]*core.Definition, error) {
	var out []*core.Definition
	err := r.sc.view(ctx, func(st *state) {
		out = make([]*core.Definition, 0, len(st.defs))
		for _, row := range st.defs {
			d := row.def
			out = append(out, &d)
		}
	})
	slices.SortFunc(out, func(a, b *core.Definition) int { return strings.Compare(a.TemplateID, b.TemplateID) })
	return out, err
}

func (r templateRepo) CreateDefinition(ctx context.Context, def *core.Definition) error {
	if def == nil {
		return fmt.Errorf("create template: %w", core.ErrInvalidArgument)
	}
	what := "create template " + def.TemplateID
	if err := required("template_id", def.TemplateID); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	row := *def
	err := r.sc.write(ctx, func(st *state) error {
		if _, ok := st.defs[row.TemplateID]; ok {
			return fmt.Errorf("template id is taken: %w", core.ErrConflict)
		}
		if err := st.aliasClash(&row, ""); err != nil {
			return err
		}
		row.CreatedAt = r.sc.s.now()
		row.UpdatedAt = row.CreatedAt
		st.defs[row.TemplateID] = defRow{def: row, rev: st.nextRev()}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	def.CreatedAt, def.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return nil
}

func (r templateRepo) UpdateDefinition(ctx context.Context, templateID string, fn func(*core.Definition) error) (*core.Definition, error) {
	what := "update template " + templateID
	return update(ctx, r.sc, what,
		func(st *state) (*core.Definition, uint64, bool) {
			row, ok := st.defs[templateID]
			return &row.def, row.rev, ok
		},
		func(cur *core.Definition) (*core.Definition, error) {
			next := *cur
			if err := fn(&next); err != nil {
				return nil, err
			}
			next.TemplateID, next.CreatedAt = cur.TemplateID, cur.CreatedAt
			return &next, nil
		},
		func(st *state, cur, next *core.Definition) error {
			if err := st.aliasClash(next, templateID); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			next.UpdatedAt = r.sc.s.after(cur.UpdatedAt)
			st.defs[templateID] = defRow{def: *next, rev: st.nextRev()}
			return nil
		})
}

func (r templateRepo) DeleteDefinition(ctx context.Context, templateID string) error {
	return r.sc.write(ctx, func(st *state) error {
		delete(st.defs, templateID)
		return nil
	})
}

func (r templateRepo) UpsertReplica(ctx context.Context, rp *core.Replica) error {
	if rp == nil {
		return fmt.Errorf("upsert replica: %w", core.ErrInvalidArgument)
	}
	what := fmt.Sprintf("upsert replica %s/%s", rp.TemplateID, rp.NodeID)
	for _, err := range []error{required("template_id", rp.TemplateID), required("node_id", rp.NodeID)} {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	row := *rp
	err := r.sc.write(ctx, func(st *state) error {
		k := pair{row.TemplateID, row.NodeID}
		row.UpdatedAt = r.sc.s.now()
		row.CreatedAt = row.UpdatedAt
		if old, ok := st.replicas[k]; ok {
			row.CreatedAt = old.CreatedAt
		}
		st.replicas[k] = row
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	rp.UpdatedAt = row.UpdatedAt
	return nil
}

// SetReplicaCompat leaves updated_at alone, as the SQL store's single-column
// UPDATE does.
func (r templateRepo) SetReplicaCompat(ctx context.Context, templateID, nodeID string, status core.CompatStatus, checkedUnix int64) error {
	what := fmt.Sprintf("replica %s/%s compat", templateID, nodeID)
	return r.sc.write(ctx, func(st *state) error {
		k := pair{templateID, nodeID}
		row, ok := st.replicas[k]
		if !ok {
			return fmt.Errorf("%s: %w", what, core.ErrNotFound)
		}
		row.CompatStatus, row.CompatCheckedUnix = status, checkedUnix
		st.replicas[k] = row
		return nil
	})
}

// replicas returns the replicas keep accepts, ordered by template id, then
// node id.
func (r templateRepo) replicas(ctx context.Context, keep func(rp *core.Replica) bool) ([]*core.Replica, error) {
	var out []*core.Replica
	err := r.sc.view(ctx, func(st *state) {
		for _, row := range st.replicas {
			if keep(&row) {
				out = append(out, &row)
			}
		}
	})
	slices.SortFunc(out, func(a, b *core.Replica) int {
		return cmp.Or(strings.Compare(a.TemplateID, b.TemplateID), strings.Compare(a.NodeID, b.NodeID))
	})
	return out, err
}

func (r templateRepo) ListReplicas(ctx context.Context, templateID string) ([]*core.Replica, error) {
	return r.replicas(ctx, func(rp *core.Replica) bool { return rp.TemplateID == templateID })
}

func (r templateRepo) ListReplicasByArtifact(ctx context.Context, artifactID string) ([]*core.Replica, error) {
	return r.replicas(ctx, func(rp *core.Replica) bool { return rp.ArtifactID == artifactID })
}

func (r templateRepo) DeleteReplicas(ctx context.Context, templateID string, nodeIDs ...string) (int, error) {
	n := 0
	err := r.sc.write(ctx, func(st *state) error {
		for k := range st.replicas {
			if k.a == templateID && (len(nodeIDs) == 0 || slices.Contains(nodeIDs, k.b)) {
				delete(st.replicas, k)
				n++
			}
		}
		return nil
	})
	return n, err
}
