package control_test

import (
	"fmt"
	"sync"
	"time"
)

// fakeClock is a clock the tests move by hand; fakeIDs mints readable ids.

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fakeIDs struct {
	mu                  sync.Mutex
	jobs, hexes, tokens int
}

func (i *fakeIDs) NewJobID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.jobs++
	return fmt.Sprintf("job-%d", i.jobs)
}

func (i *fakeIDs) NewHex() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.hexes++
	return fmt.Sprintf("%032x", i.hexes)
}

func (i *fakeIDs) NewToken() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.tokens++
	return fmt.Sprintf("tok-%d", i.tokens)
}

func (i *fakeIDs) tokenCount() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.tokens
}
