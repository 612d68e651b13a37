package entstore_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
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

// freshDSN returns the DSN of a new, empty database of the dialect, dropped
// when the test ends.
func freshDSN(t testing.TB, dialect string) string {
	t.Helper()
	name := "cube_t_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	switch dialect {
	case "sqlite":
		return "sqlite://" + filepath.Join(t.TempDir(), name+".db")
	case "mysql":
		base := testenv.Get(t, testenv.MySQLDSN)
		cfg, err := mysql.ParseDSN(base)
		if err != nil {
			t.Fatalf("parse %s: %v", testenv.MySQLDSN, err)
		}
		// A case-insensitive database default on purpose: the tables must
		// bring their own binary collation for 'Foo' and 'foo' to differ.
		admin(t, "mysql", base, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", "DROP DATABASE IF EXISTS "+name)
		cfg.DBName = name
		return cfg.FormatDSN()
	case "postgres":
		base := testenv.Get(t, testenv.PostgresDSN)
		u, err := url.Parse(base)
		if err != nil {
			t.Fatalf("parse %s: %v", testenv.PostgresDSN, err)
		}
		admin(t, "pgx", base, "CREATE DATABASE "+name, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		u.Path = "/" + name
		return u.String()
	}
	t.Fatalf("unknown dialect %s", dialect)
	return ""
}

// admin runs create on the server of base now and drop at cleanup.
func admin(t testing.TB, driver, base, create, drop string) {
	t.Helper()
	db, err := sql.Open(driver, base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, create); err != nil {
		_ = db.Close()
		t.Fatalf("%s: %v", create, err)
	}
	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, drop); err != nil {
			t.Errorf("%s: %v", drop, err)
		}
	})
}

// openFresh opens a migrated store on a fresh database.
func openFresh(t testing.TB, dialect string) (*entstore.Store, string) {
	t.Helper()
	dsn := freshDSN(t, dialect)
	ctx := context.Background()
	s, err := entstore.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dialect, err)
	}
	// Registered after the database's drop, so it runs before it.
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s: %v", dialect, err)
	}
	return s, dsn
}

type harness struct{ s ports.Store }

func (h harness) Store() ports.Store { return h.s }

func TestConformance(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			storetest.RunConformanceTests(t, func(t *testing.T) storetest.Harness {
				s, _ := openFresh(t, d)
				return harness{s}
			})
		})
	}
}
