package pglock_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/cubesandbox/templatecenter/adapters/lock/pglock"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/lockertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// harness gives every Locker its own pool, as separate processes would have.
type harness struct {
	dsn string
	dbs []*sql.DB
}

func (h *harness) MakeLocker(ctx context.Context) (ports.Locker, error) {
	db, err := sql.Open("pgx", h.dsn)
	if err != nil {
		return nil, err
	}
	h.dbs = append(h.dbs, db)
	// A short session timeout, so the keepalive pings every second.
	return pglock.NewWithTimeout(db, 4*time.Second), db.PingContext(ctx)
}

// KillHolder ends the backend holding name's advisory lock
// (lockertest.SessionKiller).
func (h *harness) KillHolder(ctx context.Context, name string) error {
	db, err := sql.Open("pgx", h.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	key := pglock.Key(name)
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n)
	if err == nil && n == 0 {
		return fmt.Errorf("nobody holds %q", name)
	}
	return err
}

// MakeLockerWithPool is MakeLocker on a pool of at most conns connections
// (lockertest.PoolLimiter).
func (h *harness) MakeLockerWithPool(ctx context.Context, conns int) (ports.Locker, error) {
	db, err := sql.Open("pgx", h.dsn)
	if err != nil {
		return nil, err
	}
	h.dbs = append(h.dbs, db)
	db.SetMaxOpenConns(conns)
	return pglock.NewWithTimeout(db, 4*time.Second), db.PingContext(ctx)
}

func (h *harness) Close() {
	for _, db := range h.dbs {
		_ = db.Close()
	}
}

func TestConformance(t *testing.T) {
	dsn := testenv.Get(t, testenv.PostgresDSN)
	lockertest.RunConformanceTests(t, func(context.Context, *testing.T) (lockertest.Harness, error) {
		return &harness{dsn: dsn}, nil
	})
}

// BenchmarkTryLockUnlock measures one uncontended take-and-release round
// trip on a warm pool.
func BenchmarkTryLockUnlock(b *testing.B) {
	db, err := sql.Open("pgx", testenv.Get(b, testenv.PostgresDSN))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	l := pglock.New(db)
	ctx := context.Background()
	for b.Loop() {
		k, err := l.TryLock(ctx, "bench-pglock")
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
