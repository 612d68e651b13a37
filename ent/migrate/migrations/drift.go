package migrations

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

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
	if err := migrate.NewSchema(drv).WriteTo(ctx, &buf, migrate.WithDropIndex(true), migrate.WithDropColumn(true)); err != nil {
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
