// Package waitq decides how a caller of a SQL lock adapter waits for a
// held name without letting waiters take the lock pool from everyone else.
//
// A waiter that waits at the server (GET_LOCK with a timeout,
// pg_advisory_lock) is handed the lock the moment it is released, but pins
// a connection for as long as it waits; one that polls holds none between
// attempts but comes late. So one process lines up its waiters per name
// (Line): only the first asks the server, the others wait in the process,
// holding nothing, in the order they came. The first waits at the server
// only while the pool has a connection to spare beyond its own (Headroom);
// otherwise it polls with a growing pause (Pause). Resumes queued on one
// popular artifact then pin at most one connection per process, and none
// when the pool is short, while a lock handed from one caller to the next
// still moves at once in the common case.
package waitq

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"sync"
	"time"
)

// Line orders one process's waiters per name. The zero value is not
// usable; call New.
type Line struct {
	mu    sync.Mutex
	names map[string]*slot
}

// slot is one name's turn (a token, capacity 1) and how many callers use
// it, so the entry goes once nobody waits.
type slot struct {
	turn chan struct{}
	refs int
}

// New returns an empty Line.
func New() *Line { return &Line{names: map[string]*slot{}} }

// Wait returns once the caller is first in line for name, or ctx's error.
// done gives the turn to the next waiter; call it once, when the caller
// holds the lock or gave up.
func (l *Line) Wait(ctx context.Context, name string) (done func(), err error) {
	l.mu.Lock()
	s := l.names[name]
	if s == nil {
		s = &slot{turn: make(chan struct{}, 1)}
		l.names[name] = s
	}
	s.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		s.refs--
		if s.refs == 0 {
			delete(l.names, name)
		}
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-s.turn
			release()
		})
	}, nil
}

// Headroom reports whether a waiter may hold a connection of db's pool
// while it waits at the server: the pool is unbounded, or a connection is
// left for others once the waiter has taken one.
func Headroom(db *sql.DB) bool {
	st := db.Stats()
	return st.MaxOpenConnections <= 0 || st.InUse+1 < st.MaxOpenConnections
}

// Pauses between polls grow from MinPause to MaxPause.
const (
	MinPause = 10 * time.Millisecond
	MaxPause = 500 * time.Millisecond
)

// Sleep waits about pause (half of it plus a random half, so waiters
// spread out) or until ctx ends, and returns the next, longer pause.
func Sleep(ctx context.Context, pause time.Duration) (time.Duration, error) {
	t := time.NewTimer(pause/2 + rand.N(pause/2+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return pause, ctx.Err()
	case <-t.C:
	}
	return min(2*pause, MaxPause), nil
}
