package entstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent/migrate/migrations"
)

func TestParseDSN(t *testing.T) {
	cases := []struct {
		dsn, driver, dialect string
		contains             []string
	}{
		{"sqlite:///var/lib/cube/meta.db", "sqlite", migrations.SQLite,
			[]string{"file:/var/lib/cube/meta.db?", "foreign_keys%281%29", "busy_timeout%2810000%29", "journal_mode%28WAL%29", "_txlock=immediate"}},
		{"sqlite://rel/meta.db?_pragma=busy_timeout(50)", "sqlite", migrations.SQLite,
			[]string{"file:rel/meta.db?", "busy_timeout%2850%29", "foreign_keys%281%29"}},
		{"file:/tmp/x.db?mode=rwc", "sqlite", migrations.SQLite, []string{"file:/tmp/x.db?", "mode=rwc", "journal_mode%28WAL%29"}},
		{"sqlite:///tmp/a#b%c.db?mode=rwc", "sqlite", migrations.SQLite, []string{"file:/tmp/a%23b%25c.db?", "mode=rwc"}},
		{"postgres://u:p@h:5432/db?sslmode=disable", "pgx", migrations.Postgres, []string{"postgres://u:p@h:5432/db"}},
		{"postgresql://u@h/db", "pgx", migrations.Postgres, nil},
		{"mysql://u:p@tcp(h:3306)/db?charset=utf8mb4", "mysql", migrations.MySQL, []string{"u:p@tcp(h:3306)/db?", "parseTime=true"}},
		{"u:p@tcp(h:3306)/db", "mysql", migrations.MySQL, []string{"parseTime=true"}},
		{"mysql://u:p%40ss@h:3306/db?timeout=5s", "mysql", migrations.MySQL, []string{"u:p@ss@tcp(h:3306)/db?", "timeout=5s", "parseTime=true"}},
		// One round trip per query, not prepare + execute + close...
		{"u:p@tcp(h:3306)/db?charset=utf8mb4", "mysql", migrations.MySQL, []string{"interpolateParams=true"}},
		// ...unless the character set makes client-side escaping unsafe.
		{"u:p@tcp(h:3306)/db?collation=gbk_chinese_ci", "mysql", migrations.MySQL, []string{"collation=gbk_chinese_ci"}},
	}
	for _, c := range cases {
		got, err := entstore.ParseDSN(c.dsn)
		if err != nil {
			t.Fatalf("ParseDSN(%q): %v", c.dsn, err)
		}
		if got.Driver != c.driver || got.Dialect != c.dialect {
			t.Fatalf("ParseDSN(%q) = %s/%s, want %s/%s", c.dsn, got.Driver, got.Dialect, c.driver, c.dialect)
		}
		for _, s := range c.contains {
			if !strings.Contains(got.DSN, s) {
				t.Fatalf("ParseDSN(%q).DSN = %q, lacks %q", c.dsn, got.DSN, s)
			}
		}
		if strings.Contains(c.dsn, "gbk") && strings.Contains(got.DSN, "interpolateParams=true") {
			t.Fatalf("ParseDSN interpolates under an unsafe collation: %s", got.DSN)
		}
		if strings.Contains(c.dsn, "busy_timeout(50)") && strings.Contains(got.DSN, "busy_timeout%2810000%29") {
			t.Fatalf("ParseDSN overrode the caller's busy_timeout: %s", got.DSN)
		}
	}
	for _, bad := range []string{"", "sqlite://", "oracle://x", "just words", "mysql://u@h:3306/"} {
		if _, err := entstore.ParseDSN(bad); err == nil {
			t.Fatalf("ParseDSN(%q) accepted", bad)
		}
	}
	// mariadb:// is mysql://: the user is u, not "mariadb".
	for _, dsn := range []string{"mariadb://u:p@tcp(h:3306)/db", "mariadb://u:p@h:3306/db"} {
		if got, err := entstore.ParseDSN(dsn); err != nil || !strings.HasPrefix(got.DSN, "u:p@tcp(h:3306)/db?") {
			t.Fatalf("ParseDSN(%q) = %q, %v; want user u", dsn, got.DSN, err)
		}
	}
	// An unknown scheme is named, never read as a user name.
	if _, err := entstore.ParseDSN("maria://u:p@tcp(h:3306)/db"); err == nil || !strings.Contains(err.Error(), `unknown scheme "maria"`) {
		t.Fatalf("ParseDSN(maria://...) = %v, want the scheme named", err)
	}
}

// TestStoredRowsAreValidated: a row with a status this service does not
// know is an error on read, not a silently wrong value.
func TestStoredRowsAreValidated(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := openFresh(t, d)
			ctx := context.Background()
			j := &core.Job{JobID: "job-bogus", TemplateID: "tpl-bogus", AttemptNo: 1, Status: core.JobPending}
			if err := s.Jobs().Create(ctx, j); err != nil {
				t.Fatal(err)
			}
			a := &core.Artifact{ArtifactID: "rfs-bogus", Fingerprint: "fp-bogus", Status: core.ArtifactReady}
			if err := s.Artifacts().Create(ctx, a); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				"UPDATE t_cube_template_image_job SET status = 'ZOMBIE'",
				"UPDATE t_cube_rootfs_artifact SET status = 'ORPHANED'",
			} {
				if _, err := s.DB().ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			_, err := s.Jobs().Get(ctx, j.JobID)
			if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "ZOMBIE") {
				t.Fatalf("Get of a job with status ZOMBIE = %v", err)
			}
			_, err = s.Jobs().Update(ctx, j.JobID, func(*core.Job) error { t.Fatal("fn called on an invalid row"); return nil })
			if err == nil {
				t.Fatal("Update of an invalid row succeeded")
			}
			_, err = s.Artifacts().Get(ctx, a.ArtifactID)
			if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "ORPHANED") {
				t.Fatalf("Get of an artifact with status ORPHANED = %v", err)
			}
			// Creating an artifact with an unknown status is refused up front.
			err = s.Artifacts().Create(ctx, &core.Artifact{ArtifactID: "rfs-x", Fingerprint: "fp-x", Status: "NOPE"})
			if !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("Create with status NOPE = %v", err)
			}
		})
	}
}

// TestUpdatedAtMicroseconds: the store keeps microseconds on every dialect,
// which the compare-and-set relies on.
func TestUpdatedAtMicroseconds(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := openFresh(t, d)
			ctx := context.Background()
			j := &core.Job{JobID: "job-us", TemplateID: "tpl-us", AttemptNo: 1, Status: core.JobPending}
			if err := s.Jobs().Create(ctx, j); err != nil {
				t.Fatal(err)
			}
			prev := j.UpdatedAt
			for i := 0; i < 50; i++ {
				got, err := s.Jobs().Update(ctx, j.JobID, func(*core.Job) error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				if !got.UpdatedAt.After(prev) {
					t.Fatalf("update %d: %v not after %v", i, got.UpdatedAt, prev)
				}
				prev = got.UpdatedAt
			}
			stored, err := s.Jobs().Get(ctx, j.JobID)
			if err != nil || !stored.UpdatedAt.Equal(prev) {
				t.Fatalf("stored UpdatedAt %v, want %v (%v)", stored.UpdatedAt, prev, err)
			}
		})
	}
}

// TestCoarserTimestampColumns: on columns that keep whole seconds (an
// adopted upstream database keeps its datetime columns as they are), the
// store stamps in whole seconds, updated_at still steps forward on every
// write, and what is read back equals what was written.
func TestCoarserTimestampColumns(t *testing.T) {
	alter := map[string][]string{
		"mysql": {"ALTER TABLE t_cube_template_image_job MODIFY created_at datetime NOT NULL, MODIFY updated_at datetime NOT NULL"},
		"postgres": {
			"ALTER TABLE t_cube_template_image_job ALTER COLUMN created_at TYPE timestamptz(0), ALTER COLUMN updated_at TYPE timestamptz(0)",
		},
	}
	for _, d := range []string{"mysql", "postgres"} {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			first, dsn := openFresh(t, d)
			for _, q := range alter[d] {
				if _, err := first.DB().Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			s, err := openMigrated(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			if now, _ := s.Now(ctx); now.Nanosecond() != 0 {
				t.Fatalf("Now = %v, want whole seconds", now)
			}
			j := &core.Job{JobID: "job-s", TemplateID: "tpl-s", AttemptNo: 1, Status: core.JobPending}
			if err := s.Jobs().Create(ctx, j); err != nil {
				t.Fatal(err)
			}
			prev := j.UpdatedAt
			for i := 0; i < 3; i++ {
				got, err := s.Jobs().Update(ctx, j.JobID, func(*core.Job) error { return nil })
				if err != nil {
					t.Fatalf("update %d: %v", i, err)
				}
				if !got.UpdatedAt.After(prev) {
					t.Fatalf("update %d: %v not after %v", i, got.UpdatedAt, prev)
				}
				prev = got.UpdatedAt
			}
			stored, err := s.Jobs().Get(ctx, j.JobID)
			if err != nil || !stored.UpdatedAt.Equal(prev) {
				t.Fatalf("stored UpdatedAt %v, want %v (%v)", stored.UpdatedAt, prev, err)
			}
		})
	}
}

// TestNowIsTheDatabasesClock: the store stamps rows with the database's
// clock, so hosts with skewed clocks agree on ages.
func TestNowIsTheDatabasesClock(t *testing.T) {
	for _, dialect := range []string{"mysql", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s, _ := openFresh(t, dialect)
			q := map[string]string{"mysql": "SELECT UNIX_TIMESTAMP(NOW(6))", "postgres": "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8"}[dialect]
			var epoch float64
			if err := s.DB().QueryRow(q).Scan(&epoch); err != nil {
				t.Fatal(err)
			}
			now, err := s.Now(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			db := time.Unix(0, int64(epoch*1e9))
			if d := now.Sub(db); d < -time.Second || d > time.Second {
				t.Fatalf("store clock %v differs from the database's %v by %v", now, db, d)
			}
		})
	}
}
