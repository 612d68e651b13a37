package ports

import "context"

// Locker hands out named, cross-process mutual-exclusion locks (a MySQL
// GET_LOCK or PostgreSQL advisory lock session, or an in-process table).
// Locks are an optimisation that keeps duplicate work away; correctness
// still comes from unique keys and guarded updates in the Store.
//
// Names are compared byte for byte: names that differ only in case,
// accents, trailing spaces or Unicode normalisation are different locks.
// An empty name is refused with an error wrapping core.ErrInvalidArgument.
// Adapters may map names onto what their server accepts (MySQL allows 64
// characters and may compare names case-insensitively), but two different
// names never share a lock in practice: the mapping hashes every whole
// name. One that passes some names through and shortens others lets a name
// spelled like another's shortened form take its lock.
type Locker interface {
	// Lock blocks until this caller holds name or ctx ends (then it returns
	// an error wrapping ctx.Err()). Two Lock calls for the same name exclude
	// each other even inside one process. Callers queued on one name never
	// stop callers of another: an adapter backed by a bounded connection
	// pool lets waiters hold a connection only while the pool can spare it.
	Lock(ctx context.Context, name string) (Lock, error)
	// TryLock returns at once: the held lock, or an error wrapping
	// core.ErrLocked when another holder has it.
	TryLock(ctx context.Context, name string) (Lock, error)
}

// Lock is one held lock.
type Lock interface {
	// Name is the name the lock was taken with.
	Name() string
	// Unlock releases the lock. A second Unlock is a no-op. If the release
	// cannot be confirmed, the session behind the lock is destroyed rather
	// than reused, so the lock can never leak to another caller.
	Unlock(ctx context.Context) error
	// Lost is closed when the lock can no longer be trusted: the session
	// behind it died or stopped answering, so another caller may hold it
	// now. A holder must stop writing what the lock protects once it is
	// closed. A lock whose holder's process or host dies is freed within a
	// bounded time (an adapter keeps its session alive only while the
	// holder runs), never left held for hours.
	Lost() <-chan struct{}
}

// ProcessLocal is implemented by Lockers whose locks exclude only callers
// in this process (an in-process table, for SQLite's one-process mode).
// Whoever reads a lock as a sign of another process's life (core/liveness)
// cannot with such a locker, and must judge by other signs.
type ProcessLocal interface {
	// ProcessLocal reports whether the locks exclude only this process.
	ProcessLocal() bool
}
