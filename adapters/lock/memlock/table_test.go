package memlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// Entries leave the table once nobody holds or waits for the name, also
// after failed TryLocks and abandoned Locks.
func TestTableDoesNotGrow(t *testing.T) {
	ctx := context.Background()
	l := New()
	k, err := l.TryLock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, "a"); !errors.Is(err, core.ErrLocked) {
		t.Fatalf("TryLock on held name: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(wctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past deadline: %v", err)
	}
	if n := len(l.names); n != 1 {
		t.Fatalf("table holds %d names while one is held, want 1", n)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(l.names); n != 0 {
		t.Fatalf("table holds %d names after everything was released, want 0", n)
	}
}
