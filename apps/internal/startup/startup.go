// Package startup holds the start-up steps both services share: opening the
// metadata store (creating a SQLite file's directory), choosing the lock
// adapter for its dialect, applying the schema migrations, and logging the
// effective settings.
package startup

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/lock/mysqllock"
	"github.com/cubesandbox/templatecenter/adapters/lock/pglock"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/ports"
)

// Locker returns the cross-process lock adapter for the store's database:
// GET_LOCK on MySQL/MariaDB, advisory locks on PostgreSQL. SQLite is the
// single-machine mode, where one process holds the file, so in-process
// locks suffice.
func Locker(st *entstore.Store) ports.Locker {
	switch st.Dialect() {
	case "mysql":
		return mysqllock.New(st.DB())
	case "postgres":
		return pglock.New(st.DB())
	}
	return memlock.New()
}

// Migrate applies pending schema migrations and logs what it did. dsn is
// the store's DSN, so that an error can name a SQLite file.
func Migrate(ctx context.Context, st *entstore.Store, dsn string, log *slog.Logger) error {
	applied, err := st.Migrate(ctx)
	if err != nil {
		if file := sqlitePath(dsn); file != "" {
			return fmt.Errorf("migrate SQLite database %s (is its directory writable?): %w", file, err)
		}
		return fmt.Errorf("migrate %s store: %w", st.Dialect(), err)
	}
	log.Info("schema ready", "dialect", st.Dialect(), "applied", applied)
	return nil
}
