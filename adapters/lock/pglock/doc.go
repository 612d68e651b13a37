// Package pglock implements ports.Locker with PostgreSQL session-level
// advisory locks. Such a lock belongs to a server session, so every held
// lock pins its own connection from the pool until Unlock; size the pool
// (SetMaxOpenConns) with that in mind. A caller waiting in Lock holds no
// connection: it polls with a non-blocking attempt and a growing pause
// (10 ms to 500 ms), so waiters queued on one name never take the pool
// from callers of other names. Waiters are not served in order.
package pglock
