package memlock_test

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/lockertest"
)

// harness shares one Locker: in-process locks only exclude within the
// Locker that hands them out.
type harness struct{ l *memlock.Locker }

func (h harness) MakeLocker(context.Context) (ports.Locker, error) { return h.l, nil }
func (harness) Close()                                             {}

func TestConformance(t *testing.T) {
	lockertest.RunConformanceTests(t, func(context.Context, *testing.T) (lockertest.Harness, error) {
		return harness{memlock.New()}, nil
	})
}

func BenchmarkTryLockUnlock(b *testing.B) {
	l := memlock.New()
	ctx := context.Background()
	for b.Loop() {
		k, err := l.TryLock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
