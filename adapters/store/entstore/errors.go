package entstore

import (
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
)

// isUnique reports a unique-key violation.
func isUnique(err error) bool {
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1062 || my.Number == 1586
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		return lite.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || lite.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// isRetryable reports an error after which the whole transaction may be run
// again: the database rolled it back (deadlock, serialization failure) or
// never let it start (lock wait timeout, SQLite busy).
func isRetryable(err error) bool {
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1213 || my.Number == 1205
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "40001" || pg.Code == "40P01"
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return false
}

// mapErr turns a database error into one wrapping a core sentinel where one
// applies; what names the row ("job 123").
func mapErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case ent.IsNotFound(err):
		return fmt.Errorf("%s: %w", what, core.ErrNotFound)
	case isUnique(err):
		return fmt.Errorf("%s: %w: %s", what, core.ErrConflict, dbMessage(err))
	case ent.IsValidationError(err):
		return fmt.Errorf("%s: %w: %s", what, core.ErrInvalidArgument, err.Error())
	}
	// Wrapped, not flattened: the Tx retry loop inspects the driver error.
	return fmt.Errorf("%s: %w", what, err)
}

// dbMessage is the driver's own text, without ent's prefixes.
func dbMessage(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch e.(type) {
		case *mysql.MySQLError, *pgconn.PgError, *sqlite.Error:
			return e.Error()
		}
	}
	return err.Error()
}
