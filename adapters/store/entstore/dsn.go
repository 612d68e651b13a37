package entstore

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/cubesandbox/templatecenter/ent/migrate/migrations"
)

// Target is a parsed DSN: the database/sql driver, the DSN handed to it and
// the dialect (migrations.MySQL, Postgres or SQLite).
type Target struct {
	Driver  string
	DSN     string
	Dialect string
}

// sqlitePragmas are added to every SQLite DSN unless it sets them itself:
// foreign keys on (ent's migrator insists), a 10 s busy wait so concurrent
// writers queue instead of failing, and WAL so readers never block writers.
var sqlitePragmas = []string{"foreign_keys(1)", "busy_timeout(10000)", "journal_mode(WAL)"}

// ParseDSN picks the dialect from the DSN's form:
//
//	sqlite://path/to/file.db          SQLite (modernc.org/sqlite)
//	file:path/to/file.db?...          SQLite
//	postgres://user:pass@host/db?...  PostgreSQL (pgx); also postgresql://
//	mysql://user:pass@tcp(host:port)/db?...  MySQL/MariaDB
//	mysql://user:pass@host:port/db?...       the same in URL form
//	mariadb://...                     the same as mysql://
//	user:pass@tcp(host:port)/db?...   a bare go-sql-driver DSN
//
// Any other scheme:// is refused by name: go-sql-driver would otherwise
// read "scheme" as the user name.
func ParseDSN(dsn string) (Target, error) {
	if scheme, rest, ok := strings.Cut(dsn, "://"); ok && scheme == "mariadb" {
		dsn = "mysql://" + rest
	}
	switch {
	case dsn == "":
		return Target{}, fmt.Errorf("database dsn is empty")
	case strings.HasPrefix(dsn, "sqlite://"):
		p, q, _ := strings.Cut(strings.TrimPrefix(dsn, "sqlite://"), "?")
		if p == "" {
			return Target{}, fmt.Errorf("sqlite dsn %q names no file", dsn)
		}
		return sqliteTarget(escapeSQLitePath(p), q)
	case strings.HasPrefix(dsn, "file:"):
		p, q, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
		return sqliteTarget(p, q)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return Target{Driver: "pgx", DSN: dsn, Dialect: migrations.Postgres}, nil
	case strings.HasPrefix(dsn, "mysql://"):
		rest := strings.TrimPrefix(dsn, "mysql://")
		if strings.Contains(rest, "(") {
			return mysqlTarget(rest) // mysql://user:pass@tcp(host:port)/db
		}
		return mysqlURLTarget(dsn) // mysql://user:pass@host:port/db
	default:
		if scheme, _, ok := strings.Cut(dsn, "://"); ok && !strings.ContainsAny(scheme, "@:/(") {
			return Target{}, fmt.Errorf("database dsn: unknown scheme %q (want sqlite://, postgres://, mysql:// or mariadb://)", scheme)
		}
		if _, err := mysql.ParseDSN(dsn); err == nil && strings.Contains(dsn, "/") {
			return mysqlTarget(dsn)
		}
		return Target{}, fmt.Errorf("database dsn: unknown form (want sqlite://path, file:path, postgres://..., mysql://..., mariadb://... or a go-sql-driver dsn)")
	}
}

// escapeSQLitePath escapes what an SQLite URI would otherwise read as
// delimiters.
func escapeSQLitePath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

func sqliteTarget(path, query string) (Target, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return Target{}, fmt.Errorf("sqlite dsn query: %w", err)
	}
	have := map[string]bool{}
	for _, p := range q["_pragma"] {
		name, _, _ := strings.Cut(p, "(")
		have[strings.ToLower(strings.TrimSpace(name))] = true
	}
	for _, p := range sqlitePragmas {
		name, _, _ := strings.Cut(p, "(")
		if !have[name] {
			q.Add("_pragma", p)
		}
	}
	// Writers take the lock when the transaction begins, not at their first
	// write: a read-then-write transaction can then never fail with
	// SQLITE_BUSY_SNAPSHOT halfway.
	if q.Get("_txlock") == "" {
		q.Set("_txlock", "immediate")
	}
	// A sortable text format, so updated_at comparisons work as strings.
	if q.Get("_time_format") == "" {
		q.Set("_time_format", "sqlite")
	}
	return Target{Driver: "sqlite", DSN: "file:" + path + "?" + q.Encode(), Dialect: migrations.SQLite}, nil
}

func mysqlTarget(dsn string) (Target, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return Target{}, fmt.Errorf("mysql dsn: %w", err)
	}
	// Times are read as time.Time and written in UTC; the store keeps every
	// timestamp in UTC so compare-and-set comparisons are exact.
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// A query with arguments is otherwise a prepared statement: prepare,
	// execute and close, three round trips where one does. The driver
	// escapes the arguments itself; it refuses to for the few multi-byte
	// character sets where that is unsafe, and an explicit
	// interpolateParams=false is kept.
	if !strings.Contains(dsn, "interpolateParams=") {
		cfg.InterpolateParams = true
		if _, err := mysql.ParseDSN(cfg.FormatDSN()); err != nil {
			cfg.InterpolateParams = false
		}
	}
	return Target{Driver: "mysql", DSN: cfg.FormatDSN(), Dialect: migrations.MySQL}, nil
}

// mysqlURLTarget reads the URL form of a MySQL DSN.
func mysqlURLTarget(dsn string) (Target, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return Target{}, fmt.Errorf("mysql dsn: %w", err)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.Addr == "" || cfg.DBName == "" {
		return Target{}, fmt.Errorf("mysql dsn %s: need a host and a database name", u.Redacted())
	}
	// Query parameters mean what they mean in the go-sql-driver form.
	parsed, err := mysql.ParseDSN("/x?" + u.RawQuery)
	if err != nil {
		return Target{}, fmt.Errorf("mysql dsn parameters: %w", err)
	}
	parsed.User, parsed.Passwd, parsed.Net, parsed.Addr, parsed.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
	return mysqlTarget(parsed.FormatDSN())
}

// OpenDB opens the connection pool of a DSN without touching the schema.
func OpenDB(dsn string) (*sql.DB, Target, error) {
	t, err := ParseDSN(dsn)
	if err != nil {
		return nil, t, err
	}
	db, err := sql.Open(t.Driver, t.DSN)
	if err != nil {
		return nil, t, fmt.Errorf("open %s database: %w", t.Dialect, err)
	}
	if t.Dialect != migrations.SQLite {
		// Bounded so that many processes sharing a server stay well below
		// its connection limit.
		db.SetMaxOpenConns(32)
		db.SetMaxIdleConns(16)
		db.SetConnMaxLifetime(30 * time.Minute)
	}
	return db, t, nil
}
