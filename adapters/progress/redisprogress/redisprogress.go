// Package redisprogress keeps live job progress in Redis (rueidis), so that
// every replica can answer progress queries. Each job is one JSON value
// with a TTL refreshed on every publish: progress of a dead build expires by
// itself instead of lingering.
package redisprogress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/redis/rueidis"
)

// DefaultTTL is how long progress outlives its last publish.
const DefaultTTL = time.Hour

// DefaultOpTimeout bounds every Redis call: live progress is a nicety, and
// a Redis that is down must not hold up the job API (which falls back to
// the stored row) or a build's report loop. rueidis itself keeps retrying
// a lost connection for as long as the context allows.
const DefaultOpTimeout = 2 * time.Second

// Sink is a ports.ProgressSink on Redis.
type Sink struct {
	prefix string
	ttl    time.Duration
	op     time.Duration

	mu       sync.Mutex
	client   rueidis.Client
	addr     string    // set by Connect: dial on demand
	lastDial time.Time // of the last failed dial
	closed   bool
}

// redialEvery spaces the dials of a Connect sink whose Redis is down.
const redialEvery = time.Second

// errDown answers calls between two failed dials; errClosed calls after
// Close.
var (
	errDown   = errors.New("redis is unreachable")
	errClosed = errors.New("progress sink is closed")
)

// Options configure a Sink.
type Options struct {
	// Prefix namespaces keys (default "cube:template:job:progress:").
	Prefix string
	TTL    time.Duration
	// OpTimeout bounds each call (default DefaultOpTimeout).
	OpTimeout time.Duration
}

// New wraps a rueidis client; the caller owns (and closes) the client.
func New(client rueidis.Client, opts Options) *Sink {
	if opts.Prefix == "" {
		opts.Prefix = "cube:template:job:progress:"
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	return &Sink{client: client, prefix: opts.Prefix, ttl: opts.TTL, op: opts.OpTimeout}
}

// Connect returns a Sink on the Redis at addr (host:port) that connects
// when first used, so a service starts (and builds run) while Redis is
// down: until Redis answers, every call fails fast (one dial a second at
// most) and progress readers fall back to the stored job. Once connected,
// rueidis reconnects by itself. Close releases the connection.
func Connect(addr string, opts Options) *Sink {
	s := New(nil, opts)
	s.addr = addr
	return s
}

// Close closes a connection Connect made (a client given to New is the
// caller's).
func (s *Sink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr == "" {
		return
	}
	s.closed = true
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
}

func (s *Sink) conn() (rueidis.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if s.client != nil || s.addr == "" {
		return s.client, nil
	}
	if time.Since(s.lastDial) < redialEvery {
		return nil, fmt.Errorf("connect redis %s: %w", s.addr, errDown)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr}, DisableCache: true,
		Dialer: net.Dialer{Timeout: s.op}})
	if err != nil {
		s.lastDial = time.Now()
		return nil, fmt.Errorf("connect redis %s: %w", s.addr, err)
	}
	s.client = c
	return c, nil
}
func (s *Sink) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.op)
}

// Dial connects to Redis at addr (host:port).
func Dial(addr string) (rueidis.Client, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, fmt.Errorf("connect redis %s: %w", addr, err)
	}
	return c, nil
}

type record struct {
	Phase    core.Phase        `json:"phase"`
	Progress int               `json:"progress"`
	Pull     core.PullProgress `json:"pull"`
}

// Publish stores p as the job's latest progress and refreshes its TTL.
func (s *Sink) Publish(ctx context.Context, jobID string, p ports.LiveProgress) error {
	b, err := json.Marshal(record{Phase: p.Phase, Progress: p.Progress, Pull: p.Pull})
	if err != nil {
		return err
	}
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("publish progress of job %s: %w", jobID, err)
	}
	cmd := c.B().Set().Key(s.prefix + jobID).Value(string(b)).Ex(s.ttl).Build()
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := c.Do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("publish progress of job %s: %w", jobID, err)
	}
	return nil
}

// Get returns the latest progress; ok is false when none is stored.
func (s *Sink) Get(ctx context.Context, jobID string) (ports.LiveProgress, bool, error) {
	c, err := s.conn()
	if err != nil {
		return ports.LiveProgress{}, false, fmt.Errorf("read progress of job %s: %w", jobID, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := c.Do(ctx, c.B().Get().Key(s.prefix+jobID).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ports.LiveProgress{}, false, nil
	}
	if err != nil {
		return ports.LiveProgress{}, false, fmt.Errorf("read progress of job %s: %w", jobID, err)
	}
	var r record
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return ports.LiveProgress{}, false, fmt.Errorf("decode progress of job %s: %w", jobID, err)
	}
	return ports.LiveProgress{Phase: r.Phase, Progress: r.Progress, Pull: r.Pull}, true, nil
}

// Delete removes the job's progress.
func (s *Sink) Delete(ctx context.Context, jobID string) error {
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("delete progress of job %s: %w", jobID, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := c.Do(ctx, c.B().Del().Key(s.prefix+jobID).Build()).Error(); err != nil {
		return fmt.Errorf("delete progress of job %s: %w", jobID, err)
	}
	return nil
}
