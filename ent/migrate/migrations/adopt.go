package migrations

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	atlas "ariga.io/atlas/sql/schema"
	entsql "entgo.io/ent/dialect/sql"
	entschema "entgo.io/ent/dialect/sql/schema"

	"github.com/cubesandbox/templatecenter/ent/migrate"
)

// Adopting a database that upstream's master created: its tables exist
// but this service's migration table does not. Running the migration files
// would fail on the first CREATE TABLE, so the schema is instead brought to
// ours by additions only: missing tables, columns and indexes are added.
// Nothing of theirs is dropped or changed: every column keeps its type,
// length, precision, nullability, default and generation, and their
// charset, collation, keys and same-named indexes are kept, so upstream's
// master can keep using the database. Columns upstream dropped are not
// ours to bring back (ent/schema does not model them). Then every
// migration file is recorded as applied, so later migrations run as
// usual. The store copes with their definitions: it counts time in the
// precision their timestamp columns keep (entstore's clock).

// Adopted is the first version Migrate reports when it adopted the
// database.
const Adopted = "adopted"

// upstreamMarker is the table whose presence (without Table) means the
// database is upstream's.
const upstreamMarker = "t_cube_template_definition"

// needsAdoption reports whether db holds upstream's tables and not ours.
func needsAdoption(ctx context.Context, q querier, d string) (bool, error) {
	if d == SQLite {
		return false, nil // upstream never used SQLite
	}
	ours, err := tableExists(ctx, q, d, Table)
	if err != nil || ours {
		return false, err
	}
	return tableExists(ctx, q, d, upstreamMarker)
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func tableExists(ctx context.Context, q querier, d, table string) (bool, error) {
	var query string
	switch d {
	case MySQL:
		query = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	case Postgres:
		query = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
	default:
		query = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
	}
	return countOf(ctx, q, query, table)
}

func columnExists(ctx context.Context, q querier, d, table, column string) (bool, error) {
	query := "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?"
	if d == Postgres {
		query = "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2"
	}
	return countOf(ctx, q, query, table, column)
}

func countOf(ctx context.Context, q querier, query string, args ...any) (bool, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("migrate: inspect: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return false, err
		}
	}
	return n > 0, rows.Err()
}

// AdoptionPlan is what adopting a database runs, in order.
type AdoptionPlan struct {
	Statements []string
	// Kept lists, one line each, where upstream's definition stays
	// although ours differs (a narrower type, a different same-named
	// index, the table charset).
	Kept []string
}

// planAdoption inspects db (upstream's) and returns the statements that
// make it a superset of ours.
func planAdoption(ctx context.Context, db *sql.DB, d string) (*AdoptionPlan, error) {
	p := &AdoptionPlan{}
	// 1. Tables and columns, then (once the columns exist and hold values
	// their unique keys accept) indexes.
	cols, err := entPlan(ctx, db, d, p, false)
	if err != nil {
		return nil, err
	}
	idx, err := entPlan(ctx, db, d, nil, true)
	if err != nil {
		return nil, err
	}
	pre, err := placementStatements(ctx, db, d)
	if err != nil {
		return nil, err
	}
	p.Statements = append(p.Statements, pre...)
	p.Statements = append(p.Statements, cols...)
	p.Statements = append(p.Statements, backfills[d]...)
	p.Statements = append(p.Statements, idx...)
	// The alias's unique key: upstream's newest chain keeps it in the
	// STORED alias_key column, an earlier one in display_name_key. A
	// database with neither gets upstream's newest.
	hasOld, err := columnExists(ctx, db, d, upstreamMarker, "display_name_key")
	if err != nil {
		return nil, err
	}
	hasNew, err := columnExists(ctx, db, d, upstreamMarker, "alias_key")
	if err != nil {
		return nil, err
	}
	if !hasOld && !hasNew {
		p.Statements = append(p.Statements, aliasKey[d]...)
	}
	if d == MySQL {
		ci, err := caseInsensitiveIDs(ctx, db)
		if err != nil {
			return nil, err
		}
		if ci {
			p.Statements = append(p.Statements, foldedNames)
			p.Kept = append(p.Kept, "t_cube_template_name: names compare case-insensitively, as upstream's template ids do")
		}
	}
	p.Statements = append(p.Statements, names[d]...)
	return p, nil
}

// foldedNames makes the name table compare names as upstream's MySQL
// tables compare template ids: case-insensitively. Otherwise, after
// adoption, Web-App and web-app would be one template to the definition,
// job and replica tables and two names to the namespace (an alias
// web-app next to template Web-App reaching one template for sandboxes and
// the other for GET and DELETE). Ids and aliases are ASCII, so any
// case-insensitive utf8mb4 collation folds them alike.
const foldedNames = "ALTER TABLE `t_cube_template_name` " +
	"MODIFY `name` varchar(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL, " +
	"MODIFY `template_id` varchar(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL"

// caseInsensitiveIDs reports whether upstream's definition table compares
// template ids case-insensitively (its collation ends in _ci).
func caseInsensitiveIDs(ctx context.Context, db *sql.DB) (bool, error) {
	var coll sql.NullString
	err := db.QueryRowContext(ctx, "SELECT COLLATION_NAME FROM information_schema.columns "+
		"WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'template_id'", upstreamMarker).Scan(&coll)
	if err != nil {
		return false, fmt.Errorf("migrate: inspect the collation of %s.template_id: %w", upstreamMarker, err)
	}
	return strings.HasSuffix(strings.ToLower(coll.String), "_ci"), nil
}

// entPlan is ent's diff from db to the ent schema, kept to additions:
// columns and new tables, or (indexes) new indexes only.
func entPlan(ctx context.Context, db *sql.DB, d string, p *AdoptionPlan, indexes bool) ([]string, error) {
	ed, err := EntDialect(d)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	hook := func(next entschema.Differ) entschema.Differ {
		return entschema.DiffFunc(func(current, desired *atlas.Schema) ([]atlas.Change, error) {
			changes, err := next.Diff(current, desired)
			if err != nil {
				return nil, err
			}
			return additive(changes, indexes, p), nil
		})
	}
	if err := migrate.NewSchema(entsql.OpenDB(ed, db)).WriteTo(ctx, &buf, entschema.WithDiffHook(hook)); err != nil {
		return nil, fmt.Errorf("migrate: plan adoption: %w", err)
	}
	return Statements(buf.String()), nil
}

// additive keeps the additions of changes: new tables and columns
// (indexes false), or new indexes (indexes true). What it leaves as theirs
// is noted in p.
func additive(changes []atlas.Change, indexes bool, p *AdoptionPlan) []atlas.Change {
	keep := func(format string, args ...any) {
		if p != nil {
			p.Kept = append(p.Kept, fmt.Sprintf(format, args...))
		}
	}
	var out []atlas.Change
	for _, c := range changes {
		switch c := c.(type) {
		case *atlas.AddTable:
			if !indexes {
				out = append(out, c)
			}
		case *atlas.ModifyTable:
			dropped := map[string]bool{}
			for _, tc := range c.Changes {
				if di, ok := tc.(*atlas.DropIndex); ok {
					dropped[di.I.Name] = true
				}
			}
			var kept []atlas.Change
			for _, tc := range c.Changes {
				switch tc := tc.(type) {
				case *atlas.AddColumn:
					if !indexes {
						kept = append(kept, tc)
					}
				case *atlas.ModifyColumn:
					if !indexes {
						keep("%s.%s: their definition is kept (%s)", c.T.Name, tc.From.Name, describe(tc.From))
					}
				case *atlas.AddIndex:
					if dropped[tc.I.Name] {
						if !indexes {
							keep("%s index %s: theirs is kept (ours has other columns)", c.T.Name, tc.I.Name)
						}
						continue
					}
					if indexes {
						kept = append(kept, tc)
					}
				case *atlas.DropIndex, *atlas.DropColumn:
					// Theirs stays.
				default:
					if !indexes {
						keep("%s: %T is left as it is (charset, collation or other table attributes)", c.T.Name, tc)
					}
				}
			}
			if len(kept) > 0 {
				out = append(out, &atlas.ModifyTable{T: c.T, Changes: kept})
			}
		}
	}
	return out
}

// describe is a column's definition as a note shows it.
func describe(c *atlas.Column) string {
	null := "NOT NULL"
	if c.Type.Null {
		null = "NULL"
	}
	t := c.Type.Raw
	if t == "" {
		t = fmt.Sprintf("%T", c.Type.Type)
	}
	return t + " " + null
}

// placementStatements creates t_cube_artifact_node_placement, which ent
// does not model (upstream's composite primary key), where upstream's
// database has none; theirs is kept as it is.
func placementStatements(ctx context.Context, db *sql.DB, d string) ([]string, error) {
	ok, err := tableExists(ctx, db, d, "t_cube_artifact_node_placement")
	if err != nil || ok {
		return nil, err
	}
	return []string{placementTable[d]}, nil
}

var placementTable = map[string]string{
	MySQL: "CREATE TABLE `t_cube_artifact_node_placement` (`artifact_id` varchar(128) NOT NULL, `node_id` varchar(128) NOT NULL, " +
		"`node_ip` varchar(256) NOT NULL DEFAULT '', `created_at` bigint NOT NULL DEFAULT 0, PRIMARY KEY (`artifact_id`, `node_id`)) CHARSET utf8mb4 COLLATE utf8mb4_bin",
	Postgres: `CREATE TABLE "t_cube_artifact_node_placement" ("artifact_id" character varying NOT NULL, "node_id" character varying NOT NULL, ` +
		`"node_ip" character varying NOT NULL DEFAULT '', "created_at" bigint NOT NULL DEFAULT 0, PRIMARY KEY ("artifact_id", "node_id"))`,
}

// backfills run once the columns exist and before the indexes: rows
// written by upstream get what this service's reads and unique keys need
// (gorm's timestamps are nullable; ours are read as NOT NULL).
var backfills = map[string][]string{
	MySQL: {
		"UPDATE `t_cube_template_definition` SET `created_at` = COALESCE(`created_at`, CURRENT_TIMESTAMP(6)), `updated_at` = COALESCE(`updated_at`, CURRENT_TIMESTAMP(6)) WHERE `created_at` IS NULL OR `updated_at` IS NULL",
		"UPDATE `t_cube_template_replica` SET `created_at` = COALESCE(`created_at`, CURRENT_TIMESTAMP(6)), `updated_at` = COALESCE(`updated_at`, CURRENT_TIMESTAMP(6)) WHERE `created_at` IS NULL OR `updated_at` IS NULL",
		"UPDATE `t_cube_rootfs_artifact` SET `created_at` = COALESCE(`created_at`, CURRENT_TIMESTAMP(6)), `updated_at` = COALESCE(`updated_at`, CURRENT_TIMESTAMP(6)) WHERE `created_at` IS NULL OR `updated_at` IS NULL",
		"UPDATE `t_cube_template_image_job` SET `created_at` = COALESCE(`created_at`, CURRENT_TIMESTAMP(6)), `updated_at` = COALESCE(`updated_at`, CURRENT_TIMESTAMP(6)) WHERE `created_at` IS NULL OR `updated_at` IS NULL",
		"UPDATE `t_cube_template_definition` SET `kind` = 'template' WHERE `kind` = ''",
		"UPDATE `t_cube_template_image_job` SET `request_id` = `job_id` WHERE `request_id` = ''",
		"UPDATE `t_cube_template_image_job` t JOIN (SELECT MIN(`id`) AS keep_id, `request_id`, `operation` FROM `t_cube_template_image_job` " +
			"GROUP BY `request_id`, `operation` HAVING COUNT(*) > 1) d ON d.`request_id` = t.`request_id` AND d.`operation` = t.`operation` AND t.`id` <> d.keep_id " +
			"SET t.`request_id` = CONCAT(LEFT(t.`request_id`, 127 - CHAR_LENGTH(t.`job_id`)), '#', t.`job_id`)",
		// Invariant I1 over upstream's active jobs: the newest active
		// build job of each template holds its active key.
		"UPDATE `t_cube_template_image_job` t JOIN (SELECT MAX(`id`) AS keep_id FROM `t_cube_template_image_job` " +
			"WHERE `status` IN ('PENDING', 'RUNNING') AND `operation` IN ('CREATE', 'REDO') AND `active_key` IS NULL AND `deleted_at` IS NULL GROUP BY `template_id`) d " +
			"ON t.`id` = d.keep_id SET t.`active_key` = CONCAT('image/', t.`template_id`)",
	},
	Postgres: {
		`UPDATE "t_cube_template_definition" SET "created_at" = COALESCE("created_at", now()), "updated_at" = COALESCE("updated_at", now()) WHERE "created_at" IS NULL OR "updated_at" IS NULL`,
		`UPDATE "t_cube_template_replica" SET "created_at" = COALESCE("created_at", now()), "updated_at" = COALESCE("updated_at", now()) WHERE "created_at" IS NULL OR "updated_at" IS NULL`,
		`UPDATE "t_cube_rootfs_artifact" SET "created_at" = COALESCE("created_at", now()), "updated_at" = COALESCE("updated_at", now()) WHERE "created_at" IS NULL OR "updated_at" IS NULL`,
		`UPDATE "t_cube_template_image_job" SET "created_at" = COALESCE("created_at", now()), "updated_at" = COALESCE("updated_at", now()) WHERE "created_at" IS NULL OR "updated_at" IS NULL`,
		`UPDATE "t_cube_template_definition" SET "kind" = 'template' WHERE "kind" = ''`,
		`UPDATE "t_cube_template_image_job" SET "request_id" = "job_id" WHERE "request_id" = ''`,
		`UPDATE "t_cube_template_image_job" t SET "request_id" = LEFT(t."request_id", 127 - LENGTH(t."job_id")) || '#' || t."job_id" ` +
			`FROM (SELECT MIN("id") AS keep_id, "request_id", "operation" FROM "t_cube_template_image_job" GROUP BY "request_id", "operation" HAVING COUNT(*) > 1) d ` +
			`WHERE d."request_id" = t."request_id" AND d."operation" = t."operation" AND t."id" <> d.keep_id`,
		`UPDATE "t_cube_template_image_job" t SET "active_key" = 'image/' || t."template_id" ` +
			`FROM (SELECT MAX("id") AS keep_id FROM "t_cube_template_image_job" WHERE "status" IN ('PENDING', 'RUNNING') ` +
			`AND "operation" IN ('CREATE', 'REDO') AND "active_key" IS NULL AND "deleted_at" IS NULL GROUP BY "template_id") d WHERE t."id" = d.keep_id`,
	},
}

// aliasKey adds upstream's newest alias key (20260704120000_template_alias_unique:
// a STORED generated column, NULL but for a template's non-empty
// display_name, and a unique index on it) where the adopted database has
// no alias key at all.
var aliasKey = map[string][]string{
	MySQL: {
		"ALTER TABLE `t_cube_template_definition` ADD COLUMN `alias_key` varchar(256) " +
			"GENERATED ALWAYS AS (CASE WHEN `kind` = 'template' AND `display_name` <> '' THEN `display_name` ELSE NULL END) STORED",
		"ALTER TABLE `t_cube_template_definition` ADD UNIQUE INDEX `idx_template_definition_alias_unique` (`alias_key`)",
	},
	Postgres: {
		`ALTER TABLE "t_cube_template_definition" ADD COLUMN "alias_key" character varying(256) ` +
			`GENERATED ALWAYS AS (CASE WHEN "kind" = 'template' AND "display_name" <> '' THEN "display_name" ELSE NULL END) STORED`,
		`CREATE UNIQUE INDEX "idx_template_definition_alias_unique" ON "t_cube_template_definition" ("alias_key")`,
	},
}

// names fills t_cube_template_name from upstream's rows: every live
// template id (definitions, then jobs), then every alias (kept in
// display_name by upstream); a name already taken keeps its first owner,
// so an id wins over an alias equal to it, as resolution tried ids first.
var names = map[string][]string{
	MySQL: {
		"INSERT IGNORE INTO t_cube_template_name (name, template_id, kind, created_at) " +
			"SELECT template_id, template_id, 'id', COALESCE(created_at, CURRENT_TIMESTAMP(6)) FROM t_cube_template_definition WHERE deleted_at IS NULL AND kind = 'template'",
		"INSERT IGNORE INTO t_cube_template_name (name, template_id, kind, created_at) " +
			"SELECT template_id, template_id, 'id', COALESCE(MIN(created_at), CURRENT_TIMESTAMP(6)) FROM t_cube_template_image_job WHERE deleted_at IS NULL AND template_id <> '' GROUP BY template_id",
		"INSERT IGNORE INTO t_cube_template_name (name, template_id, kind, created_at) " +
			"SELECT display_name, template_id, 'alias', COALESCE(created_at, CURRENT_TIMESTAMP(6)) FROM t_cube_template_definition " +
			"WHERE deleted_at IS NULL AND kind = 'template' AND display_name <> ''",
	},
	Postgres: {
		"INSERT INTO t_cube_template_name (name, template_id, kind, created_at) " +
			"SELECT template_id, template_id, 'id', COALESCE(created_at, now()) FROM t_cube_template_definition WHERE deleted_at IS NULL AND kind = 'template' ON CONFLICT (name) DO NOTHING",
		"INSERT INTO t_cube_template_name (name, template_id, kind, created_at) " +
			"SELECT template_id, template_id, 'id', COALESCE(MIN(created_at), now()) FROM t_cube_template_image_job WHERE deleted_at IS NULL AND template_id <> '' GROUP BY template_id ON CONFLICT (name) DO NOTHING",
		"INSERT INTO t_cube_template_name (name, template_id, kind, created_at) " +
			"SELECT display_name, template_id, 'alias', COALESCE(created_at, now()) FROM t_cube_template_definition " +
			"WHERE deleted_at IS NULL AND kind = 'template' AND display_name <> '' ON CONFLICT (name) DO NOTHING",
	},
}

// sortedKept returns p.Kept sorted, for stable output.
func (p *AdoptionPlan) sortedKept() []string {
	out := slices.Clone(p.Kept)
	slices.Sort(out)
	return slices.Compact(out)
}

// runAdoption plans and runs the adoption on conn (which holds the
// migration lock). MySQL commits each DDL statement, so a run that fails
// half-way leaves some additions made; the next run plans again from what
// is there.
func runAdoption(ctx context.Context, db *sql.DB, conn *sql.Conn, d string) error {
	p, err := planAdoption(ctx, db, d)
	if err != nil {
		return err
	}
	var ex execer = conn
	var tx *sql.Tx
	if d == Postgres {
		// PostgreSQL DDL is transactional: all or nothing.
		if tx, err = conn.BeginTx(ctx, nil); err != nil {
			return fmt.Errorf("migrate: begin: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		ex = tx
	}
	for i, stmt := range p.Statements {
		if _, err := ex.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: adopt upstream's %s schema, statement %d (%s): %w", d, i+1, stmt, err)
		}
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate: adopt: commit: %w", err)
		}
	}
	return nil
}

// Plan returns, without changing anything, the statements Migrate would
// run on db now, and notes for a reader: whether the database is adopted
// from upstream, and what of theirs an adoption keeps.
func Plan(ctx context.Context, db *sql.DB, dialect string) (statements, notes []string, err error) {
	d, err := NormalizeDialect(dialect)
	if err != nil {
		return nil, nil, err
	}
	ms, err := List(d)
	if err != nil {
		return nil, nil, err
	}
	adopt, err := needsAdoption(ctx, db, d)
	if err != nil {
		return nil, nil, err
	}
	if adopt {
		p, err := planAdoption(ctx, db, d)
		if err != nil {
			return nil, nil, err
		}
		notes = append(notes, fmt.Sprintf("adopting upstream's %s schema: additions only, then migrations %s recorded as applied", d, versions(ms)))
		for _, k := range p.sortedKept() {
			notes = append(notes, "kept: "+k)
		}
		return p.Statements, notes, nil
	}
	done := map[string]bool{}
	if ok, err := tableExists(ctx, db, d, Table); err != nil {
		return nil, nil, err
	} else if ok {
		applied, err := Status(ctx, db)
		if err != nil {
			return nil, nil, err
		}
		for _, a := range applied {
			done[a.Version] = true
		}
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		notes = append(notes, "pending: "+d+"/"+m.Name)
		statements = append(statements, Statements(m.SQL)...)
	}
	return statements, notes, nil
}

func versions(ms []Migration) string {
	vs := make([]string, len(ms))
	for i, m := range ms {
		vs[i] = m.Version
	}
	return strings.Join(vs, ", ")
}
