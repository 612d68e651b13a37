package keepalive

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// DefaultTimeout is the idle timeout given to a lock's session; it is
// pinged every quarter of it.
const DefaultTimeout = time.Minute

// Watch pings one lock's session until Stop.
type Watch struct {
	mu   *sync.Mutex // the lock's: serializes pings with Unlock
	conn func() *sql.Conn
	ping string

	lost chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Start begins pinging with query every interval. conn returns the lock's
// connection (nil once unlocked); mu is held around each ping.
func Start(mu *sync.Mutex, conn func() *sql.Conn, query string, interval time.Duration) *Watch {
	w := &Watch{mu: mu, conn: conn, ping: query, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(interval)
	return w
}

func (w *Watch) run(interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		c := w.conn()
		var err error
		if c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			_, err = c.ExecContext(ctx, w.ping)
			cancel()
		}
		w.mu.Unlock()
		if c == nil {
			return
		}
		if err != nil {
			w.MarkLost()
			return
		}
	}
}

// Lost is closed once the session failed a ping.
func (w *Watch) Lost() <-chan struct{} { return w.lost }

// MarkLost closes Lost (once).
func (w *Watch) MarkLost() { w.once.Do(func() { close(w.lost) }) }

// Stop ends the pings and waits for the watcher. Call it without holding
// the lock's mutex.
func (w *Watch) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}
