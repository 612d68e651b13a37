package pglock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/internal/keepalive"
	"github.com/cubesandbox/templatecenter/adapters/lock/internal/waitq"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// waitTimeout is the server-side lock_timeout of one pg_advisory_lock call
// inside Lock, when the pool can spare the connection (waitq). Lock repeats
// the call until it wins, so the context is checked at least this often
// even if the driver could not interrupt it, and a wait abandoned by a
// broken connection ends on the server within it.
const waitTimeout = "1s"

// sqlStateLockNotAvailable is what PostgreSQL reports when lock_timeout
// expires.
const sqlStateLockNotAvailable = "55P03"

// Locker hands out advisory locks, each on its own pinned connection.
type Locker struct {
	db      *sql.DB
	timeout time.Duration
	line    *waitq.Line
}

// New returns a Locker that takes connections from db.
func New(db *sql.DB) *Locker { return NewWithTimeout(db, keepalive.DefaultTimeout) }

// NewWithTimeout is New with the idle timeout of a held lock's session
// (idle_session_timeout, PostgreSQL 14 and later): a holder that stops
// pinging (its host died) loses the lock after it.
func NewWithTimeout(db *sql.DB, timeout time.Duration) *Locker {
	return &Locker{db: db, timeout: max(timeout, 4*time.Second), line: waitq.New()}
}

// held finishes taking a lock: the session's idle timeout and the watcher
// that keeps it alive. A server without idle_session_timeout keeps the
// lock until TCP keepalive ends a dead holder's session.
func (l *Locker) held(ctx context.Context, name string, key int64, conn *sql.Conn) *lock {
	_, _ = conn.ExecContext(ctx, fmt.Sprintf("SET idle_session_timeout = '%dms'", l.timeout.Milliseconds()))
	k := &lock{name: name, key: key, conn: conn}
	k.watch = keepalive.Start(&k.mu, func() *sql.Conn { return k.conn }, "SELECT 1", l.timeout/4)
	return k
}

var _ ports.Locker = (*Locker)(nil)

// Key maps a lock name to the 64-bit advisory lock key: the first 8 bytes
// of sha256(name) read big-endian as a signed int64. It is computed here,
// not with the server's hashtext (upstream's choice, 32 bits), so that the
// key does not depend on the server version and distinct names collide
// with negligible probability. Names of any length map to a key.
func Key(name string) int64 {
	sum := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// Lock waits until name is free or ctx ends. Of this process's callers
// waiting for one name only the first asks the server; it waits there
// while the pool can spare the connection, else it polls (waitq).
func (l *Locker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	if name == "" {
		return nil, fmt.Errorf("lock name is empty: %w", core.ErrInvalidArgument)
	}
	key := Key(name)
	done, err := l.line.Wait(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	defer done()
	for pause := waitq.MinPause; ; {
		wait := waitq.Headroom(l.db)
		var k ports.Lock
		if wait {
			k, err = l.wait(ctx, name, key)
		} else {
			k, err = l.TryLock(ctx, name)
		}
		if err == nil || !errors.Is(err, core.ErrLocked) {
			return k, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("lock %q: %w", name, cerr)
		}
		if wait {
			pause = waitq.MinPause
			continue
		}
		if pause, err = waitq.Sleep(ctx, pause); err != nil {
			return nil, fmt.Errorf("lock %q: %w", name, err)
		}
	}
}

// wait is one pg_advisory_lock bounded by waitTimeout at the server: the
// held lock, or an error wrapping core.ErrLocked with the connection
// returned to the pool.
func (l *Locker) wait(ctx context.Context, name string, key int64) (ports.Lock, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %q: get connection: %w", name, err)
	}
	// Any failure below may leave the session holding the lock or a changed
	// setting, so every error path but a plain timeout discards the
	// connection.
	fail := func(step string, err error) (ports.Lock, error) {
		discard(conn)
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("lock %q: %w", name, cerr)
		}
		return nil, fmt.Errorf("lock %q: %s: %w", name, step, err)
	}
	if _, err := conn.ExecContext(ctx, "SET lock_timeout = '"+waitTimeout+"'"); err != nil {
		return fail("set lock_timeout", err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		if sqlState(err) != sqlStateLockNotAvailable || ctx.Err() != nil {
			return fail("pg_advisory_lock", err)
		}
		if _, err := conn.ExecContext(ctx, "RESET lock_timeout"); err != nil {
			return fail("reset lock_timeout", err)
		}
		_ = conn.Close() // timed out: the session holds nothing
		return nil, fmt.Errorf("lock %q: %w", name, core.ErrLocked)
	}
	if _, err := conn.ExecContext(ctx, "RESET lock_timeout"); err != nil {
		return fail("reset lock_timeout", err)
	}
	return l.held(ctx, name, key, conn), nil
}

// TryLock takes name if it is free, else fails with core.ErrLocked.
func (l *Locker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	if name == "" {
		return nil, fmt.Errorf("lock name is empty: %w", core.ErrInvalidArgument)
	}
	key := Key(name)
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %q: get connection: %w", name, err)
	}
	var got bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
		discard(conn) // the call may have won before it failed
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("lock %q: %w", name, cerr)
		}
		return nil, fmt.Errorf("lock %q: pg_try_advisory_lock: %w", name, err)
	}
	if !got {
		_ = conn.Close() // the session holds nothing
		return nil, fmt.Errorf("lock %q: %w", name, core.ErrLocked)
	}
	return l.held(ctx, name, key, conn), nil
}

type lock struct {
	name  string
	key   int64
	watch *keepalive.Watch

	mu   sync.Mutex
	conn *sql.Conn // nil after Unlock
}

func (k *lock) Name() string { return k.name }

// Lost implements ports.Lock.
func (k *lock) Lost() <-chan struct{} { return k.watch.Lost() }

// Unlock releases the lock on the session that took it. If the server does
// not confirm the release, the connection is destroyed instead of going
// back to the pool, and Unlock reports the error. Pass a live context (for
// example context.WithoutCancel) so the normal path can keep the
// connection.
func (k *lock) Unlock(ctx context.Context) error {
	k.mu.Lock()
	conn := k.conn
	k.conn = nil
	k.mu.Unlock()
	if conn == nil {
		return nil
	}
	k.watch.Stop()
	var released bool
	err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", k.key).Scan(&released)
	if err == nil && released {
		if _, err := conn.ExecContext(ctx, "RESET idle_session_timeout"); err != nil {
			discard(conn)
			return nil
		}
		_ = conn.Close() // back to the pool, holding no lock
		return nil
	}
	discard(conn)
	if err != nil {
		return fmt.Errorf("unlock %q: pg_advisory_unlock: %w (connection discarded)", k.name, err)
	}
	return fmt.Errorf("unlock %q: pg_advisory_unlock returned false, the session no longer held the lock (connection discarded)", k.name)
}

// discard closes the physical connection behind conn instead of returning
// it to the pool. (*sql.Conn).Close only hands the session back, and an
// advisory lock lives as long as its session, so a lock we could not
// confirm released would stay held by an idle pooled connection that no
// one will ever unlock. Returning driver.ErrBadConn from Raw makes
// database/sql close the connection; the server then ends the session and
// drops its advisory locks.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close() // already released by Raw; returns sql.ErrConnDone
}

// sqlState extracts the SQLSTATE of a driver error (pgx's *pgconn.PgError
// has a SQLState method), without tying this package to one driver.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}
