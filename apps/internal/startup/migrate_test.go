package startup_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
)

// TestMigratePlanChangesNothing: `migrate --plan` prints the pending
// statements and leaves the database as it was; `migrate` then applies
// them, and a plan after that has nothing to print.
func TestMigratePlanChangesNothing(t *testing.T) {
	ctx := context.Background()
	st, err := entstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "plan.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out bytes.Buffer
	if err := startup.MigrateCommand(ctx, &out, st, true, "DSN", "plan.db"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-- pending: sqlite/0001_init.sql", "CREATE TABLE `t_cube_template_definition`"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("plan output lacks %q:\n%s", want, out.String())
		}
	}
	var n int
	if err := st.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 't_cube_%'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after the plan: %d tables, %v; want none", n, err)
	}
	out.Reset()
	if err := startup.MigrateCommand(ctx, &out, st, false, "DSN", "plan.db"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "applied sqlite migration 0001") {
		t.Fatalf("migrate output: %s", out.String())
	}
	out.Reset()
	if err := startup.MigrateCommand(ctx, &out, st, true, "DSN", "plan.db"); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out.String()) != "-- sqlite schema is up to date" {
		t.Fatalf("plan after migrating: %s", out.String())
	}
}
