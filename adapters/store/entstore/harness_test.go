package entstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/storetest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// dialects lists the databases every store test runs against.
var dialects = []string{"sqlite", "mysql", "postgres"}

// server is where fresh databases of one dialect are made (see
// testenv.Database); dir holds SQLite files.
type server struct {
	t       testing.TB
	dialect string
	dir     string
}

// serverFor returns the dialect's server, skipping the test (failing it
// when CUBE_TEST_REQUIRE_SERVERS=1) if it is not configured.
func serverFor(t testing.TB, dialect string) server {
	t.Helper()
	switch dialect {
	case "mysql":
		testenv.Get(t, testenv.MySQLDSN)
	case "postgres":
		testenv.Get(t, testenv.PostgresDSN)
	}
	return server{t: t, dialect: dialect, dir: t.TempDir()}
}

// create makes a new, empty database and returns its DSN and how to drop it.
func (sv server) create(ctx context.Context) (dsn string, drop func() error, err error) {
	return testenv.Database(ctx, sv.t, sv.dialect, sv.dir)
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
