// Package entstore implements ports.Store with ent over SQLite (the embedded
// default), MySQL/MariaDB and PostgreSQL.
//
// The dialect is chosen from the DSN (see Open). The schema comes from the
// versioned SQL migrations in ent/migrate/migrations, applied by Migrate; ent
// types never leave this package: every row is mapped to a core type, and
// stored statuses are validated on the way in.
//
// Concurrency rules the package relies on:
//   - invariant I1 is the unique index on the job's nullable active_key;
//   - JobRepository.Update is a compare-and-set on (status, updated_at), and
//     updated_at strictly increases on every write, so a matched row is
//     always reported as changed (MySQL counts changed rows); stamps step
//     in the coarsest precision the tables' timestamp columns keep (whole
//     seconds on an adopted upstream database), see clock.go;
//   - SQLite transactions begin IMMEDIATE (one writer, others wait on
//     busy_timeout); MySQL and PostgreSQL read rows FOR UPDATE inside
//     transactions;
//   - deadlocks, lock wait timeouts, serialization failures and SQLITE_BUSY
//     are retried a bounded number of times.
//
// Inside Store.Tx a unique violation (core.ErrConflict) ends the transaction
// on PostgreSQL: fn should return the error rather than carry on.
package entstore
