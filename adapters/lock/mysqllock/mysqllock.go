package mysqllock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/internal/keepalive"
	"github.com/cubesandbox/templatecenter/adapters/lock/internal/waitq"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// MaxNameLen is MySQL's limit on user-level lock names (longer names fail
// with ER_USER_LOCK_WRONG_NAME).
const MaxNameLen = 64

// waitSeconds is the server-side wait of one GET_LOCK call inside Lock,
// when the pool can spare the connection (waitq): Lock repeats the call
// until it wins, so the context is checked at least this often even if the
// driver could not interrupt a running query.
const waitSeconds = 1

// Locker hands out GET_LOCK locks, each on its own pinned connection.
type Locker struct {
	db      *sql.DB
	timeout time.Duration
	line    *waitq.Line
}

// New returns a Locker that takes connections from db.
func New(db *sql.DB) *Locker { return NewWithTimeout(db, keepalive.DefaultTimeout) }

// NewWithTimeout is New with the idle timeout of a held lock's session: a
// holder that stops pinging (its host died) loses the lock after it.
func NewWithTimeout(db *sql.DB, timeout time.Duration) *Locker {
	return &Locker{db: db, timeout: max(timeout, 4*time.Second), line: waitq.New()}
}

var _ ports.Locker = (*Locker)(nil)

// NormalizeName maps name to its GET_LOCK key: the 64 lowercase hex
// digits of sha256(name), exactly MySQL's 64-character limit.
//
// The port compares names byte for byte, but servers may not: MySQL's
// manual and MariaDB's knowledge base call lock names case-insensitive,
// and collations can ignore accents and trailing spaces. Every name is
// hashed, short ones included: a key that is the name itself for some
// names and a shortened form for others lets a name spelled like another
// name's shortened form (or folding to it) take that name's lock. Hex
// digits are compared alike by every collation, so distinct names get
// distinct keys on any server. To see who holds a name, ask the server
// about IS_USED_LOCK(SHA2(name, 256)).
func NormalizeName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// Lock waits until name is free or ctx ends. Of this process's callers
// waiting for one name only the first asks the server; it waits there
// while the pool can spare the connection, else it polls (waitq).
func (l *Locker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	if name == "" {
		return nil, fmt.Errorf("lock name is empty: %w", core.ErrInvalidArgument)
	}
	key := NormalizeName(name)
	done, err := l.line.Wait(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	defer done()
	for pause := waitq.MinPause; ; {
		wait := 0
		if waitq.Headroom(l.db) {
			wait = waitSeconds
		}
		k, err := l.try(ctx, name, key, wait)
		if err == nil || !errors.Is(err, core.ErrLocked) {
			return k, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("lock %q: %w", name, cerr)
		}
		if wait > 0 {
			pause = waitq.MinPause
			continue
		}
		if pause, err = waitq.Sleep(ctx, pause); err != nil {
			return nil, fmt.Errorf("lock %q: %w", name, err)
		}
	}
}

// TryLock takes name if it is free, else fails with core.ErrLocked.
func (l *Locker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	if name == "" {
		return nil, fmt.Errorf("lock name is empty: %w", core.ErrInvalidArgument)
	}
	return l.try(ctx, name, NormalizeName(name), 0)
}

// try takes key on a connection of its own with GET_LOCK(key, wait): the
// held lock, or an error wrapping core.ErrLocked with the connection
// returned to the pool.
func (l *Locker) try(ctx context.Context, name, key string, wait int) (ports.Lock, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %q: get connection: %w", name, err)
	}
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, fmt.Sprintf("SELECT GET_LOCK(?, %d)", wait), key).Scan(&got)
	switch {
	case err != nil:
		// The call may have won the lock before it failed (a cancelled
		// query, a dropped connection): only ending the session is sure
		// to leave nothing behind.
		discard(conn)
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("lock %q: %w", name, cerr)
		}
		return nil, fmt.Errorf("lock %q: GET_LOCK: %w", name, err)
	case !got.Valid:
		discard(conn)
		return nil, fmt.Errorf("lock %q: GET_LOCK returned NULL (server error or session killed)", name)
	case got.Int64 != 1:
		_ = conn.Close() // GET_LOCK said no: the session holds nothing
		return nil, fmt.Errorf("lock %q: %w", name, core.ErrLocked)
	}
	// The session now dies after timeout without traffic; the watcher's
	// pings are that traffic while the holder lives.
	secs := int(l.timeout / time.Second)
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", secs)); err != nil {
		discard(conn)
		return nil, fmt.Errorf("lock %q: set wait_timeout: %w", name, err)
	}
	k := &lock{name: name, key: key, conn: conn}
	k.watch = keepalive.Start(&k.mu, func() *sql.Conn { return k.conn }, "DO 1", l.timeout/4)
	return k, nil
}

type lock struct {
	name, key string
	watch     *keepalive.Watch

	mu   sync.Mutex
	conn *sql.Conn // nil after Unlock
}

func (k *lock) Name() string { return k.name }

// Lost implements ports.Lock.
func (k *lock) Lost() <-chan struct{} { return k.watch.Lost() }

// Unlock releases the lock on the session that took it. If the server does
// not confirm the release (an error, or a result other than 1), the
// connection is destroyed instead of going back to the pool, and Unlock
// reports the error. Callers that unlock on the way out should pass a
// context that is still live (for example context.WithoutCancel) so that
// the normal path can keep the connection.
func (k *lock) Unlock(ctx context.Context) error {
	k.mu.Lock()
	conn := k.conn
	k.conn = nil
	k.mu.Unlock()
	if conn == nil {
		return nil
	}
	k.watch.Stop()
	var res sql.NullInt64
	err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", k.key).Scan(&res)
	if err == nil && res.Valid && res.Int64 == 1 {
		if _, err := conn.ExecContext(ctx, "SET SESSION wait_timeout = DEFAULT"); err != nil {
			discard(conn)
			return nil
		}
		_ = conn.Close() // back to the pool, holding no lock
		return nil
	}
	discard(conn)
	if err != nil {
		return fmt.Errorf("unlock %q: RELEASE_LOCK: %w (connection discarded)", k.name, err)
	}
	return fmt.Errorf("unlock %q: RELEASE_LOCK returned %s, the session no longer held the lock (connection discarded)",
		k.name, nullString(res))
}

// discard closes the physical connection behind conn instead of returning
// it to the pool. (*sql.Conn).Close only hands the session back to the pool,
// and the MySQL driver's session reset does not clear server-side state, so
// a lock we could not confirm released would stay held by an idle pooled
// connection that no one will ever unlock. Returning driver.ErrBadConn from
// Raw makes database/sql close the connection; the server then ends the
// session and drops every lock it held.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close() // already released by Raw; returns sql.ErrConnDone
}

func nullString(v sql.NullInt64) string {
	if !v.Valid {
		return "NULL"
	}
	return fmt.Sprint(v.Int64)
}
