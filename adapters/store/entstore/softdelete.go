package entstore

import (
	"context"
	"strconv"
	"strings"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/intercept"
)

// Upstream's gorm models soft-delete: a row whose deleted_at is set has
// been deleted. Such rows (in a database adopted from upstream, or written
// by an upstream process sharing it) do not exist for this store: every
// query, count, update and delete of a table with deleted_at skips them,
// and a create that needs a soft-deleted row's unique key removes that row
// first. This service itself deletes rows for real.

// Definitions of upstream's other kind, "snapshot" (templates taken from
// a running sandbox, a feature this service does not have), are left to
// upstream alike: hidden from reads and never updated or deleted here.

// softDeleteTypes are the ent types whose tables have deleted_at.
var softDeleteTypes = map[string]bool{
	ent.TypeTemplateDefinition: true,
	ent.TypeTemplateReplica:    true,
	ent.TypeRootfsArtifact:     true,
	ent.TypeTemplateImageJob:   true,
}

// hideSoftDeleted installs the query interceptor and the mutation hook
// that hide soft-deleted rows and snapshot definitions.
func hideSoftDeleted(c *ent.Client) {
	live := entsql.FieldIsNull("deleted_at")
	template := entsql.FieldIn("kind", kindTemplate, "")
	c.Intercept(intercept.TraverseFunc(func(_ context.Context, q intercept.Query) error {
		if softDeleteTypes[q.Type()] {
			q.WhereP(live)
		}
		if q.Type() == ent.TypeTemplateDefinition {
			q.WhereP(template)
		}
		return nil
	}))
	c.Use(func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			if softDeleteTypes[m.Type()] && !m.Op().Is(ent.OpCreate) {
				if w, ok := m.(interface {
					WhereP(...func(*entsql.Selector))
				}); ok {
					w.WhereP(live)
					if m.Type() == ent.TypeTemplateDefinition {
						w.WhereP(template)
					}
				}
			}
			return next.Mutate(ctx, m)
		})
	})
}

// purgeSoftDeleted removes the soft-deleted rows of table matching where
// (a condition with ? placeholders), so that a create can take their
// unique keys. It looks before it deletes: such rows are rare, and a plain
// read takes no locks where a DELETE would lock ranges on MySQL.
func (sc scope) purgeSoftDeleted(ctx context.Context, c *ent.Client, table, where string, args ...any) error {
	cond := " FROM " + table + " WHERE deleted_at IS NOT NULL AND (" + where + ")"
	rows, err := c.QueryContext(ctx, sc.s.rebind("SELECT COUNT(*)"+cond), args...)
	if err != nil {
		return err
	}
	var n int
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	_, err = c.ExecContext(ctx, sc.s.rebind("DELETE"+cond), args...)
	return err
}

// rebind rewrites ? placeholders for the store's dialect.
func (s *Store) rebind(query string) string {
	if s.dialect != "postgres" {
		return query
	}
	var b strings.Builder
	n := 0
	for _, ch := range query {
		if ch == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(ch)
	}
	return b.String()
}
