package entstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/migrate/migrations"
	"github.com/cubesandbox/templatecenter/ports"
)

// maxTxAttempts bounds how often a transaction (or a single statement outside
// one) is run again after a deadlock, serialization failure or busy error.
const maxTxAttempts = 6

// Store is the ent-backed ports.Store.
type Store struct {
	db      *sql.DB
	client  *ent.Client
	dialect string
	closed  atomic.Bool
	clock   dbClock
}

var _ ports.Store = (*Store)(nil)

// Open connects to the database named by dsn (see ParseDSN for the forms)
// and checks that it answers. It does not touch the schema: call Migrate.
func Open(ctx context.Context, dsn string) (*Store, error) {
	db, t, err := OpenDB(dsn)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to %s database: %w", t.Dialect, err)
	}
	s, err := New(db, t.Dialect)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// New wraps an open pool. dialect is "mysql", "postgres" or "sqlite"; a
// SQLite pool should come from OpenDB so that it has the pragmas the store
// relies on. Close closes db.
func New(db *sql.DB, dialect string) (*Store, error) {
	d, err := migrations.NormalizeDialect(dialect)
	if err != nil {
		return nil, err
	}
	ed, err := migrations.EntDialect(d)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, client: ent.NewClient(ent.Driver(entsql.OpenDB(ed, db))), dialect: d}
	hideSoftDeleted(s.client)
	s.measureClock(context.Background())
	// A failure leaves a microsecond; Migrate measures again.
	_ = s.measureTick(context.Background())
	return s, nil
}

// Migrate applies the pending schema migrations of the store's dialect and
// returns the versions it applied. Safe to call from several processes at
// once.
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	applied, err := migrations.Migrate(ctx, s.db, s.dialect)
	if err != nil {
		return applied, err
	}
	return applied, s.measureTick(ctx)
}

// Plan returns, changing nothing, the statements Migrate would run now and
// notes for a reader (pending files, or an adoption of upstream's schema
// and what of theirs it keeps).
func (s *Store) Plan(ctx context.Context) (statements, notes []string, err error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	return migrations.Plan(ctx, s.db, s.dialect)
}

// MigrateDSN is the standalone migrate step: open dsn, apply the pending
// migrations, close. It returns the versions it applied.
func MigrateDSN(ctx context.Context, dsn string) ([]string, error) {
	s, err := Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Migrate(ctx)
}

// Dialect is "mysql", "postgres" or "sqlite".
func (s *Store) Dialect() string { return s.dialect }

// DB is the underlying pool (for health checks and tests).
func (s *Store) DB() *sql.DB { return s.db }

// Close releases the pool; later calls fail with core.ErrStoreNotInitialized.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.client.Close()
}

func (s *Store) check() error {
	if s == nil || s.closed.Load() {
		return fmt.Errorf("metadata store is closed: %w", core.ErrStoreNotInitialized)
	}
	return nil
}

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

func (s *Store) root() scope { return scope{s: s, c: s.client} }

// Tx runs fn in one transaction, retried as a whole after a deadlock or
// serialization failure.
func (s *Store) Tx(ctx context.Context, fn func(ctx context.Context, r ports.Repos) error) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.runTx(ctx, func(tx *ent.Tx) error {
		return fn(ctx, txRepos{scope{s: s, c: tx.Client(), tx: true}})
	})
}

func (s *Store) runTx(ctx context.Context, fn func(tx *ent.Tx) error) error {
	return s.retry(ctx, func() error {
		tx, err := s.client.Tx(ctx)
		if err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	})
}

// retry runs fn again while it fails with a retryable error, up to
// maxTxAttempts times, with a short jittered pause so the contenders spread.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = fn()
		if err == nil || !isRetryable(err) || attempt == maxTxAttempts {
			return err
		}
		if werr := pause(ctx, attempt); werr != nil {
			return errors.Join(err, werr)
		}
	}
}

// pause sleeps a few milliseconds, growing with attempt, with jitter.
func pause(ctx context.Context, attempt int) error {
	d := time.Duration(attempt) * time.Millisecond
	d += rand.N(d + time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// now is the database's clock: ours corrected by the last measured
// offset (see clock.go), to the tick the columns keep.
func (s *Store) now() time.Time {
	return time.Now().Add(s.clockOffset()).UTC().Truncate(s.tick())
}

// after returns now, or prev plus one tick when the clock has not moved
// past prev, so a row's updated_at strictly increases with every write.
func (s *Store) after(prev time.Time) time.Time {
	t := s.now()
	if !t.After(prev) {
		tick := s.tick()
		t = prev.UTC().Truncate(tick).Add(tick)
	}
	return t
}

// scope is where repository calls run: the store's pool (each call on its
// own, retried) or one transaction (no retry: the Tx retries as a whole).
type scope struct {
	s  *Store
	c  *ent.Client
	tx bool
}

// do runs one statement-sized step.
func (sc scope) do(ctx context.Context, fn func(c *ent.Client) error) error {
	if err := sc.s.check(); err != nil {
		return err
	}
	if sc.tx {
		return fn(sc.c)
	}
	return sc.s.retry(ctx, func() error { return fn(sc.c) })
}

// inTx runs fn inside a transaction: the current one, or a new one.
func (sc scope) inTx(ctx context.Context, fn func(tsc scope) error) error {
	if err := sc.s.check(); err != nil {
		return err
	}
	if sc.tx {
		return fn(sc)
	}
	return sc.s.runTx(ctx, func(tx *ent.Tx) error { return fn(scope{s: sc.s, c: tx.Client(), tx: true}) })
}

// lockRows reports whether reads inside a transaction should take row locks
// (SELECT ... FOR UPDATE). SQLite has no row locks and needs none: its
// transactions begin IMMEDIATE and so run one at a time.
func (sc scope) lockRows() bool { return sc.tx && sc.s.dialect != migrations.SQLite }

// txRepos is the Repos of one transaction.
type txRepos struct{ sc scope }

func (r txRepos) Jobs() ports.JobRepository             { return jobRepo(r) }
func (r txRepos) Templates() ports.TemplateRepository   { return templateRepo(r) }
func (r txRepos) Artifacts() ports.ArtifactRepository   { return artifactRepo(r) }
func (r txRepos) Placements() ports.PlacementRepository { return placementRepo(r) }
func (r txRepos) Nodes() ports.NodeRepository           { return nodeRepo(r) }
func (r txRepos) Names() ports.NameRepository           { return nameRepo(r) }
func (r txRepos) Policies() ports.PolicyRepository      { return policyRepo(r) }
