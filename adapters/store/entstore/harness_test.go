package entstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/internal/testenv"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/storetest"
)

// dialects lists the databases every store test runs against.
var dialects = []string{"sqlite", "mysql", "postgres"}

// server is where fresh databases of one dialect are made: a directory for
// SQLite, the DSN of a server (CUBE_TEST_MYSQL_DSN, CUBE_TEST_POSTGRES_DSN)
// for the others.
type server struct {
	dialect string
	base    string // the server's DSN; empty for SQLite
	dir     string // SQLite only
}

// serverFor returns the dialect's server, skipping the test (failing it
// when CUBE_TEST_REQUIRE_SERVERS=1) if it is not configured.
func serverFor(t testing.TB, dialect string) server {
	t.Helper()
	switch dialect {
	case "sqlite":
		return server{dialect: dialect, dir: t.TempDir()}
	case "mysql":
		return server{dialect: dialect, base: testenv.Get(t, testenv.MySQLDSN)}
	case "postgres":
		return server{dialect: dialect, base: testenv.Get(t, testenv.PostgresDSN)}
	}
	t.Fatalf("unknown dialect %s", dialect)
	return server{}
}

// create makes a new, empty database and returns its DSN and how to drop it.
func (sv server) create(ctx context.Context) (dsn string, drop func() error, err error) {
	name := "cube_t_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	switch sv.dialect {
	case "sqlite":
		return "sqlite://" + filepath.Join(sv.dir, name+".db"), func() error { return nil }, nil
	case "mysql":
		cfg, err := mysql.ParseDSN(sv.base)
		if err != nil {
			return "", nil, fmt.Errorf("parse %s: %w", testenv.MySQLDSN, err)
		}
		// A case-insensitive database default on purpose: the tables must
		// bring their own binary collation for 'Foo' and 'foo' to differ.
		drop, err := admin(ctx, "mysql", sv.base, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", "DROP DATABASE IF EXISTS "+name)
		if err != nil {
			return "", nil, err
		}
		cfg.DBName = name
		return cfg.FormatDSN(), drop, nil
	case "postgres":
		u, err := url.Parse(sv.base)
		if err != nil {
			return "", nil, fmt.Errorf("parse %s: %w", testenv.PostgresDSN, err)
		}
		drop, err := admin(ctx, "pgx", sv.base, "CREATE DATABASE "+name, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		if err != nil {
			return "", nil, err
		}
		u.Path = "/" + name
		return u.String(), drop, nil
	}
	return "", nil, fmt.Errorf("unknown dialect %s", sv.dialect)
}

// admin runs create on the server of base and returns the matching drop.
func admin(ctx context.Context, driver, base, create, drop string) (func() error, error) {
	exec := func(ctx context.Context, q string) error {
		db, err := sql.Open(driver, base)
		if err != nil {
			return err
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		return nil
	}
	if err := exec(ctx, create); err != nil {
		return nil, err
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return exec(ctx, drop)
	}, nil
}

// openMigrated opens the store on dsn and migrates it.
func openMigrated(ctx context.Context, dsn string) (*entstore.Store, error) {
	s, err := entstore.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := s.Migrate(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return s, nil
}

// freshDSN returns the DSN of a new, empty database of the dialect, dropped
// when the test ends.
func freshDSN(t testing.TB, dialect string) string {
	t.Helper()
	dsn, drop, err := serverFor(t, dialect).create(context.Background())
	if err != nil {
		t.Fatalf("fresh %s database: %v", dialect, err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("drop %s database: %v", dialect, err)
		}
	})
	return dsn
}

// openFresh opens a migrated store on a fresh database.
func openFresh(t testing.TB, dialect string) (*entstore.Store, string) {
	t.Helper()
	dsn := freshDSN(t, dialect)
	s, err := openMigrated(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dialect, err)
	}
	// Registered after the database's drop, so it runs before it.
	t.Cleanup(func() { _ = s.Close() })
	return s, dsn
}

// harness makes every store on a database of its own and drops them all on
// Close.
type harness struct {
	t  testing.TB
	sv server

	mu      sync.Mutex
	closers []func() error // run in reverse order
}

func (h *harness) MakeStore(ctx context.Context) (ports.Store, error) {
	dsn, drop, err := h.sv.create(ctx)
	if err != nil {
		return nil, err
	}
	h.onClose(drop)
	s, err := openMigrated(ctx, dsn)
	if err != nil {
		return nil, err
	}
	h.onClose(s.Close) // Close is idempotent, so the suite may close it first
	return s, nil
}

func (h *harness) onClose(fn func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closers = append(h.closers, fn)
}

func (h *harness) Close() {
	h.mu.Lock()
	closers := h.closers
	h.closers = nil
	h.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		errs = append(errs, closers[i]())
	}
	if err := errors.Join(errs...); err != nil {
		h.t.Errorf("harness close: %v", err)
	}
}

func TestConformance(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			storetest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (storetest.Harness, error) {
				return &harness{t: t, sv: serverFor(t, d)}, nil
			})
		})
	}
}
