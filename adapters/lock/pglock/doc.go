// Package pglock implements ports.Locker with PostgreSQL session-level
// advisory locks. Such a lock belongs to a server session, so every held
// lock pins its own connection from the pool until Unlock; size the pool
// (SetMaxOpenConns) with that in mind.
package pglock
