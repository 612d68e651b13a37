package startup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
)

// sqlitePath returns the file a SQLite DSN names ("" for other databases
// and in-memory SQLite).
func sqlitePath(dsn string) string {
	var p string
	switch {
	case strings.HasPrefix(dsn, "sqlite://"):
		p = strings.TrimPrefix(dsn, "sqlite://")
	case strings.HasPrefix(dsn, "file:"):
		p = strings.TrimPrefix(dsn, "file:")
	default:
		return ""
	}
	p, q, _ := strings.Cut(p, "?")
	if p == "" || p == ":memory:" || strings.Contains(q, "mode=memory") {
		return ""
	}
	return p
}

// OpenStore opens the metadata store named by dsn (setting names the
// variable it came from, for errors) and applies the schema migrations.
// For SQLite the file's directory is created first, and every error names
// the file: SQLite itself only says "unable to open database file".
func OpenStore(ctx context.Context, setting, dsn string) (*entstore.Store, error) {
	file := sqlitePath(dsn)
	if file != "" {
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return nil, fmt.Errorf("%s: create the directory of SQLite database %s: %w", setting, file, err)
		}
	}
	st, err := entstore.Open(ctx, dsn)
	if err != nil {
		if file != "" {
			return nil, fmt.Errorf("%s: open SQLite database %s: %w", setting, file, err)
		}
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	return st, nil
}
