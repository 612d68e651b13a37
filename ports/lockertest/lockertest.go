package lockertest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness makes Lockers for one adapter.
type Harness interface {
	// MakeLocker returns a Locker. All Lockers of one harness contend for
	// the same names: they stand for separate processes sharing a database.
	MakeLocker(ctx context.Context) (ports.Locker, error)
	// Close releases what the harness opened.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds every subtest so a lock that never comes back fails
// the test instead of hanging it.
const testTimeout = 60 * time.Second

type env struct {
	ctx    context.Context
	h      Harness
	prefix string
}

// name returns a lock name unique to this run and subtest, so runs of the
// suite against a shared server never see each other's locks.
func (e *env) name(suffix string) string { return e.prefix + suffix }

func (e *env) locker(t *testing.T) ports.Locker {
	t.Helper()
	l, err := e.h.MakeLocker(e.ctx)
	if err != nil {
		t.Fatalf("MakeLocker: %v", err)
	}
	return l
}

// RunConformanceTests runs the suite against the adapter newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"TryLockExcludes", testTryLockExcludes},
		{"UnlockThenReacquire", testUnlockThenReacquire},
		{"LockWaitsForHolder", testLockWaitsForHolder},
		{"LockHonoursContext", testLockHonoursContext},
		{"IndependentNames", testIndependentNames},
		{"DoubleUnlockIsNoop", testDoubleUnlockIsNoop},
		{"UnlockWithDeadContextNeverLeaks", testUnlockWithDeadContext},
		{"Contention", testContention},
		{"LongNames", testLongNames},
		{"NamesCompareByteForByte", testByteForByte},
		{"EmptyName", testEmptyName},
		{"HeldLockIsNotLost", testHeldLockIsNotLost},
		{"LostWhenTheSessionDies", testLostWhenTheSessionDies},
		{"WaitersLeaveThePoolToOthers", testWaitersLeaveThePool},
	}
	run := randomHex(4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			tc.fn(t, &env{ctx: ctx, h: h, prefix: "lt-" + run + "-" + strings.ToLower(tc.name) + "-"})
		})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func mustTryLock(t *testing.T, ctx context.Context, l ports.Locker, name string) ports.Lock {
	t.Helper()
	k, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", name, err)
	}
	if k.Name() != name {
		t.Fatalf("Name() = %q, want %q", k.Name(), name)
	}
	return k
}

func mustLock(t *testing.T, ctx context.Context, l ports.Locker, name string) ports.Lock {
	t.Helper()
	k, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	if k.Name() != name {
		t.Fatalf("Name() = %q, want %q", k.Name(), name)
	}
	return k
}

func mustUnlock(t *testing.T, ctx context.Context, k ports.Lock) {
	t.Helper()
	if err := k.Unlock(ctx); err != nil {
		t.Fatalf("Unlock(%q): %v", k.Name(), err)
	}
}

func wantLocked(t *testing.T, ctx context.Context, l ports.Locker, name string) {
	t.Helper()
	k, err := l.TryLock(ctx, name)
	if err == nil {
		_ = k.Unlock(ctx)
		t.Fatalf("TryLock(%q) succeeded while another holder has it", name)
	}
	if !errors.Is(err, core.ErrLocked) {
		t.Fatalf("TryLock(%q) error = %v, want one wrapping core.ErrLocked", name, err)
	}
}

func testTryLockExcludes(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	name := e.name("x")
	held := mustTryLock(t, e.ctx, a, name)
	wantLocked(t, e.ctx, a, name) // same Locker: still excluded
	wantLocked(t, e.ctx, b, name) // another "process"
	mustUnlock(t, e.ctx, held)
}

func testUnlockThenReacquire(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	name := e.name("x")
	for range 3 {
		k := mustTryLock(t, e.ctx, a, name)
		mustUnlock(t, e.ctx, k)
		k = mustTryLock(t, e.ctx, b, name)
		wantLocked(t, e.ctx, a, name)
		mustUnlock(t, e.ctx, k)
		k = mustLock(t, e.ctx, a, name)
		mustUnlock(t, e.ctx, k)
	}
}

func testLockWaitsForHolder(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	for _, waiter := range []struct {
		name   string
		locker ports.Locker
	}{{"same-locker", a}, {"other-locker", b}} {
		t.Run(waiter.name, func(t *testing.T) {
			name := e.name(waiter.name)
			holder := mustTryLock(t, e.ctx, a, name)

			// released is set just before the holder unlocks; a waiter that
			// gets the lock and sees it unset got the lock too early.
			var released atomic.Bool
			done := make(chan error, 1)
			started := make(chan struct{})
			go func() {
				close(started)
				k, err := waiter.locker.Lock(e.ctx, name)
				if err != nil {
					done <- err
					return
				}
				if !released.Load() {
					err = errors.New("the waiter got the lock while the holder still held it")
				}
				if uerr := k.Unlock(e.ctx); err == nil {
					err = uerr
				}
				done <- err
			}()
			<-started
			// Give the waiter time to block in Lock; the checks below do not
			// depend on it, it only makes the blocking path likely.
			time.Sleep(50 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("Lock returned before the holder unlocked (err=%v)", err)
			default:
			}
			released.Store(true)
			mustUnlock(t, e.ctx, holder)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
			case <-e.ctx.Done():
				t.Fatal("waiter never got the lock after the holder unlocked")
			}
		})
	}
}

func testLockHonoursContext(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	name := e.name("x")
	holder := mustTryLock(t, e.ctx, a, name)

	// Cancelled while waiting.
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		k, err := b.Lock(ctx, name)
		if err == nil {
			_ = k.Unlock(e.ctx)
			err = errors.New("a waiting Lock succeeded while the name was held")
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it block; not an assertion
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock after cancel: %v, want one wrapping context.Canceled", err)
		}
	case <-e.ctx.Done():
		t.Fatal("Lock ignored the cancellation of its context")
	}

	// Deadline while waiting.
	dctx, dcancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer dcancel()
	if k, err := b.Lock(dctx, name); err == nil {
		_ = k.Unlock(e.ctx)
		t.Fatal("Lock succeeded while the name was held")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past deadline: %v, want one wrapping context.DeadlineExceeded", err)
	}

	// Already cancelled.
	cctx, ccancel := context.WithCancel(e.ctx)
	ccancel()
	if k, err := b.Lock(cctx, name); err == nil {
		_ = k.Unlock(e.ctx)
		t.Fatal("Lock with a cancelled context succeeded while the name was held")
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled context: %v, want one wrapping context.Canceled", err)
	}

	// The abandoned waits neither took the lock from the holder nor keep it
	// once the holder lets go.
	wantLocked(t, e.ctx, b, name)
	mustUnlock(t, e.ctx, holder)
	k := mustLock(t, e.ctx, b, name)
	mustUnlock(t, e.ctx, k)
}

func testIndependentNames(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	k1 := mustTryLock(t, e.ctx, a, e.name("one"))
	k2 := mustTryLock(t, e.ctx, b, e.name("two"))
	k3 := mustLock(t, e.ctx, a, e.name("three")) // must not wait on one/two
	k4 := mustTryLock(t, e.ctx, a, e.name("four"))
	for _, k := range []ports.Lock{k1, k2, k3, k4} {
		mustUnlock(t, e.ctx, k)
	}
}

func testDoubleUnlockIsNoop(t *testing.T, e *env) {
	a, b, c := e.locker(t), e.locker(t), e.locker(t)
	name := e.name("x")
	first := mustTryLock(t, e.ctx, a, name)
	mustUnlock(t, e.ctx, first)
	mustUnlock(t, e.ctx, first)

	// A stale second Unlock must not free a lock someone else took since.
	second := mustTryLock(t, e.ctx, b, name)
	mustUnlock(t, e.ctx, first)
	wantLocked(t, e.ctx, c, name)
	wantLocked(t, e.ctx, a, name)
	mustUnlock(t, e.ctx, second)
	mustUnlock(t, e.ctx, second)
	third := mustTryLock(t, e.ctx, c, name)
	mustUnlock(t, e.ctx, third)
}

// testUnlockWithDeadContext: an Unlock that cannot talk to the server must
// still not leave the lock held (the session is destroyed instead).
func testUnlockWithDeadContext(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	name := e.name("x")
	k := mustTryLock(t, e.ctx, a, name)
	dead, cancel := context.WithCancel(e.ctx)
	cancel()
	_ = k.Unlock(dead) // an error is allowed: the release was not confirmed
	if err := k.Unlock(e.ctx); err != nil {
		t.Fatalf("Unlock after a failed Unlock: %v, want a no-op", err)
	}
	// Lock, not TryLock: a destroyed session may take the server a moment
	// to notice; the lock must come free, but not necessarily at once.
	k2 := mustLock(t, e.ctx, b, name)
	mustUnlock(t, e.ctx, k2)
}

func testContention(t *testing.T, e *env) {
	lockers := []ports.Locker{e.locker(t), e.locker(t)}
	name := e.name("x")
	const workers, rounds = 6, 5
	var (
		inside     atomic.Int32
		total      atomic.Int32
		violations atomic.Int32
		wg         sync.WaitGroup
		errs       = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			for range rounds {
				k, err := l.Lock(e.ctx, name)
				if err != nil {
					errs <- fmt.Errorf("worker %d: Lock: %w", w, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					violations.Add(1)
				}
				total.Add(1)
				inside.Add(-1)
				if err := k.Unlock(e.ctx); err != nil {
					errs <- fmt.Errorf("worker %d: Unlock: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v := violations.Load(); v != 0 {
		t.Errorf("%d times more than one holder was inside the critical section", v)
	}
	if got := total.Load(); got != workers*rounds {
		t.Errorf("critical section ran %d times, want %d", got, workers*rounds)
	}
}

func testLongNames(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	// Database lock names are limited to 64 characters; adapters shorten
	// longer ones and must keep distinct names distinct, also when they
	// differ only past the part that is kept verbatim (47 characters).
	base := e.name("")
	pad := func(s string, n int) string { return s + strings.Repeat("p", n-len(s)) }
	stem := pad(base, 60)
	long1 := stem + "-first-lock-name-is-long"
	long2 := stem + "-second-lock-name-is-long"
	exact64 := pad(base, 64)
	over65 := exact64 + "q"
	huge := pad(base, 1000)
	if len(long1) <= 64 || len(long2) <= 64 || long1[:47] != long2[:47] {
		t.Fatalf("bad fixture: %q %q", long1, long2)
	}

	var held []ports.Lock
	for _, n := range []string{long1, long2, exact64, over65, huge} {
		held = append(held, mustTryLock(t, e.ctx, a, n))
	}
	for _, n := range []string{long1, long2, exact64, over65, huge} {
		wantLocked(t, e.ctx, b, n)
	}
	for _, k := range held {
		mustUnlock(t, e.ctx, k)
	}
	k := mustLock(t, e.ctx, b, long2)
	mustUnlock(t, e.ctx, k)
}

func testEmptyName(t *testing.T, e *env) {
	a := e.locker(t)
	if _, err := a.TryLock(e.ctx, ""); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("TryLock(\"\"): %v, want one wrapping core.ErrInvalidArgument", err)
	}
	if _, err := a.Lock(e.ctx, ""); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Lock(\"\"): %v, want one wrapping core.ErrInvalidArgument", err)
	}
}

// testByteForByte: names are compared byte for byte, so names a database
// collation would call equal (case, accents, trailing spaces, Unicode
// normalisation) are different locks, short or long; and so is a name
// spelled like the shortened form of another (a readable prefix plus a
// truncated hash, the usual way to fit a 64-character server limit).
func testByteForByte(t *testing.T, e *env) {
	a, b := e.locker(t), e.locker(t)
	long := strings.Repeat("l", 70)
	// shortened is upstream CubeSandbox's form of a name over 64 bytes:
	// its first 47 bytes, "_", and 16 hex digits of its sha256.
	shortened := func(n string) string {
		sum := sha256.Sum256([]byte(n))
		return n[:min(47, len(n))] + "_" + hex.EncodeToString(sum[:])[:16]
	}
	for _, tc := range []struct {
		name        string
		first, then string
		// derive, when set, makes the second name from the first (after
		// the test's prefix is added).
		derive func(first string) string
	}{
		{"mixed case and lower case", "Tc_X", "tc_x", nil},
		{"a 64-byte name that is the shortened form of a longer one", strings.Repeat("s", 40), "", shortened},
		{"a plain name that folds to another's shortened form", "Tc_X", "", func(n string) string { return strings.ToLower(shortened(n)) }},
		{"long names sharing their first 64 bytes", strings.Repeat("p", 64) + "-one", strings.Repeat("p", 64) + "-two", nil},
		{"case", "tpl-A", "tpl-a", nil},
		{"case of a whole name", "TPL-ABC", "tpl-abc", nil},
		{"accent", "tpl-é", "tpl-e", nil},
		{"trailing space", "tpl-x", "tpl-x ", nil},
		{"composed and decomposed", "tpl-\u00e9", "tpl-e\u0301", nil},
		{"german sharp s", "tpl-ß", "tpl-ss", nil},
		{"case in a long name", long + "-A", long + "-a", nil},
		{"case in the kept part of a long name", "A-" + long, "a-" + long, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, then := e.name(tc.first), e.name(tc.then)
			if tc.derive != nil {
				then = tc.derive(first)
			}
			if first == then {
				t.Fatalf("bad fixture: both names are %q", first)
			}
			k1 := mustTryLock(t, e.ctx, a, first)
			k2, err := b.TryLock(e.ctx, then)
			if err != nil {
				_ = k1.Unlock(e.ctx)
				t.Fatalf("TryLock(%q) while only %q is held: %v; the two names share a lock", then, first, err)
			}
			wantLocked(t, e.ctx, b, first)
			wantLocked(t, e.ctx, a, then)
			mustUnlock(t, e.ctx, k1)
			mustUnlock(t, e.ctx, k2)
		})
	}
}

// SessionKiller is an optional Harness capability: end the server session
// holding name's lock, as a crashed holder's session ends.
type SessionKiller interface {
	KillHolder(ctx context.Context, name string) error
}

func testHeldLockIsNotLost(t *testing.T, e *env) {
	k, err := e.locker(t).Lock(e.ctx, e.name("kept"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Unlock(context.WithoutCancel(e.ctx))
	select {
	case <-k.Lost():
		t.Fatal("a held lock whose session is fine reports itself lost")
	case <-time.After(200 * time.Millisecond):
	}
}

func testLostWhenTheSessionDies(t *testing.T, e *env) {
	killer, ok := e.h.(SessionKiller)
	if !ok {
		t.Skip("the harness cannot end a lock's session (in-process locks die with their process)")
	}
	name := e.name("killed")
	k, err := e.locker(t).Lock(e.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := killer.KillHolder(e.ctx, name); err != nil {
		t.Fatalf("kill holder: %v", err)
	}
	select {
	case <-k.Lost():
	case <-e.ctx.Done():
		t.Fatal("the lock does not report losing its session")
	}
	// The name is free again for another holder, and the lost lock's
	// Unlock does not fail the caller's cleanup path.
	other, err := e.locker(t).TryLock(e.ctx, name)
	if err != nil {
		t.Fatalf("take the name after its holder's session died: %v", err)
	}
	_ = k.Unlock(context.WithoutCancel(e.ctx))
	if err := other.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// PoolLimiter is an optional Harness capability: a Locker whose locks are
// taken on a connection pool of at most conns connections.
type PoolLimiter interface {
	MakeLockerWithPool(ctx context.Context, conns int) (ports.Locker, error)
}

// testWaitersLeaveThePool: many callers waiting for one held name (resumes
// queued on a popular artifact) must not take the pool's connections from
// callers of other names. Only a held lock may pin a connection.
func testWaitersLeaveThePool(t *testing.T, e *env) {
	pl, ok := e.h.(PoolLimiter)
	if !ok {
		t.Skip("the harness has no connection pool to bound (in-process locks)")
	}
	l, err := pl.MakeLockerWithPool(e.ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	popular := e.name("popular")
	held := mustLock(t, e.ctx, l, popular)
	wctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	var waiting atomic.Int32
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waiting.Add(1)
			if k, err := l.Lock(wctx, popular); err == nil {
				_ = k.Unlock(context.WithoutCancel(wctx))
			}
		}()
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	for waiting.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the waiters are at their servers

	// The deadline only keeps a broken adapter from hanging the suite.
	octx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	other, err := l.Lock(octx, e.name("other"))
	if err != nil {
		t.Fatalf("a free name could not be taken while others wait for a held one: %v", err)
	}
	mustUnlock(t, e.ctx, other)
	mustUnlock(t, e.ctx, held)
}
