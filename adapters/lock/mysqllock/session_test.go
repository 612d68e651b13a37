package mysqllock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	_ "github.com/go-sql-driver/mysql"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func TestNormalizeName(t *testing.T) {
	fp := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	// Golden values computed outside Go: printf %s NAME | sha256sum.
	tests := []struct {
		name, in, want string
	}{
		{"short", "tc_reconcile_v1", "185955252c8e3510e940d661b8a1cdae617c08c3aacb60b808b2fee7f604e5cc"},
		{"build lock", "tc_build_" + fp, "82be2dba7afe5e6d32e17f8669fdc55d816646b44fa409cf24a81781f2ff670e"},
		{"mixed case", "tc_template_tpl-A", "c97200e6a9134e7f7a3252cc2d31603916459b89aef21033cd981f183a0bdfde"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NormalizeName(tc.in); got != tc.want {
				t.Errorf("NormalizeName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	for _, n := range []string{"a", strings.Repeat("a", 64), strings.Repeat("y", 65), strings.Repeat("z", 5000), "é"} {
		k := NormalizeName(n)
		if len(k) != MaxNameLen || strings.ToLower(k) != k || k == n {
			t.Errorf("NormalizeName(%q) = %q, want 64 lowercase hex digits", n, k)
		}
	}
}

// serverFold is how a server may compare lock names instead of byte for
// byte: MySQL's documentation and MariaDB's knowledge base both call lock
// names case-insensitive, and a PAD SPACE collation ignores trailing
// spaces. (MariaDB 10.11 compares the bytes; the keys must not depend on
// that.)
func serverFold(key string) string { return strings.ToLower(strings.TrimRight(key, " ")) }

// TestNormalizeNameSurvivesServerFolding: names that differ only where a
// server might fold them (case, trailing spaces, accents) get keys that
// stay different after folding, short names as well as long ones.
func TestNormalizeNameSurvivesServerFolding(t *testing.T) {
	long := strings.Repeat("l", 70)
	tests := []struct{ a, b string }{
		{"tpl-A", "tpl-a"},
		{"tc_template_TPL", "tc_template_tpl"},
		{"tpl-x", "tpl-x "},
		{"tpl-é", "tpl-É"},
		{"tpl-\u00e9", "tpl-e\u0301"},
		{long + "A", long + "a"},
		{"A" + long, "a" + long},
	}
	for _, tc := range tests {
		t.Run(tc.a, func(t *testing.T) {
			ka, kb := NormalizeName(tc.a), NormalizeName(tc.b)
			if serverFold(ka) == serverFold(kb) {
				t.Fatalf("NormalizeName(%q) = %q and NormalizeName(%q) = %q: one lock on a case-folding server", tc.a, ka, tc.b, kb)
			}
			for _, k := range []string{ka, kb} {
				if len(k) > MaxNameLen || !utf8.ValidString(k) {
					t.Fatalf("key %q: %d bytes or invalid UTF-8", k, len(k))
				}
			}
		})
	}
}

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", testenv.Get(t, testenv.MySQLDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func uniqueName(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "mysqllock-" + hex.EncodeToString(b) + "-" + t.Name()
}

// eventually polls cond until it holds or ctx ends. Server-side effects of
// a closed or killed connection are asynchronous, so tests wait for them.
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

func connectionID(ctx context.Context, conn interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int64, error) {
	var id int64
	err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}

func lockHolder(ctx context.Context, db *sql.DB, key string) (sql.NullInt64, error) {
	var id sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", key).Scan(&id)
	return id, err
}

func sessionAlive(ctx context.Context, db *sql.DB, id int64) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n)
	return n > 0, err
}

// A clean Unlock, and a TryLock that loses, give the connection back to
// the pool: discarding is for unconfirmed releases only.
func TestCleanPathsKeepConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := openDB(t)
	db.SetMaxOpenConns(1)
	l := New(db)
	name := uniqueName(t)

	k, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	id, err := connectionID(ctx, k.(*lock).conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := connectionID(ctx, db); err != nil || got != id {
		t.Fatalf("after a clean Unlock the pool gave session %d (err %v), want the same session %d back", got, err, id)
	}

	other := New(openDB(t))
	held, err := other.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	if _, err := l.TryLock(ctx, name); !errors.Is(err, core.ErrLocked) {
		t.Fatalf("TryLock on a held name: %v, want core.ErrLocked", err)
	}
	if got, err := connectionID(ctx, db); err != nil || got != id {
		t.Fatalf("after a lost TryLock the pool gave session %d (err %v), want %d", got, err, id)
	}
}

// A lock whose session is killed is released by the server and can be
// taken again; the old holder's Unlock then fails and must not release the
// new holder's lock.
func TestKilledSessionReleasesLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := openDB(t)
	l, other := New(openDB(t)), New(openDB(t))
	name := uniqueName(t)
	key := NormalizeName(name)

	k, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := lockHolder(ctx, admin, key)
	if err != nil || !holder.Valid {
		t.Fatalf("IS_USED_LOCK = %v, %v; want the holder's session", holder, err)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", holder.Int64)); err != nil {
		t.Fatal(err)
	}

	k2, err := other.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	if err := k.Unlock(ctx); err == nil {
		t.Error("Unlock on a killed session reported success")
	}
	if _, err := l.TryLock(ctx, name); !errors.Is(err, core.ErrLocked) {
		t.Fatalf("stale Unlock freed the new holder's lock: TryLock = %v", err)
	}
	if err := k2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// When RELEASE_LOCK does not return 1 the session is in a state we cannot
// vouch for; Unlock must destroy it rather than pool it. The test leaves a
// second lock on the session, which would stay held forever by an idle
// pooled connection if Unlock merely called Close.
func TestUnconfirmedReleaseDiscardsSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := openDB(t)
	db := openDB(t)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	l := New(db)
	name := uniqueName(t)
	stray := NormalizeName(name + "-stray")

	k, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	conn := k.(*lock).conn
	id, err := connectionID(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	var r sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", stray).Scan(&r); err != nil || r.Int64 != 1 {
		t.Fatalf("GET_LOCK(stray) = %v, %v", r, err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", NormalizeName(name)).Scan(&r); err != nil || r.Int64 != 1 {
		t.Fatalf("RELEASE_LOCK behind the Locker's back = %v, %v", r, err)
	}

	if err := k.Unlock(ctx); err == nil {
		t.Fatal("Unlock reported success although RELEASE_LOCK returned 0")
	}
	eventually(t, ctx, "the discarded session has ended", func() (bool, error) {
		alive, err := sessionAlive(ctx, admin, id)
		return !alive, err
	})
	eventually(t, ctx, "the stray lock is free", func() (bool, error) {
		h, err := lockHolder(ctx, admin, stray)
		return !h.Valid, err
	})
	if got, err := connectionID(ctx, db); err != nil || got == id {
		t.Fatalf("pool handed back session %d (err %v), which should have been discarded", got, err)
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
	// The abandoned GET_LOCK may still be waiting server-side for up to one
	// second; it must not end up owning the lock.
	eventually(t, ctx, "nobody holds the lock", func() (bool, error) {
		h, err := lockHolder(ctx, admin, NormalizeName(name))
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
