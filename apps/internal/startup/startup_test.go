package startup

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// TestLockWaitersLeaveTheStoreAlone: more lock waiters queue on one held
// lock than the store's pool has connections (each waiter pins one); the
// store's queries must still run. Before the locks had their own pool, the
// waiters took every connection and stalled all database access.
func TestLockWaitersLeaveTheStoreAlone(t *testing.T) {
	for _, dsnVar := range []string{testenv.MySQLDSN, testenv.PostgresDSN} {
		t.Run(dsnVar, func(t *testing.T) {
			dsn := testenv.Get(t, dsnVar)
			ctx := context.Background()
			st, err := entstore.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			st.DB().SetMaxOpenConns(8) // a small store pool makes the point quickly
			locker, err := Locker(st, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer locker.(interface{ Shutdown() error }).Shutdown()

			name := fmt.Sprintf("pool-test-%d", time.Now().UnixNano())
			held, err := locker.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if l, err := locker.Lock(wctx, name); err == nil {
						l.Unlock(context.Background())
					}
				}()
			}
			time.Sleep(300 * time.Millisecond) // let the waiters queue (not a timing assertion)
			qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
			var one int
			qerr := st.DB().QueryRowContext(qctx, "SELECT 1").Scan(&one)
			qcancel()
			cancel()
			held.Unlock(context.Background())
			wg.Wait()
			if qerr != nil {
				t.Fatalf("a store query while 16 lock waiters queue: %v", qerr)
			}
		})
	}
}
