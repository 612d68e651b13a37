package migrations

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"reflect"
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
// ours by additions only: missing tables, columns and indexes are added and
// columns are widened (a longer varchar, a wider integer, finer time
// precision, a nullable column stays nullable); nothing of theirs is dropped
// or narrowed, and their charset, collation, keys and same-named indexes
// are kept. Then every migration file is recorded as applied, so later
// migrations run as usual.

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
	has, err := columnExists(ctx, db, d, upstreamMarker, "display_name_key")
	if err != nil {
		return nil, err
	}
	if !has {
		p.Statements = append(p.Statements, displayNameKey[d]...)
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

// entPlan is ent's diff from db to the ent schema, kept to additions and
// widenings: columns and new tables, or (indexes) new indexes only.
func entPlan(ctx context.Context, db *sql.DB, d string, p *AdoptionPlan, indexes bool) ([]string, error) {
	ed, err := EntDialect(d)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	fixed, err := generatedFrom(ctx, db, d)
	if err != nil {
		return nil, err
	}
	hook := func(next entschema.Differ) entschema.Differ {
		return entschema.DiffFunc(func(current, desired *atlas.Schema) ([]atlas.Change, error) {
			changes, err := next.Diff(current, desired)
			if err != nil {
				return nil, err
			}
			return additive(d, changes, indexes, fixed, p), nil
		})
	}
	if err := migrate.NewSchema(entsql.OpenDB(ed, db)).WriteTo(ctx, &buf, entschema.WithDiffHook(hook)); err != nil {
		return nil, fmt.Errorf("migrate: plan adoption: %w", err)
	}
	return Statements(buf.String()), nil
}

// additive keeps the additions and widenings of changes: new tables and
// columns and widened columns (indexes false), or new indexes (indexes
// true). What it leaves out of theirs is noted in p.
func additive(d string, changes []atlas.Change, indexes bool, fixed map[string]bool, p *AdoptionPlan) []atlas.Change {
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
					if indexes {
						continue
					}
					if fixed[c.T.Name+"."+tc.From.Name] {
						keep("%s.%s: their type is kept (a generated column is computed from it)", c.T.Name, tc.From.Name)
						continue
					}
					if w := widening(d, tc); w != nil {
						kept = append(kept, w)
					} else {
						keep("%s.%s: their definition is kept (ours would narrow or change it)", c.T.Name, tc.From.Name)
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

// generatedFrom lists, as "table.column", the columns PostgreSQL's
// generated columns are computed from: their type cannot change.
func generatedFrom(ctx context.Context, db *sql.DB, d string) (map[string]bool, error) {
	out := map[string]bool{}
	if d != Postgres {
		return out, nil
	}
	rows, err := db.QueryContext(ctx, "SELECT table_name, column_name FROM information_schema.column_column_usage WHERE table_schema = current_schema()")
	if err != nil {
		return nil, fmt.Errorf("migrate: inspect generated columns: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			return nil, err
		}
		out[t+"."+c] = true
	}
	return out, rows.Err()
}

// widening returns m reduced to what widens the column, or nil: the type
// only where ours holds everything theirs does, NULL kept where they allow
// it, their default kept where ours has none, their attributes (charset,
// collation) kept. Primary keys are theirs.
func widening(d string, m *atlas.ModifyColumn) *atlas.ModifyColumn {
	if m.From.Name == "id" {
		return nil
	}
	to := *m.To
	typ := *m.To.Type
	to.Type = &typ
	to.Attrs = m.From.Attrs
	if !widens(d, m.From.Type.Type, m.To.Type.Type) {
		typ.Type, typ.Raw = m.From.Type.Type, m.From.Type.Raw
	}
	if m.From.Type.Null {
		typ.Null = true
	}
	if m.From.Default != nil && m.To.Default == nil {
		to.Default = m.From.Default
	}
	var kind atlas.ChangeKind
	if !reflect.DeepEqual(typ.Type, m.From.Type.Type) {
		kind |= atlas.ChangeType
	}
	if typ.Null != m.From.Type.Null {
		kind |= atlas.ChangeNull
	}
	if !reflect.DeepEqual(to.Default, m.From.Default) {
		kind |= atlas.ChangeDefault
	}
	if kind == atlas.NoChange {
		return nil
	}
	return &atlas.ModifyColumn{From: m.From, To: &to, Change: kind}
}

// widens reports whether every value of type from fits type to.
func widens(d string, from, to atlas.Type) bool {
	switch f := from.(type) {
	case *atlas.StringType:
		t, ok := to.(*atlas.StringType)
		return ok && capacity(f) <= capacity(t)
	case *atlas.IntegerType:
		t, ok := to.(*atlas.IntegerType)
		return ok && f.Unsigned == t.Unsigned && intWidth(f.T) <= intWidth(t.T)
	case *atlas.TimeType:
		t, ok := to.(*atlas.TimeType)
		return ok && timeName(f.T) == timeName(t.T) && precision(d, f) <= precision(d, t)
	}
	return false
}

func capacity(s *atlas.StringType) int64 {
	switch strings.ToLower(s.T) {
	case "tinytext":
		return 255
	case "text":
		return 1<<16 - 1 // MySQL's; PostgreSQL's is unbounded but never changes to another type here
	case "mediumtext":
		return 1<<24 - 1
	case "longtext":
		return 1<<32 - 1
	}
	if s.Size == 0 {
		return 1 << 40 // PostgreSQL varchar without a length
	}
	return int64(s.Size)
}

func intWidth(t string) int {
	return map[string]int{"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "integer": 4, "bigint": 8}[strings.ToLower(t)]
}

// precision is a time type's fractional digits; PostgreSQL's default is
// microseconds, MySQL's whole seconds.
func precision(d string, t *atlas.TimeType) int {
	switch {
	case t.Precision != nil:
		return *t.Precision
	case d == Postgres:
		return 6
	}
	return 0
}

func timeName(t string) string {
	switch t = strings.ToLower(t); t {
	case "timestamp with time zone":
		return "timestamptz"
	case "timestamp without time zone":
		return "timestamp"
	}
	return t
}

// placementStatements creates or widens t_cube_artifact_node_placement,
// which ent does not model (upstream's composite primary key).
func placementStatements(ctx context.Context, db *sql.DB, d string) ([]string, error) {
	ok, err := tableExists(ctx, db, d, "t_cube_artifact_node_placement")
	if err != nil {
		return nil, err
	}
	if !ok {
		return []string{placementTable[d]}, nil
	}
	return []string{placementWiden[d]}, nil
}

var placementTable = map[string]string{
	MySQL: "CREATE TABLE `t_cube_artifact_node_placement` (`artifact_id` varchar(128) NOT NULL, `node_id` varchar(128) NOT NULL, " +
		"`node_ip` varchar(256) NOT NULL DEFAULT '', `created_at` bigint NOT NULL DEFAULT 0, PRIMARY KEY (`artifact_id`, `node_id`)) CHARSET utf8mb4 COLLATE utf8mb4_bin",
	Postgres: `CREATE TABLE "t_cube_artifact_node_placement" ("artifact_id" character varying NOT NULL, "node_id" character varying NOT NULL, ` +
		`"node_ip" character varying NOT NULL DEFAULT '', "created_at" bigint NOT NULL DEFAULT 0, PRIMARY KEY ("artifact_id", "node_id"))`,
}

var placementWiden = map[string]string{
	MySQL:    "ALTER TABLE `t_cube_artifact_node_placement` MODIFY COLUMN `node_ip` varchar(256) NOT NULL DEFAULT ''",
	Postgres: `ALTER TABLE "t_cube_artifact_node_placement" ALTER COLUMN "node_ip" TYPE character varying`,
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

// displayNameKey adds upstream's case-folded alias key where the adopted
// database predates it.
var displayNameKey = map[string][]string{
	MySQL: {
		"ALTER TABLE `t_cube_template_definition` ADD COLUMN `display_name_key` varchar(256) " +
			"GENERATED ALWAYS AS (IF(`display_name` = '' OR `kind` <> 'template', NULL, LOWER(`display_name`))) VIRTUAL",
		"ALTER TABLE `t_cube_template_definition` ADD UNIQUE INDEX `idx_template_display_name_key` (`display_name_key`)",
	},
	Postgres: {
		`ALTER TABLE "t_cube_template_definition" ADD COLUMN "display_name_key" character varying ` +
			`GENERATED ALWAYS AS (CASE WHEN "display_name" = '' OR "kind" <> 'template' THEN NULL ELSE LOWER("display_name") END) STORED`,
		`CREATE UNIQUE INDEX "idx_template_display_name_key" ON "t_cube_template_definition" ("display_name_key")`,
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
