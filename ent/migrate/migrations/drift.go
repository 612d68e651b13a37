package migrations

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	atlas "ariga.io/atlas/sql/schema"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	entschema "entgo.io/ent/dialect/sql/schema"

	"github.com/cubesandbox/templatecenter/ent/migrate"
)

// EntDialect maps a dialect name to ent's.
func EntDialect(d string) (string, error) {
	d, err := NormalizeDialect(d)
	if err != nil {
		return "", err
	}
	switch d {
	case MySQL:
		return dialect.MySQL, nil
	case Postgres:
		return dialect.Postgres, nil
	default:
		return dialect.SQLite, nil
	}
}

// Drift returns the DDL that would bring db to the ent schema, or "" when
// the database already matches it. Columns and indexes the schema does not
// know count as drift too.
func Drift(ctx context.Context, db *sql.DB, d string) (string, error) {
	ed, err := EntDialect(d)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	drv := entsql.OpenDB(ed, db)
	if err := migrate.NewSchema(drv).WriteTo(ctx, &buf, migrate.WithDropIndex(true), migrate.WithDropColumn(true), entschema.WithDiffHook(keepUpstreamOnly)); err != nil {
		return "", fmt.Errorf("diff schema: %w", err)
	}
	return strings.TrimSpace(buf.String()), nil
}

// NextMigration applies the committed migrations to db (which should be an
// empty scratch database) and returns the DDL still needed to reach the ent
// schema: the body of the next migration file, or "" when none is needed.
func NextMigration(ctx context.Context, db *sql.DB, d string) (string, error) {
	if _, err := Migrate(ctx, db, d); err != nil {
		return "", err
	}
	return Drift(ctx, db, d)
}

// upstreamOnly are columns and indexes the migrations keep for upstream's
// readers that ent cannot model (a generated column) or no longer models
// (retain, which upstream's newest release dropped and this service never
// read; its default fills it), by table.
var upstreamOnly = map[string][]string{
	"t_cube_template_definition": {"display_name_key", "idx_template_display_name_key", "retain"},
}

// keepUpstreamOnly drops from a diff the removal of upstreamOnly objects.
func keepUpstreamOnly(next entschema.Differ) entschema.Differ {
	return entschema.DiffFunc(func(current, desired *atlas.Schema) ([]atlas.Change, error) {
		changes, err := next.Diff(current, desired)
		if err != nil {
			return nil, err
		}
		out := changes[:0]
		for _, c := range changes {
			if m, ok := c.(*atlas.ModifyTable); ok && upstreamOnly[m.T.Name] != nil {
				keep := upstreamOnly[m.T.Name]
				m.Changes = slices.DeleteFunc(m.Changes, func(tc atlas.Change) bool {
					switch d := tc.(type) {
					case *atlas.DropColumn:
						return slices.Contains(keep, d.C.Name)
					case *atlas.DropIndex:
						return slices.Contains(keep, d.I.Name)
					}
					return false
				})
				if len(m.Changes) == 0 {
					continue
				}
			}
			out = append(out, c)
		}
		return out, nil
	})
}
