// Package startup holds the start-up steps both services share: opening the
// metadata store (creating a SQLite file's directory), choosing the lock
// adapter for its dialect, applying the schema migrations, and logging the
// effective settings.
package startup

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/lock/mysqllock"
	"github.com/cubesandbox/templatecenter/adapters/lock/pglock"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/ent/migrate/migrations"
	"github.com/cubesandbox/templatecenter/ports"
)

// LockPoolSize bounds the connections locks may hold. Every held
// MySQL/PostgreSQL lock pins one connection (and the first waiter for a
// name, while the pool can spare one), so locks get a pool of their own:
// they can then never take the connections the store's queries need.
const LockPoolSize = 128

// Locker returns the cross-process lock adapter for the store's database:
// GET_LOCK on MySQL/MariaDB, advisory locks on PostgreSQL, each on its own
// connection pool opened from dsn (closed by Shutdown). SQLite is the
// single-machine mode, where one process holds the file, so in-process
// locks suffice.
func Locker(st *entstore.Store, dsn string) (ports.Locker, error) {
	switch st.Dialect() {
	case "mysql", "postgres":
	default:
		return memlock.New(), nil
	}
	db, _, err := entstore.OpenDB(dsn)
	if err != nil {
		return nil, fmt.Errorf("lock connection pool: %w", err)
	}
	db.SetMaxOpenConns(LockPoolSize)
	db.SetMaxIdleConns(16)
	if st.Dialect() == "mysql" {
		return &poolLocker{Locker: mysqllock.New(db), db: db}, nil
	}
	return &poolLocker{Locker: pglock.New(db), db: db}, nil
}

// poolLocker is a Locker with the pool it owns.
type poolLocker struct {
	ports.Locker
	db *sql.DB
}

// Shutdown closes the lock pool (samber/do calls it when the injector shuts
// down).
func (l *poolLocker) Shutdown() error { return l.db.Close() }

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

// Unwrap returns the adapter behind the pool.
func (l *poolLocker) Unwrap() ports.Locker { return l.Locker }

// MigrateCommand runs the migrate subcommand on st: with plan, it prints
// (as SQL, notes as comments) what a migration would run and changes
// nothing; otherwise it migrates and prints what was applied. dsnVar and
// dsn name the database in errors (its password redacted by the caller).
func MigrateCommand(ctx context.Context, out io.Writer, st *entstore.Store, plan bool, dsnVar, dsn string) error {
	if plan {
		stmts, notes, err := st.Plan(ctx)
		if err != nil {
			return fmt.Errorf("plan %s migration (%s %s): %w", st.Dialect(), dsnVar, dsn, err)
		}
		for _, n := range notes {
			fmt.Fprintln(out, "-- "+n)
		}
		for _, s := range stmts {
			fmt.Fprintln(out, s+";")
		}
		if len(stmts) == 0 {
			fmt.Fprintf(out, "-- %s schema is up to date\n", st.Dialect())
		}
		return nil
	}
	applied, err := st.Migrate(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s store (%s %s): %w", st.Dialect(), dsnVar, dsn, err)
	}
	if len(applied) == 0 {
		fmt.Fprintf(out, "%s schema is up to date\n", st.Dialect())
		return nil
	}
	for _, v := range applied {
		if v == migrations.Adopted {
			fmt.Fprintf(out, "adopted upstream's %s schema (additions only)\n", st.Dialect())
			continue
		}
		fmt.Fprintf(out, "applied %s migration %s\n", st.Dialect(), v)
	}
	return nil
}
