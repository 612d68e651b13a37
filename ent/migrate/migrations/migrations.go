package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Dialect names accepted by this package.
const (
	MySQL    = "mysql"
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Table records the applied migrations.
const Table = "cube_schema_migrations"

//go:embed mysql/*.sql postgres/*.sql sqlite/*.sql
var files embed.FS

// Migration is one embedded migration file.
type Migration struct {
	Version  string // "0001"
	Name     string // "0001_init.sql"
	SQL      string
	Checksum string // lowercase hex sha256 of the file
}

// NormalizeDialect maps ent and driver spellings ("sqlite3", "pgx",
// "postgresql") to this package's names.
func NormalizeDialect(d string) (string, error) {
	switch strings.ToLower(d) {
	case "mysql", "mariadb":
		return MySQL, nil
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return "", fmt.Errorf("unknown database dialect %q (want mysql, postgres or sqlite)", d)
}

var fileName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// List returns the dialect's migrations in version order.
func List(dialect string) ([]Migration, error) {
	d, err := NormalizeDialect(dialect)
	if err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(files, d)
	if err != nil {
		return nil, fmt.Errorf("read %s migrations: %w", d, err)
	}
	var out []Migration
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s/%s: name must be NNNN_lowercase_name.sql", d, e.Name())
		}
		b, err := files.ReadFile(path.Join(d, e.Name()))
		if err != nil {
			return nil, err
		}
		if len(out) > 0 && out[len(out)-1].Version == m[1] {
			return nil, fmt.Errorf("migration version %s of %s appears twice", m[1], d)
		}
		sum := sha256.Sum256(b)
		out = append(out, Migration{Version: m[1], Name: e.Name(), SQL: string(b), Checksum: hex.EncodeToString(sum[:])})
	}
	return out, nil // fs.ReadDir sorts by name, which is version order
}

// Statements splits a migration into statements. The rule is simple on
// purpose: a statement ends with ';' at the end of a line, and lines
// starting with "--" are comments.
func Statements(script string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(script, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
		}
		cur.WriteString(strings.TrimRight(line, " \t\r"))
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Applied is a row of cube_schema_migrations.
type Applied struct {
	Version  string
	Checksum string
}

// Migrate applies the dialect's pending migrations to db in order and
// records them. It refuses to run when an applied migration's checksum no
// longer matches its file. Versions recorded in the database but unknown to
// this binary (written by a newer release) are left alone. It returns the
// versions it applied. A database created by upstream's master (its tables,
// not Table) is adopted first, by additions only (see adopt.go); the
// result then starts with Adopted.
func Migrate(ctx context.Context, db *sql.DB, dialect string) ([]string, error) {
	d, err := NormalizeDialect(dialect)
	if err != nil {
		return nil, err
	}
	ms, err := List(d)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	var applied []string
	err = withLock(ctx, conn, d, func() error {
		adopt, err := needsAdoption(ctx, conn, d)
		if err != nil {
			return err
		}
		if adopt {
			if err := runAdoption(ctx, db, conn, d); err != nil {
				return err
			}
			applied = append(applied, Adopted)
		}
		more, err := apply(ctx, conn, d, ms, adopt)
		applied = append(applied, more...)
		return err
	})
	if cerr := conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, sql.ErrConnDone) {
		err = cerr
	}
	return applied, err
}

// withLock runs fn while this process is the only migrator of the database.
func withLock(ctx context.Context, conn *sql.Conn, d string, fn func() error) (err error) {
	switch d {
	case MySQL:
		// GET_LOCK is server-wide and names are limited to 64 characters;
		// the database name keeps migrators of different databases apart.
		const name = "LEFT(CONCAT('cube_migrate.', DATABASE()), 64)"
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+name+", 300)").Scan(&got); err != nil {
			return fmt.Errorf("migrate: GET_LOCK: %w", err)
		}
		if !got.Valid || got.Int64 != 1 {
			return errors.New("migrate: GET_LOCK timed out after 300s; another migrator is running")
		}
		defer func() {
			if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK("+name+")"); rerr != nil {
				// The lock belongs to the session: drop the connection rather
				// than hand a locked session back to the pool.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
		return fn()
	case Postgres:
		// Advisory locks are scoped to the current database.
		const key = 0x63756265_6d696772 // "cubemigr"
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", int64(key)); err != nil {
			return fmt.Errorf("migrate: pg_advisory_lock: %w", err)
		}
		defer func() {
			if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(key)); rerr != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
		return fn()
	default:
		// SQLite has one writer: holding a write transaction for the whole
		// run is the lock, and makes the run atomic as a bonus.
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("migrate: BEGIN IMMEDIATE: %w", err)
		}
		if err := fn(); err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			return err
		}
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			return fmt.Errorf("migrate: commit: %w", err)
		}
		return nil
	}
}

var createTable = map[string]string{
	MySQL: "CREATE TABLE IF NOT EXISTS " + Table + " (version varchar(64) NOT NULL PRIMARY KEY, name varchar(255) NOT NULL, " +
		"checksum char(64) NOT NULL, applied_at datetime(6) NOT NULL) CHARSET utf8mb4 COLLATE utf8mb4_bin",
	Postgres: "CREATE TABLE IF NOT EXISTS " + Table + " (version varchar(64) NOT NULL PRIMARY KEY, name varchar(255) NOT NULL, " +
		"checksum char(64) NOT NULL, applied_at timestamptz NOT NULL)",
	SQLite: "CREATE TABLE IF NOT EXISTS " + Table + " (version text NOT NULL PRIMARY KEY, name text NOT NULL, " +
		"checksum text NOT NULL, applied_at datetime NOT NULL)",
}

func placeholders(d string, n int) string {
	ps := make([]string, n)
	for i := range ps {
		if d == Postgres {
			ps[i] = fmt.Sprintf("$%d", i+1)
		} else {
			ps[i] = "?"
		}
	}
	return strings.Join(ps, ", ")
}

// apply applies the migrations not yet recorded, or, for an adopted
// database (baseline), records them all without running them: the
// adoption brought the schema to what they describe.
func apply(ctx context.Context, conn *sql.Conn, d string, ms []Migration, baseline bool) ([]string, error) {
	if _, err := conn.ExecContext(ctx, createTable[d]); err != nil {
		return nil, fmt.Errorf("migrate: create %s: %w", Table, err)
	}
	done, err := readApplied(ctx, conn)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if sum, ok := done[m.Version]; ok && sum != m.Checksum {
			return nil, fmt.Errorf("migrate: %s/%s was changed after it was applied (checksum %s in the database, %s in the file); restore the file and add a new migration instead",
				d, m.Name, sum, m.Checksum)
		}
	}
	var applied []string
	for _, m := range ms {
		if _, ok := done[m.Version]; ok {
			continue
		}
		if baseline {
			if err := record(ctx, conn, d, m); err != nil {
				return applied, err
			}
			continue
		}
		if err := applyOne(ctx, conn, d, m); err != nil {
			return applied, err
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

func readApplied(ctx context.Context, conn *sql.Conn) (map[string]string, error) {
	rows, err := conn.QueryContext(ctx, "SELECT version, checksum FROM "+Table)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", Table, err)
	}
	defer rows.Close()
	done := map[string]string{}
	for rows.Next() {
		var v, c string
		if err := rows.Scan(&v, &c); err != nil {
			return nil, err
		}
		done[v] = c
	}
	return done, rows.Err()
}

// execer is what applyOne writes through: the pinned connection, or a
// transaction on it where DDL is transactional.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func applyOne(ctx context.Context, conn *sql.Conn, d string, m Migration) error {
	var ex execer = conn
	var tx *sql.Tx
	if d == Postgres {
		// PostgreSQL DDL is transactional: a failed file leaves nothing
		// behind. (MySQL commits each DDL statement; SQLite already runs
		// inside the BEGIN IMMEDIATE of withLock.)
		var err error
		if tx, err = conn.BeginTx(ctx, nil); err != nil {
			return fmt.Errorf("migrate: begin: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		ex = tx
	}
	for i, stmt := range Statements(m.SQL) {
		if _, err := ex.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: %s/%s statement %d: %w", d, m.Name, i+1, err)
		}
	}
	if err := record(ctx, ex, d, m); err != nil {
		return err
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate: commit %s/%s: %w", d, m.Name, err)
		}
	}
	return nil
}

// record notes m as applied.
func record(ctx context.Context, ex execer, d string, m Migration) error {
	ins := "INSERT INTO " + Table + " (version, name, checksum, applied_at) VALUES (" + placeholders(d, 4) + ")"
	if _, err := ex.ExecContext(ctx, ins, m.Version, m.Name, m.Checksum, time.Now().UTC()); err != nil {
		return fmt.Errorf("migrate: record %s/%s: %w", d, m.Name, err)
	}
	return nil
}

// Status lists the versions recorded in db, sorted.
func Status(ctx context.Context, db *sql.DB) ([]Applied, error) {
	rows, err := db.QueryContext(ctx, "SELECT version, checksum FROM "+Table)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", Table, err)
	}
	defer rows.Close()
	var out []Applied
	for rows.Next() {
		var a Applied
		if err := rows.Scan(&a.Version, &a.Checksum); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Applied) int { return strings.Compare(a.Version, b.Version) })
	return out, rows.Err()
}
