// Package retry holds the backoff schedule and sleeping shared by the two
// HTTP clients; tests swap Sleep for a recorder instead of waiting.
package retry

import (
	"context"
	"time"
)

// Policy is a capped exponential backoff.
type Policy struct {
	// Attempts is the total number of tries (>= 1).
	Attempts int
	// Initial is the wait after the first failure; it doubles up to Max.
	Initial time.Duration
	Max     time.Duration
}

// Delay is the wait after failed attempt n (1-based).
func (p Policy) Delay(n int) time.Duration {
	d := p.Initial
	for i := 1; i < n; i++ {
		d *= 2
		if d >= p.Max {
			return p.Max
		}
	}
	return min(d, p.Max)
}

// Sleeper waits for d or until ctx ends.
type Sleeper func(ctx context.Context, d time.Duration) error

// Sleep is the real Sleeper.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
