package data_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// writeClock is the memory store's clock: tests set it to seed rows with
// an updated_at in the past.
type writeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *writeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *writeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// db is the memory store (the store contract's real semantics) with the
// seams the reconciler tests need: the reconciler's own clock (fixed at
// now), a hook around ListStale, and interfere, which runs a concurrent
// writer between a job update's read and its write.
type db struct {
	*memstore.Store
	now   time.Time
	write *writeClock
	clock *portsmock.ClockMock

	mu       sync.Mutex
	listJobs []ports.StaleQuery
	// listStale, when set, wraps ListStale.
	listStale func(orig ports.JobRepository, ctx context.Context, q ports.StaleQuery) ([]*core.Job, error)
	// interfere, when set, runs once per call of a job update's fn, before
	// fn, as a concurrent writer would; it may write the job itself.
	interfere func(ctx context.Context, jobs ports.JobRepository, id string)
}

func newDB(now time.Time) *db {
	w := &writeClock{t: now}
	d := &db{Store: memstore.New(memstore.WithClock(w)), now: now, write: w}
	d.clock = &portsmock.ClockMock{NowFunc: func() time.Time { return now }}
	return d
}

func (d *db) Jobs() ports.JobRepository { return dbJobs{JobRepository: d.Store.Jobs(), d: d} }

type dbJobs struct {
	ports.JobRepository
	d *db
}

func (r dbJobs) ListStale(ctx context.Context, q ports.StaleQuery) ([]*core.Job, error) {
	r.d.mu.Lock()
	r.d.listJobs = append(r.d.listJobs, q)
	hook := r.d.listStale
	r.d.mu.Unlock()
	if hook != nil {
		return hook(r.JobRepository, ctx, q)
	}
	return r.JobRepository.ListStale(ctx, q)
}

func (r dbJobs) Update(ctx context.Context, id string, fn func(*core.Job) error) (*core.Job, error) {
	r.d.mu.Lock()
	hook := r.d.interfere
	r.d.mu.Unlock()
	if hook == nil {
		return r.JobRepository.Update(ctx, id, fn)
	}
	return r.JobRepository.Update(ctx, id, func(j *core.Job) error {
		hook(ctx, r.JobRepository, id)
		return fn(j)
	})
}

func (d *db) scans() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.listJobs)
}

// at runs fn with the store writing at time t, then goes back to now.
func (d *db) at(t time.Time, fn func()) {
	d.write.set(t)
	defer d.write.set(d.now)
	fn()
}

func (d *db) addJob(t *testing.T, id string, st core.JobStatus, ph core.Phase, updated time.Time) {
	t.Helper()
	j := &core.Job{JobID: id, TemplateID: "tpl-" + id, AttemptNo: 1, Operation: core.OpCreate, Status: st, Phase: ph}
	if st.Active() {
		j.ActiveKey = core.ActiveKeyFromImage(j.TemplateID)
	}
	d.at(updated, func() {
		if err := d.Store.Jobs().Create(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	})
}

func (d *db) job(id string) *core.Job {
	j, err := d.Store.Jobs().Get(context.Background(), id)
	if err != nil {
		panic(err)
	}
	return j
}

func (d *db) addArtifact(t *testing.T, id string, st core.ArtifactStatus, updated time.Time) {
	t.Helper()
	a := &core.Artifact{ArtifactID: id, Fingerprint: "fp-" + id, Status: st, ObjectKey: id + "/" + id + ".ext4"}
	d.at(updated, func() {
		if err := d.Artifacts().Create(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	})
}

// addReference binds a template's replica to the artifact, so it counts
// as still used.
func (d *db) addReference(t *testing.T, id string) {
	t.Helper()
	r := &core.Replica{TemplateID: "tpl-uses-" + id, NodeID: "node-1", ArtifactID: id, Status: core.ReplicaReady, Phase: core.ReplicaPhaseReady}
	d.at(d.now, func() {
		if err := d.Templates().UpsertReplica(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	})
}

func (d *db) addPlacement(t *testing.T, id, node string) {
	t.Helper()
	if err := d.Placements().Add(context.Background(), core.Placement{ArtifactID: id, NodeID: node, CreatedAt: d.now}); err != nil {
		t.Fatal(err)
	}
}

func (d *db) artifact(id string) (core.Artifact, bool) {
	a, err := d.Artifacts().Get(context.Background(), id)
	if err != nil {
		return core.Artifact{}, false
	}
	return *a, true
}

// locks is the in-process lock table; holdElsewhere takes a lock the way
// another replica would.
type locks struct {
	*memlock.Locker
}

func newLocks() *locks { return &locks{memlock.New()} }

func (l *locks) holdElsewhere(t *testing.T, name string) {
	t.Helper()
	k, err := l.TryLock(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Unlock(context.Background()) })
}

// released fails t if name is still held.
func (l *locks) released(t *testing.T, name string) {
	t.Helper()
	k, err := l.TryLock(context.Background(), name)
	if err != nil {
		t.Fatalf("lock %s not released: %v", name, err)
	}
	k.Unlock(context.Background())
}
