package startup

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSQLitePath(t *testing.T) {
	cases := map[string]string{
		"sqlite:///var/lib/x/tc.db":         "/var/lib/x/tc.db",
		"sqlite://rel/tc.db?_pragma=x":      "rel/tc.db",
		"file:/tmp/a.db":                    "/tmp/a.db",
		"file:ent?mode=memory&cache=shared": "",
		"mysql://u:p@tcp(h:3306)/db":        "",
		"postgres://u@h/db":                 "",
	}
	for dsn, want := range cases {
		if got := sqlitePath(dsn); got != want {
			t.Errorf("sqlitePath(%q) = %q, want %q", dsn, got, want)
		}
	}
}

// TestOpenStoreCreatesTheSQLiteDirectory: the README's first DSN works on
// a machine where its directory does not exist yet, and a path that
// cannot be created is named in the error.
func TestOpenStoreCreatesTheSQLiteDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a", "b", "tc.db")
	dsn := "sqlite://" + file
	st, err := OpenStore(t.Context(), "CUBE_TEMPLATE_CENTER_DB_DSN", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := Migrate(t.Context(), st, dsn, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no database file: %v", err)
	}

	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(blocker, "tc.db")
	_, err = OpenStore(t.Context(), "CUBE_TEMPLATE_CENTER_DB_DSN", "sqlite://"+bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "CUBE_TEMPLATE_CENTER_DB_DSN") {
		t.Fatalf("err = %v, want one naming %s and the setting", err, bad)
	}
}
