// Package memlock is an in-process ports.Locker for the embedded (SQLite)
// mode, where a single process owns the database and no other process can
// contend for a lock.
package memlock
