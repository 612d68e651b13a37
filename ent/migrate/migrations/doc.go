// Package migrations holds the versioned SQL migrations of the metadata store
// for MySQL/MariaDB, PostgreSQL and SQLite, embedded in the binary, and the
// small migrator that applies them.
//
// Files are named NNNN_name.sql in one directory per dialect and applied in
// version order. Each applied version is recorded with the sha256 of its file
// in cube_schema_migrations; a file whose checksum changed after it was
// applied stops Migrate, because a silently edited migration means databases
// that went through different DDL. Two processes starting at once are
// serialized by a lock (MySQL GET_LOCK, PostgreSQL pg_advisory_lock, SQLite's
// single writer via BEGIN IMMEDIATE).
//
// The files are generated from the ent schema (see NextMigration and
// internal/tools/migrationgen) and then kept as committed files; Drift reports any
// difference between a migrated database and the ent schema, and a test runs
// it for every dialect.
package migrations
