package mysqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/cubesandbox/templatecenter/adapters/lock/mysqllock"
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
	db, err := sql.Open("mysql", h.dsn)
	if err != nil {
		return nil, err
	}
	h.dbs = append(h.dbs, db)
	// A short session timeout, so the keepalive pings every second.
	return mysqllock.NewWithTimeout(db, 4*time.Second), db.PingContext(ctx)
}

// KillHolder ends the session holding name (lockertest.SessionKiller).
func (h *harness) KillHolder(ctx context.Context, name string) error {
	db, err := sql.Open("mysql", h.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", mysqllock.NormalizeName(name)).Scan(&id); err != nil {
		return err
	}
	if !id.Valid {
		return fmt.Errorf("nobody holds %q", name)
	}
	_, err = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id.Int64))
	return err
}

// MakeLockerWithPool is MakeLocker on a pool of at most conns connections
// (lockertest.PoolLimiter).
func (h *harness) MakeLockerWithPool(ctx context.Context, conns int) (ports.Locker, error) {
	db, err := sql.Open("mysql", h.dsn)
	if err != nil {
		return nil, err
	}
	h.dbs = append(h.dbs, db)
	db.SetMaxOpenConns(conns)
	return mysqllock.NewWithTimeout(db, 4*time.Second), db.PingContext(ctx)
}

func (h *harness) Close() {
	for _, db := range h.dbs {
		_ = db.Close()
	}
}

func TestConformance(t *testing.T) {
	dsn := testenv.Get(t, testenv.MySQLDSN)
	lockertest.RunConformanceTests(t, func(context.Context, *testing.T) (lockertest.Harness, error) {
		return &harness{dsn: dsn}, nil
	})
}

// BenchmarkTryLockUnlock measures one uncontended take-and-release round
// trip on a warm pool.
func BenchmarkTryLockUnlock(b *testing.B) {
	db, err := sql.Open("mysql", testenv.Get(b, testenv.MySQLDSN))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	l := mysqllock.New(db)
	ctx := context.Background()
	for b.Loop() {
		k, err := l.TryLock(ctx, "bench-mysqllock")
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
