package pglock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func TestKey(t *testing.T) {
	// Golden values computed outside Go (first 8 bytes of sha256, as a
	// signed big-endian int64).
	tests := []struct {
		name string
		want int64
	}{
		{"tc_build_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", -9025726324253237651},
		{"tc_reconcile_v1", 1754527147987186960},
	}
	for _, tc := range tests {
		if got := Key(tc.name); got != tc.want {
			t.Errorf("Key(%q) = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", testenv.Get(t, testenv.PostgresDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func uniqueName(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "pglock-" + hex.EncodeToString(b) + "-" + t.Name()
}

// eventually polls cond until it holds or ctx ends. Server-side effects of
// a closed or terminated connection are asynchronous, so tests wait.
func eventually(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type queryer interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

func backendPID(ctx context.Context, q queryer) (int64, error) {
	var pid int64
	err := q.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}

// lockHolder returns the pid holding the advisory lock on key, if any. A
// bigint key shows in pg_locks split into classid (high half) and objid.
func lockHolder(ctx context.Context, db *sql.DB, key int64) (sql.NullInt64, error) {
	var pid sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT max(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND classid::bigint = (($1::bigint >> 32) & 4294967295)
		  AND objid::bigint = ($1::bigint & 4294967295)`, key).Scan(&pid)
	return pid, err
}

func backendAlive(ctx context.Context, db *sql.DB, pid int64) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
	return n > 0, err
}

func TestLockHolderQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := openDB(t)
	l := New(openDB(t))
	for _, name := range []string{uniqueName(t), "tc_build_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"} {
		if h, err := lockHolder(ctx, admin, Key(name)); err != nil || h.Valid {
			t.Fatalf("before: holder %v, %v", h, err)
		}
		k, err := l.TryLock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := backendPID(ctx, k.(*lock).conn)
		if h, err := lockHolder(ctx, admin, Key(name)); err != nil || h.Int64 != pid {
			t.Fatalf("holder %v, %v; want pid %d", h, err, pid)
		}
		if err := k.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A clean Unlock, a lost TryLock and a successful Lock leave the
// connection poolable and its settings as they were.
func TestCleanPathsKeepConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := openDB(t)
	db.SetMaxOpenConns(1)
	l := New(db)
	name := uniqueName(t)

	pid, err := backendPID(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	k, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := backendPID(ctx, db); err != nil || got != pid {
		t.Fatalf("after a clean Unlock the pool gave backend %d (err %v), want %d back", got, err, pid)
	}
	var lt string
	if err := db.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&lt); err != nil || lt != "0" {
		t.Fatalf("lock_timeout on the pooled session = %q (err %v), want the default 0", lt, err)
	}

	held, err := New(openDB(t)).TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	if _, err := l.TryLock(ctx, name); !errors.Is(err, core.ErrLocked) {
		t.Fatalf("TryLock on a held name: %v, want core.ErrLocked", err)
	}
	if got, err := backendPID(ctx, db); err != nil || got != pid {
		t.Fatalf("after a lost TryLock the pool gave backend %d (err %v), want %d", got, err, pid)
	}
}

// A lock whose backend is terminated is released by the server and can be
// taken again; the old holder's Unlock then fails and must not release the
// new holder's lock.
func TestTerminatedSessionReleasesLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := openDB(t)
	l, other := New(openDB(t)), New(openDB(t))
	name := uniqueName(t)

	k, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := lockHolder(ctx, admin, Key(name))
	if err != nil || !holder.Valid {
		t.Fatalf("holder = %v, %v; want the holder's backend", holder, err)
	}
	var ok bool
	if err := admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", holder.Int64).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend = %v, %v", ok, err)
	}

	k2, err := other.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock after the holder was terminated: %v", err)
	}
	if err := k.Unlock(ctx); err == nil {
		t.Error("Unlock on a terminated session reported success")
	}
	if _, err := l.TryLock(ctx, name); !errors.Is(err, core.ErrLocked) {
		t.Fatalf("stale Unlock freed the new holder's lock: TryLock = %v", err)
	}
	if err := k2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// When pg_advisory_unlock does not confirm the release, the session is in a
// state we cannot vouch for; Unlock must destroy it rather than pool it.
// The test leaves a second advisory lock on the session, which an idle
// pooled connection would keep forever if Unlock merely called Close.
func TestUnconfirmedReleaseDiscardsSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := openDB(t)
	db := openDB(t)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	l := New(db)
	name := uniqueName(t)
	stray := Key(name + "-stray")

	k, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	conn := k.(*lock).conn
	pid, err := backendPID(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", stray); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", Key(name)).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock behind the Locker's back = %v, %v", ok, err)
	}

	if err := k.Unlock(ctx); err == nil {
		t.Fatal("Unlock reported success although pg_advisory_unlock returned false")
	}
	eventually(t, ctx, "the discarded backend has ended", func() (bool, error) {
		alive, err := backendAlive(ctx, admin, pid)
		return !alive, err
	})
	eventually(t, ctx, "the stray lock is free", func() (bool, error) {
		h, err := lockHolder(ctx, admin, stray)
		return !h.Valid, err
	})
	if got, err := backendPID(ctx, db); err != nil || got == pid {
		t.Fatalf("pool handed back backend %d (err %v), which should have been discarded", got, err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock: %v, want a no-op", err)
	}
}

// A Lock abandoned through its context leaves no session holding the lock.
func TestCancelledLockLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := openDB(t)
	l, other := New(openDB(t)), New(openDB(t))
	name := uniqueName(t)

	holder, err := other.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if _, err := l.Lock(wctx, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past deadline: %v", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The abandoned wait may linger server-side for up to lock_timeout; it
	// must not end up owning the lock.
	eventually(t, ctx, "nobody holds the lock", func() (bool, error) {
		h, err := lockHolder(ctx, admin, Key(name))
		return !h.Valid, err
	})
	k, err := other.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	_ = k.Unlock(ctx)
}

// A Lock that waits longer than one server-side wait round keeps waiting
// and gets the lock once it is free.
func TestLockWaitsAcrossRounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, other := New(openDB(t)), New(openDB(t))
	name := uniqueName(t)
	holder, err := other.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		k, err := l.Lock(ctx, name)
		if err == nil {
			err = k.Unlock(ctx)
		}
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond) // more than one wait round; not an assertion
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}
