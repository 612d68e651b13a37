package memstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// maxCASRounds bounds how often an Update reads the row again after another
// writer changed it between the read and the write. Every lost round means
// some other writer succeeded.
const maxCASRounds = 64

// Store is the in-memory ports.Store.
type Store struct {
	clock ports.Clock

	// token is the right to change data: a Tx holds it while fn runs, any
	// other write for one step. Reads never take it.
	token chan struct{}

	mu     sync.RWMutex // guards cur: the pointer and, for writers, the maps
	cur    *state       // committed data; nil once closed
	closed atomic.Bool
}

var _ ports.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from c instead of the wall clock.
func WithClock(c ports.Clock) Option { return func(s *Store) { s.clock = c } }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: wallClock{}, token: make(chan struct{}, 1), cur: newState()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Close drops the data; later calls fail with core.ErrStoreNotInitialized.
// Closing twice is not an error.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.mu.Lock()
	s.cur = nil
	s.mu.Unlock()
	return nil
}

var errClosed = fmt.Errorf("metadata store is closed: %w", core.ErrStoreNotInitialized)

// errOwnTx is returned instead of waiting forever for a Tx that cannot end
// before the call does.
var errOwnTx = errors.New("memstore: write or Tx on the store from inside one of its own transactions would wait for it forever; use the Repos given to fn")

// Jobs returns the job repository; each call runs on its own.
func (s *Store) Jobs() ports.JobRepository { return jobRepo{s.root()} }

// Templates returns the template repository.
func (s *Store) Templates() ports.TemplateRepository { return templateRepo{s.root()} }

// Artifacts returns the artifact repository.
func (s *Store) Artifacts() ports.ArtifactRepository { return artifactRepo{s.root()} }

// Placements returns the placement repository.
func (s *Store) Placements() ports.PlacementRepository { return placementRepo{s.root()} }

// Nodes returns the node repository.
func (s *Store) Nodes() ports.NodeRepository { return nodeRepo{s.root()} }

// Names returns the template name repository.
func (s *Store) Names() ports.NameRepository { return nameRepo{s.root()} }

// Policies returns the placement policy repository.
func (s *Store) Policies() ports.PolicyRepository { return policyRepo{s.root()} }

func (s *Store) root() scope { return scope{s: s} }

// Tx runs fn on a private copy of the data and publishes the copy if fn
// returns nil. Transactions run one at a time (and exclude other writes), so
// there is nothing to retry: fn runs exactly once.
func (s *Store) Tx(ctx context.Context, fn func(ctx context.Context, r ports.Repos) error) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	s.mu.RLock()
	base := s.cur
	s.mu.RUnlock()
	if base == nil {
		return errClosed
	}
	t := &txn{s: s, work: base.clone()}
	err := func() error {
		defer t.done.Store(true)
		return fn(context.WithValue(ctx, txKey{}, t), txRepos{scope{s: s, tx: t}})
	}()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return errClosed
	}
	s.cur = t.work
	return nil
}

// acquire takes the write token. A caller already inside one of this
// store's transactions (its ctx says so) would wait for itself: it gets
// errOwnTx instead.
func (s *Store) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	if t, ok := ctx.Value(txKey{}).(*txn); ok && t.s == s && !t.done.Load() {
		return errOwnTx
	}
	select {
	case s.token <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) release() { <-s.token }

// now is the store's clock: UTC, microseconds (what the SQL store keeps).
func (s *Store) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// after returns now, or prev+1µs when the clock has not moved past prev, so
// a row's updated_at strictly increases with every write.
func (s *Store) after(prev time.Time) time.Time {
	t := s.now()
	if !t.After(prev) {
		t = prev.UTC().Add(time.Microsecond)
	}
	return t
}

type txKey struct{}

// txn is one running transaction.
type txn struct {
	s    *Store
	mu   sync.Mutex // fn may use its Repos from several goroutines
	work *state
	done atomic.Bool
}

// scope is where repository calls run: on the committed data, each call on
// its own, or inside one transaction.
type scope struct {
	s  *Store
	tx *txn // nil outside a transaction
}

var errTxDone = errors.New("memstore: the Repos of a transaction were used after its fn returned")

// view runs fn on the data the scope sees. fn must not keep references into
// st past its return, nor call the store.
func (sc scope) view(ctx context.Context, fn func(st *state)) error {
	return sc.change(ctx, func(st *state) error { fn(st); return nil }, false)
}

// write runs fn with the right to change st. fn must check everything
// before it changes anything, so an error leaves st as it was.
func (sc scope) write(ctx context.Context, fn func(st *state) error) error {
	return sc.change(ctx, fn, true)
}

func (sc scope) change(ctx context.Context, fn func(st *state) error, write bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if sc.s.closed.Load() {
		return errClosed
	}
	if t := sc.tx; t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.done.Load() {
			return errTxDone
		}
		return fn(t.work)
	}
	if !write {
		sc.s.mu.RLock()
		defer sc.s.mu.RUnlock()
	} else {
		if err := sc.s.acquire(ctx); err != nil {
			return err
		}
		defer sc.s.release()
		sc.s.mu.Lock()
		defer sc.s.mu.Unlock()
	}
	if sc.s.cur == nil {
		return errClosed
	}
	return fn(sc.s.cur)
}

// update is the read-modify-write behind every Update: read the row and its
// revision, run modify (which calls fn on a copy) with no lock held, so fn
// may call the store or the Repos of its transaction, then put the result
// only if the row still has the revision that was read; otherwise start
// over. An error from modify is returned as is and writes nothing.
func update[T any](ctx context.Context, sc scope, what string,
	read func(st *state) (row T, rev uint64, ok bool),
	modify func(cur T) (T, error),
	put func(st *state, cur, next T) error,
) (T, error) {
	var zero T
	for round := 1; ; round++ {
		var cur T
		var rev uint64
		var ok bool
		if err := sc.view(ctx, func(st *state) { cur, rev, ok = read(st) }); err != nil {
			return zero, err
		}
		if !ok {
			return zero, fmt.Errorf("%s: %w", what, core.ErrNotFound)
		}
		next, err := modify(cur)
		if err != nil {
			return zero, err
		}
		lost := false
		err = sc.write(ctx, func(st *state) error {
			if _, r, ok := read(st); !ok || r != rev {
				lost = true
				return nil
			}
			return put(st, cur, next)
		})
		switch {
		case err != nil:
			return zero, err
		case !lost:
			return next, nil
		case round == maxCASRounds:
			return zero, fmt.Errorf("%s: lost %d compare-and-set rounds to concurrent writers: %w", what, round, core.ErrConflict)
		}
		if err := pause(ctx, min(round, 4)); err != nil {
			return zero, err
		}
	}
}

// pause sleeps a few hundred microseconds, growing with attempt, with
// jitter, so contenders spread out.
func pause(ctx context.Context, attempt int) error {
	d := time.Duration(attempt) * 100 * time.Microsecond
	d += rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// txRepos is the Repos of one transaction.
type txRepos struct{ sc scope }

func (r txRepos) Jobs() ports.JobRepository             { return jobRepo(r) }
func (r txRepos) Templates() ports.TemplateRepository   { return templateRepo(r) }
func (r txRepos) Artifacts() ports.ArtifactRepository   { return artifactRepo(r) }
func (r txRepos) Placements() ports.PlacementRepository { return placementRepo(r) }
func (r txRepos) Nodes() ports.NodeRepository           { return nodeRepo(r) }
func (r txRepos) Names() ports.NameRepository           { return nameRepo(r) }
func (r txRepos) Policies() ports.PolicyRepository      { return policyRepo(r) }

// pair keys the tables whose key is two strings.
type pair struct{ a, b string }

// state is the data. Stored rows are never changed in place: a write puts a
// new row (and new revision) into the map, so a clone of the maps is a
// snapshot, and a row's revision tells whether it changed since it was read.
type state struct {
	rev        uint64 // the last revision handed out
	jobs       map[string]jobRow
	defs       map[string]defRow
	replicas   map[pair]core.Replica // (template id, node id)
	artifacts  map[string]artifactRow
	placements map[pair]core.Placement // (artifact id, node id)
	nodes      map[string]ports.NodeRecord
	names      map[string]nameRow
	policy     policyRow
	// decisions per template, newest first; a write replaces the slice.
	decisions map[string][]core.PlacementDecision
}

// nameRow is one entry of the template namespace.
type nameRow struct {
	templateID string
	kind       core.NameKind
	previous   string // the template an alias was moved away from
}

// Rows carry seq, the insertion order SQL's auto-increment id gives (the
// tie-breaker of the oldest-first lists), and rev, bumped by every write.
type jobRow struct {
	job      *core.Job // private: never handed out, never changed
	seq, rev uint64
}

type defRow struct {
	def core.Definition
	rev uint64
}

type artifactRow struct {
	a        core.Artifact
	seq, rev uint64
}

func newState() *state {
	return &state{
		jobs:       map[string]jobRow{},
		defs:       map[string]defRow{},
		replicas:   map[pair]core.Replica{},
		artifacts:  map[string]artifactRow{},
		placements: map[pair]core.Placement{},
		nodes:      map[string]ports.NodeRecord{},
		decisions:  map[string][]core.PlacementDecision{},
		names:      map[string]nameRow{},
	}
}

func (st *state) clone() *state {
	c := *st
	c.jobs = maps.Clone(st.jobs)
	c.defs = maps.Clone(st.defs)
	c.replicas = maps.Clone(st.replicas)
	c.artifacts = maps.Clone(st.artifacts)
	c.placements = maps.Clone(st.placements)
	c.nodes = maps.Clone(st.nodes)
	c.names = maps.Clone(st.names)
	c.decisions = maps.Clone(st.decisions)
	return &c
}

func (st *state) nextRev() uint64 {
	st.rev++
	return st.rev
}

// required is the SQL schema's NOT NULL / NotEmpty rule for key columns.
func required(field, v string) error {
	if v == "" {
		return &core.FieldError{Field: field, Reason: "is required"}
	}
	return nil
}

// Now implements ports.Store: the store's clock (see WithClock).
func (s *Store) Now(context.Context) (time.Time, error) {
	if s.closed.Load() {
		return time.Time{}, errClosed
	}
	return s.now(), nil
}
