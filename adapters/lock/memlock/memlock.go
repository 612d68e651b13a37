package memlock

import (
	"context"
	"fmt"
	"sync"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Locker hands out named locks within one process. The zero value is not
// usable; call New.
type Locker struct {
	mu    sync.Mutex
	names map[string]*slot
}

// slot is one name's semaphore. refs counts holders and waiters so the
// entry can be dropped from the table once nobody uses it (names are often
// per-fingerprint and would otherwise pile up forever).
type slot struct {
	sem  chan struct{} // capacity 1: full while held
	refs int
}

// New returns an empty Locker.
func New() *Locker {
	return &Locker{names: make(map[string]*slot)}
}

var _ ports.Locker = (*Locker)(nil)

// ProcessLocal implements ports.ProcessLocal: another process's locks are
// not in this table.
func (*Locker) ProcessLocal() bool { return true }

// Lock blocks until name is free or ctx ends.
func (l *Locker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	s := l.acquireSlot(name)
	select {
	case s.sem <- struct{}{}:
		return &lock{owner: l, name: name, slot: s}, nil
	case <-ctx.Done():
		l.releaseSlot(name, s)
		return nil, fmt.Errorf("lock %q: %w", name, ctx.Err())
	}
}

// TryLock takes name if it is free and fails with core.ErrLocked otherwise.
func (l *Locker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	s := l.acquireSlot(name)
	select {
	case s.sem <- struct{}{}:
		return &lock{owner: l, name: name, slot: s}, nil
	default:
		l.releaseSlot(name, s)
		return nil, fmt.Errorf("lock %q: %w", name, core.ErrLocked)
	}
}

func (l *Locker) acquireSlot(name string) *slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.names[name]
	if s == nil {
		s = &slot{sem: make(chan struct{}, 1)}
		l.names[name] = s
	}
	s.refs++
	return s
}

func (l *Locker) releaseSlot(name string, s *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.refs--
	if s.refs == 0 {
		delete(l.names, name)
	}
}

func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("lock name is empty: %w", core.ErrInvalidArgument)
	}
	return nil
}

type lock struct {
	owner *Locker
	name  string

	mu   sync.Mutex
	slot *slot // nil once released
}

func (k *lock) Name() string { return k.name }

// neverLost is the Lost channel of in-process locks: they die with the
// process that holds them.
var neverLost = make(chan struct{})

// Lost implements ports.Lock; an in-process lock is never lost.
func (k *lock) Lost() <-chan struct{} { return neverLost }

// Unlock frees the name; later calls do nothing, so a stale second Unlock
// can never free a lock someone else took in the meantime.
func (k *lock) Unlock(context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.slot == nil {
		return nil
	}
	<-k.slot.sem
	k.owner.releaseSlot(k.name, k.slot)
	k.slot = nil
	return nil
}
