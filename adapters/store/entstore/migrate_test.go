package entstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent/migrate/migrations"
)

// TestMigrationsMatchSchema is the drift test: after the committed
// migrations ran, ent finds nothing to change, so the SQL files and the ent
// schema cannot silently diverge.
func TestMigrationsMatchSchema(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := openFresh(t, d)
			ddl, err := migrations.Drift(context.Background(), s.DB(), d)
			if err != nil {
				t.Fatalf("Drift: %v", err)
			}
			if ddl != "" {
				t.Fatalf("the %s migrations differ from the ent schema; run internal/tools/migrationgen to write the next migration. ent would execute:\n%s", d, ddl)
			}
		})
	}
}

// TestDriftDetectsChange checks that the drift test can fail: a dropped
// index and an extra column both show up.
func TestDriftDetectsChange(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := openFresh(t, d)
			ctx := context.Background()
			dropActiveKeyIndex(t, s)
			if _, err := s.DB().ExecContext(ctx, "ALTER TABLE t_cube_template_replica ADD COLUMN surprise integer"); err != nil {
				t.Fatal(err)
			}
			ddl, err := migrations.Drift(ctx, s.DB(), d)
			if err != nil {
				t.Fatalf("Drift: %v", err)
			}
			// SQLite rebuilds the table instead of naming the column.
			if !strings.Contains(ddl, "idx_template_image_active_key") || !strings.Contains(ddl, "t_cube_template_replica") {
				t.Fatalf("Drift missed the dropped index or the extra column:\n%s", ddl)
			}
		})
	}
}

// TestMigrateConcurrentAndIdempotent starts several migrators on one empty
// database at once: exactly one applies each version, none fails, and a
// later run applies nothing.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			dsn := freshDSN(t, d)
			ctx := context.Background()
			const n = 4
			stores := make([]*entstore.Store, n)
			for i := range stores {
				s, err := entstore.Open(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				stores[i] = s
			}
			var wg sync.WaitGroup
			applied := make([][]string, n)
			errs := make([]error, n)
			start := make(chan struct{})
			for i, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					applied[i], errs[i] = s.Migrate(ctx)
				}()
			}
			close(start)
			wg.Wait()
			want, err := migrations.List(d)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for i := range stores {
				if errs[i] != nil {
					t.Fatalf("migrator %d: %v", i, errs[i])
				}
				total += len(applied[i])
			}
			if total != len(want) {
				t.Fatalf("%d concurrent migrators applied %d versions in total, want %d (each once)", n, total, len(want))
			}
			again, err := stores[0].Migrate(ctx)
			if err != nil || len(again) != 0 {
				t.Fatalf("second Migrate applied %v, %v; want nothing", again, err)
			}
			status, err := migrations.Status(ctx, stores[0].DB())
			if err != nil || len(status) != len(want) || status[0].Checksum != want[0].Checksum {
				t.Fatalf("Status = %+v, %v", status, err)
			}
			// The store works after migration.
			if err := stores[1].Templates().CreateDefinition(ctx, &core.Definition{TemplateID: "tpl-after-migrate", RequestJSON: "{}"}); err != nil {
				t.Fatalf("store after migration: %v", err)
			}
		})
	}
}

// TestMigrateRefusesChangedChecksum: an applied migration whose file no
// longer matches its recorded checksum stops Migrate.
func TestMigrateRefusesChangedChecksum(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := openFresh(t, d)
			ctx := context.Background()
			if _, err := s.DB().ExecContext(ctx, "UPDATE "+migrations.Table+" SET checksum = 'edited' WHERE version = '0001'"); err != nil {
				t.Fatal(err)
			}
			_, err := s.Migrate(ctx)
			if err == nil || !strings.Contains(err.Error(), "changed after it was applied") {
				t.Fatalf("Migrate with a changed checksum = %v, want a refusal", err)
			}
		})
	}
}

func TestStatements(t *testing.T) {
	got := migrations.Statements("-- comment\nCREATE TABLE a (\n  x int,\n  y int\n);\n\nCREATE INDEX i ON a (x);\n-- tail\nDROP TABLE b")
	want := []string{"CREATE TABLE a (\n  x int,\n  y int\n)", "CREATE INDEX i ON a (x)", "DROP TABLE b"}
	if len(got) != len(want) {
		t.Fatalf("Statements = %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("Statements[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestEmbeddedMigrations(t *testing.T) {
	for _, d := range dialects {
		ms, err := migrations.List(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 || ms[0].Version != "0001" {
			t.Fatalf("%s: migrations %+v, want 0001 first", d, ms)
		}
		for i, m := range ms {
			if len(migrations.Statements(m.SQL)) == 0 {
				t.Fatalf("%s/%s has no statements", d, m.Name)
			}
			if i > 0 && m.Version <= ms[i-1].Version {
				t.Fatalf("%s: versions out of order", d)
			}
		}
	}
	if _, err := migrations.List("oracle"); err == nil {
		t.Fatal("List(oracle) did not fail")
	}
}
