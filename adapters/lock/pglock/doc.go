// Package pglock implements ports.Locker with PostgreSQL session-level
// advisory locks. Such a lock belongs to a server session, so every held
// lock pins its own connection from the pool until Unlock; size the pool
// (SetMaxOpenConns) with that in mind. Of one process's callers waiting for a
// name only the first asks the server, waiting there while the pool can
// spare the connection and polling otherwise (adapters/lock/internal/waitq),
// so waiters queued on one name never take the pool from callers of
// other names.
package pglock
