package data_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// db keeps job, artifact and placement rows with the store contract's
// rules: Jobs().Update is a compare-and-set on (status, updated_at) that
// re-reads and calls fn again when another writer got in between.
type db struct {
	mu    sync.Mutex
	now   time.Time
	jobs  map[string]*core.Job
	arts  map[string]*core.Artifact
	refs  map[string]int
	place map[string][]core.Placement
	// interfere, when set, runs between the read and the write of a job
	// update (as a concurrent writer would), once per call of fn.
	interfere func(j *core.Job)

	store    *portsmock.StoreMock
	jobRepo  *portsmock.JobRepositoryMock
	artRepo  *portsmock.ArtifactRepositoryMock
	clock    *portsmock.ClockMock
	listJobs []ports.StaleQuery
}

func newDB(now time.Time) *db {
	d := &db{now: now, jobs: map[string]*core.Job{}, arts: map[string]*core.Artifact{}, refs: map[string]int{}, place: map[string][]core.Placement{}}
	d.jobRepo = &portsmock.JobRepositoryMock{
		ListStaleFunc: func(_ context.Context, q ports.StaleQuery) ([]*core.Job, error) {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.listJobs = append(d.listJobs, q)
			var out []*core.Job
			for _, j := range d.jobs {
				if len(q.Statuses) > 0 && !slices.Contains(q.Statuses, j.Status) ||
					len(q.Phases) > 0 && !slices.Contains(q.Phases, j.Phase) ||
					slices.Contains(q.ExcludePhases, j.Phase) ||
					!q.UpdatedBefore.IsZero() && !j.UpdatedAt.Before(q.UpdatedBefore) {
					continue
				}
				out = append(out, j.Clone())
			}
			sort.Slice(out, func(a, b int) bool { return out[a].UpdatedAt.Before(out[b].UpdatedAt) })
			if q.Limit > 0 && len(out) > q.Limit {
				out = out[:q.Limit]
			}
			return out, nil
		},
		UpdateFunc: func(_ context.Context, id string, fn func(*core.Job) error) (*core.Job, error) {
			for round := 0; round < 5; round++ {
				d.mu.Lock()
				cur, ok := d.jobs[id]
				if !ok {
					d.mu.Unlock()
					return nil, fmt.Errorf("job %s: %w", id, core.ErrNotFound)
				}
				read := cur.Clone()
				d.mu.Unlock()
				next := read.Clone()
				if err := fn(next); err != nil {
					return nil, err
				}
				d.mu.Lock()
				if d.interfere != nil {
					d.interfere(d.jobs[id])
				}
				cur = d.jobs[id]
				if cur.Status != read.Status || !cur.UpdatedAt.Equal(read.UpdatedAt) {
					d.mu.Unlock()
					continue // lost the compare-and-set: read again
				}
				next.UpdatedAt = d.tick()
				d.jobs[id] = next
				d.mu.Unlock()
				return next.Clone(), nil
			}
			return nil, fmt.Errorf("job %s: %w", id, core.ErrConflict)
		},
	}
	d.artRepo = &portsmock.ArtifactRepositoryMock{
		GetFunc: func(_ context.Context, id string) (*core.Artifact, error) {
			d.mu.Lock()
			defer d.mu.Unlock()
			a, ok := d.arts[id]
			if !ok {
				return nil, fmt.Errorf("artifact %s: %w", id, core.ErrNotFound)
			}
			c := *a
			return &c, nil
		},
		UpdateFunc: func(_ context.Context, id string, fn func(*core.Artifact) error) (*core.Artifact, error) {
			d.mu.Lock()
			defer d.mu.Unlock()
			a, ok := d.arts[id]
			if !ok {
				return nil, fmt.Errorf("artifact %s: %w", id, core.ErrNotFound)
			}
			c := *a
			if err := fn(&c); err != nil {
				return nil, err
			}
			c.UpdatedAt = d.tick()
			d.arts[id] = &c
			out := c
			return &out, nil
		},
		DeleteFunc: func(_ context.Context, id string) error {
			d.mu.Lock()
			defer d.mu.Unlock()
			delete(d.arts, id)
			return nil
		},
		ListByStatusFunc: func(_ context.Context, st core.ArtifactStatus, before time.Time, limit int) ([]*core.Artifact, error) {
			d.mu.Lock()
			defer d.mu.Unlock()
			var out []*core.Artifact
			for _, a := range d.arts {
				if a.Status == st && (before.IsZero() || a.UpdatedAt.Before(before)) {
					c := *a
					out = append(out, &c)
				}
			}
			sort.Slice(out, func(x, y int) bool { return out[x].ArtifactID < out[y].ArtifactID })
			if limit > 0 && len(out) > limit {
				out = out[:limit]
			}
			return out, nil
		},
		CountReferencesFunc: func(_ context.Context, id, exclude string) (int, error) {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.refs[id], nil
		},
	}
	placements := &portsmock.PlacementRepositoryMock{
		ListFunc: func(_ context.Context, id string) ([]core.Placement, error) {
			d.mu.Lock()
			defer d.mu.Unlock()
			return slices.Clone(d.place[id]), nil
		},
	}
	d.store = &portsmock.StoreMock{
		JobsFunc:       func() ports.JobRepository { return d.jobRepo },
		ArtifactsFunc:  func() ports.ArtifactRepository { return d.artRepo },
		PlacementsFunc: func() ports.PlacementRepository { return placements },
	}
	d.clock = &portsmock.ClockMock{NowFunc: func() time.Time {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.now
	}}
	return d
}

// tick returns a write time: one millisecond past the latest one. Callers
// hold d.mu. The reconcile clock (d.now) does not move.
func (d *db) tick() time.Time {
	latest := d.now
	for _, j := range d.jobs {
		if j.UpdatedAt.After(latest) {
			latest = j.UpdatedAt
		}
	}
	return latest.Add(time.Millisecond)
}

func (d *db) addJob(id string, st core.JobStatus, ph core.Phase, updated time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	j := &core.Job{JobID: id, TemplateID: "tpl-" + id, Status: st, Phase: ph, UpdatedAt: updated}
	if st.Active() {
		j.ActiveKey = core.ActiveKeyFromImage(j.TemplateID)
	}
	d.jobs[id] = j
}

func (d *db) job(id string) *core.Job {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.jobs[id].Clone()
}

func (d *db) addArtifact(id string, st core.ArtifactStatus, updated time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arts[id] = &core.Artifact{ArtifactID: id, Status: st, UpdatedAt: updated, ObjectKey: id + "/" + id + ".ext4"}
}

func (d *db) artifact(id string) (core.Artifact, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.arts[id]
	if !ok {
		return core.Artifact{}, false
	}
	return *a, true
}

// locks is a lock table; heldElsewhere names locks another replica holds.
type locks struct {
	mu            sync.Mutex
	held          map[string]bool
	heldElsewhere map[string]bool
	mock          *portsmock.LockerMock
}

func newLocks() *locks {
	l := &locks{held: map[string]bool{}, heldElsewhere: map[string]bool{}}
	l.mock = &portsmock.LockerMock{
		TryLockFunc: func(_ context.Context, name string) (ports.Lock, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.held[name] || l.heldElsewhere[name] {
				return nil, fmt.Errorf("lock %s: %w", name, core.ErrLocked)
			}
			l.held[name] = true
			return &portsmock.LockMock{
				NameFunc: func() string { return name },
				UnlockFunc: func(context.Context) error {
					l.mu.Lock()
					defer l.mu.Unlock()
					delete(l.held, name)
					return nil
				},
			}, nil
		},
	}
	return l
}
