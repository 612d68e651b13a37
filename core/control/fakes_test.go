package control_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// fakeStore is an in-memory ports.Store with the contract's key rules:
// unique job id / (template, attempt) / active key, unique definition id
// and alias, ErrNotFound for missing rows, compare-and-set updates, and
// CountReferences counting replicas, non-terminal jobs and definitions.
// Tx serializes transactions and rolls the whole state back on error.
type fakeStore struct {
	clock *fakeClock

	txMu sync.Mutex // one transaction at a time
	mu   sync.Mutex // guards the maps
	st   state
}

type state struct {
	jobs       map[string]*core.Job
	defs       map[string]*core.Definition
	replicas   map[string]map[string]*core.Replica // template -> node
	artifacts  map[string]*core.Artifact
	placements map[string]map[string]core.Placement // artifact -> node
}

func newFakeStore(c *fakeClock) *fakeStore {
	return &fakeStore{clock: c, st: state{
		jobs: map[string]*core.Job{}, defs: map[string]*core.Definition{},
		replicas: map[string]map[string]*core.Replica{}, artifacts: map[string]*core.Artifact{},
		placements: map[string]map[string]core.Placement{},
	}}
}

func (s state) clone() state {
	c := state{jobs: map[string]*core.Job{}, defs: map[string]*core.Definition{}, replicas: map[string]map[string]*core.Replica{},
		artifacts: map[string]*core.Artifact{}, placements: map[string]map[string]core.Placement{}}
	for k, v := range s.jobs {
		c.jobs[k] = v.Clone()
	}
	for k, v := range s.defs {
		d := *v
		c.defs[k] = &d
	}
	for k, m := range s.replicas {
		c.replicas[k] = map[string]*core.Replica{}
		for n, r := range m {
			rr := *r
			c.replicas[k][n] = &rr
		}
	}
	for k, v := range s.artifacts {
		a := *v
		c.artifacts[k] = &a
	}
	for k, m := range s.placements {
		c.placements[k] = maps.Clone(m)
	}
	return c
}

// stamp returns a time strictly after prev.
func (f *fakeStore) stamp(prev time.Time) time.Time {
	t := f.clock.Now()
	if !t.After(prev) {
		t = prev.Add(time.Microsecond)
	}
	return t
}

func (f *fakeStore) Jobs() ports.JobRepository             { return jobRepo{f} }
func (f *fakeStore) Templates() ports.TemplateRepository   { return tplRepo{f} }
func (f *fakeStore) Artifacts() ports.ArtifactRepository   { return artRepo{f} }
func (f *fakeStore) Placements() ports.PlacementRepository { return plRepo{f} }
func (f *fakeStore) Nodes() ports.NodeRepository           { return noNodes{} }
func (f *fakeStore) Close() error                          { return nil }

func (f *fakeStore) Tx(ctx context.Context, fn func(ctx context.Context, r ports.Repos) error) error {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	f.mu.Lock()
	saved := f.st.clone()
	f.mu.Unlock()
	if err := fn(ctx, f); err != nil {
		f.mu.Lock()
		f.st = saved
		f.mu.Unlock()
		return err
	}
	return nil
}

func notFound(what string) error { return fmt.Errorf("%s: %w", what, core.ErrNotFound) }
func conflict(what string) error { return fmt.Errorf("%s: %w", what, core.ErrConflict) }

// ---- jobs

type jobRepo struct{ f *fakeStore }

func (r jobRepo) Create(_ context.Context, job *core.Job) error {
	f := r.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.st.jobs {
		if j.JobID == job.JobID || (j.TemplateID == job.TemplateID && j.AttemptNo == job.AttemptNo) ||
			(job.ActiveKey != "" && j.ActiveKey == job.ActiveKey) {
			return conflict("create job " + job.JobID)
		}
	}
	c := job.Clone()
	c.CreatedAt = f.stamp(time.Time{})
	c.UpdatedAt = c.CreatedAt
	job.CreatedAt, job.UpdatedAt = c.CreatedAt, c.UpdatedAt
	f.st.jobs[job.JobID] = c
	return nil
}

func (r jobRepo) Get(_ context.Context, id string) (*core.Job, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	j, ok := r.f.st.jobs[id]
	if !ok {
		return nil, notFound("job " + id)
	}
	return j.Clone(), nil
}

func (r jobRepo) GetActive(_ context.Context, key string) (*core.Job, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	for _, j := range r.f.st.jobs {
		if key != "" && j.ActiveKey == key {
			return j.Clone(), nil
		}
	}
	return nil, notFound("active job " + key)
}

func (r jobRepo) Latest(_ context.Context, tid string) (*core.Job, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out *core.Job
	for _, j := range r.f.st.jobs {
		if j.TemplateID == tid && (out == nil || j.AttemptNo > out.AttemptNo) {
			out = j
		}
	}
	if out == nil {
		return nil, notFound("latest job of " + tid)
	}
	return out.Clone(), nil
}

func (r jobRepo) ListByTemplate(_ context.Context, tid string) ([]*core.Job, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []*core.Job
	for _, j := range r.f.st.jobs {
		if j.TemplateID == tid {
			out = append(out, j.Clone())
		}
	}
	slices.SortFunc(out, func(a, b *core.Job) int { return a.AttemptNo - b.AttemptNo })
	return out, nil
}

func (r jobRepo) Update(_ context.Context, id string, fn func(*core.Job) error) (*core.Job, error) {
	f := r.f
	for range 64 {
		f.mu.Lock()
		cur, ok := f.st.jobs[id]
		if !ok {
			f.mu.Unlock()
			return nil, notFound("job " + id)
		}
		read := cur.Clone()
		f.mu.Unlock()
		next := read.Clone()
		if err := fn(next); err != nil {
			return nil, err
		}
		f.mu.Lock()
		now := f.st.jobs[id]
		if now.Status != read.Status || !now.UpdatedAt.Equal(read.UpdatedAt) {
			f.mu.Unlock()
			continue
		}
		next.JobID, next.TemplateID, next.CreatedAt = read.JobID, read.TemplateID, read.CreatedAt
		next.UpdatedAt = f.stamp(read.UpdatedAt)
		if next.ActiveKey != "" {
			for oid, o := range f.st.jobs {
				if oid != id && o.ActiveKey == next.ActiveKey {
					f.mu.Unlock()
					return nil, conflict("job active key")
				}
			}
		}
		f.st.jobs[id] = next.Clone()
		f.mu.Unlock()
		return next, nil
	}
	return nil, conflict("job " + id + ": too many CAS rounds")
}

func (r jobRepo) ListStale(_ context.Context, q ports.StaleQuery) ([]*core.Job, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []*core.Job
	for _, j := range r.f.st.jobs {
		if len(q.Statuses) > 0 && !slices.Contains(q.Statuses, j.Status) {
			continue
		}
		if len(q.Phases) > 0 && !slices.Contains(q.Phases, j.Phase) {
			continue
		}
		if slices.Contains(q.ExcludePhases, j.Phase) {
			continue
		}
		if !q.UpdatedBefore.IsZero() && !j.UpdatedAt.Before(q.UpdatedBefore) {
			continue
		}
		out = append(out, j.Clone())
	}
	slices.SortFunc(out, func(a, b *core.Job) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

func (r jobRepo) DeleteByTemplate(_ context.Context, tid string) (int, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	n := 0
	for id, j := range r.f.st.jobs {
		if j.TemplateID == tid {
			delete(r.f.st.jobs, id)
			n++
		}
	}
	return n, nil
}

// ---- templates

type tplRepo struct{ f *fakeStore }

func (r tplRepo) GetDefinition(_ context.Context, id string) (*core.Definition, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	d, ok := r.f.st.defs[id]
	if !ok {
		return nil, notFound("template " + id)
	}
	c := *d
	return &c, nil
}

func (r tplRepo) GetDefinitionByAlias(_ context.Context, alias string) (*core.Definition, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	for _, d := range r.f.st.defs {
		if alias != "" && d.Alias == alias {
			c := *d
			return &c, nil
		}
	}
	return nil, notFound("alias " + alias)
}

func (r tplRepo) ListDefinitions(_ context.Context) ([]*core.Definition, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []*core.Definition
	for _, d := range r.f.st.defs {
		c := *d
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *core.Definition) int { return strings.Compare(a.TemplateID, b.TemplateID) })
	return out, nil
}

func (r tplRepo) aliasTaken(alias, except string) bool {
	for id, d := range r.f.st.defs {
		if alias != "" && d.Alias == alias && id != except {
			return true
		}
	}
	return false
}

func (r tplRepo) CreateDefinition(_ context.Context, def *core.Definition) error {
	f := r.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.st.defs[def.TemplateID]; ok || r.aliasTaken(def.Alias, "") {
		return conflict("create template " + def.TemplateID)
	}
	c := *def
	c.CreatedAt = f.stamp(time.Time{})
	c.UpdatedAt = c.CreatedAt
	def.CreatedAt, def.UpdatedAt = c.CreatedAt, c.UpdatedAt
	f.st.defs[def.TemplateID] = &c
	return nil
}

func (r tplRepo) UpdateDefinition(_ context.Context, id string, fn func(*core.Definition) error) (*core.Definition, error) {
	f := r.f
	for range 64 {
		f.mu.Lock()
		cur, ok := f.st.defs[id]
		if !ok {
			f.mu.Unlock()
			return nil, notFound("template " + id)
		}
		read := *cur
		f.mu.Unlock()
		next := read
		if err := fn(&next); err != nil {
			return nil, err
		}
		f.mu.Lock()
		if !f.st.defs[id].UpdatedAt.Equal(read.UpdatedAt) {
			f.mu.Unlock()
			continue
		}
		if r.aliasTaken(next.Alias, id) {
			f.mu.Unlock()
			return nil, conflict("alias " + next.Alias)
		}
		next.TemplateID, next.CreatedAt = read.TemplateID, read.CreatedAt
		next.UpdatedAt = f.stamp(read.UpdatedAt)
		c := next
		f.st.defs[id] = &c
		f.mu.Unlock()
		return &next, nil
	}
	return nil, conflict("template " + id)
}

func (r tplRepo) DeleteDefinition(_ context.Context, id string) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	delete(r.f.st.defs, id)
	return nil
}

func (r tplRepo) SetReplicaCompat(_ context.Context, tpl, node string, st core.CompatStatus, at int64) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	rp := r.f.st.replicas[tpl][node]
	if rp == nil {
		return fmt.Errorf("replica %s/%s: %w", tpl, node, core.ErrNotFound)
	}
	rp.CompatStatus, rp.CompatCheckedUnix = st, at
	return nil
}

func (r tplRepo) UpsertReplica(_ context.Context, rp *core.Replica) error {
	f := r.f
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.st.replicas[rp.TemplateID]
	if m == nil {
		m = map[string]*core.Replica{}
		f.st.replicas[rp.TemplateID] = m
	}
	c := *rp
	if prev := m[rp.NodeID]; prev != nil {
		c.CreatedAt = prev.CreatedAt
		c.UpdatedAt = f.stamp(prev.UpdatedAt)
	} else {
		c.CreatedAt = f.stamp(time.Time{})
		c.UpdatedAt = c.CreatedAt
	}
	m[rp.NodeID] = &c
	return nil
}

func sortedReplicas(m map[string]*core.Replica) []*core.Replica {
	var out []*core.Replica
	for _, r := range m {
		c := *r
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *core.Replica) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

func (r tplRepo) ListReplicas(_ context.Context, tid string) ([]*core.Replica, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return sortedReplicas(r.f.st.replicas[tid]), nil
}

func (r tplRepo) ListReplicasByArtifact(_ context.Context, aid string) ([]*core.Replica, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []*core.Replica
	for _, tid := range slices.Sorted(maps.Keys(r.f.st.replicas)) {
		for _, rp := range sortedReplicas(r.f.st.replicas[tid]) {
			if rp.ArtifactID == aid {
				out = append(out, rp)
			}
		}
	}
	return out, nil
}

func (r tplRepo) DeleteReplicas(_ context.Context, tid string, nodeIDs ...string) (int, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	n := 0
	for node := range r.f.st.replicas[tid] {
		if len(nodeIDs) == 0 || slices.Contains(nodeIDs, node) {
			delete(r.f.st.replicas[tid], node)
			n++
		}
	}
	return n, nil
}

// ---- artifacts

type artRepo struct{ f *fakeStore }

func (r artRepo) Get(_ context.Context, id string) (*core.Artifact, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	a, ok := r.f.st.artifacts[id]
	if !ok {
		return nil, notFound("artifact " + id)
	}
	c := *a
	return &c, nil
}

func (r artRepo) GetByFingerprint(_ context.Context, fp string) (*core.Artifact, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	for _, a := range r.f.st.artifacts {
		if a.Fingerprint == fp {
			c := *a
			return &c, nil
		}
	}
	return nil, notFound("artifact fingerprint " + fp)
}

func (r artRepo) Create(_ context.Context, a *core.Artifact) error {
	f := r.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.st.artifacts {
		if o.ArtifactID == a.ArtifactID || (a.Fingerprint != "" && o.Fingerprint == a.Fingerprint) {
			return conflict("create artifact " + a.ArtifactID)
		}
	}
	c := *a
	c.CreatedAt = f.stamp(time.Time{})
	c.UpdatedAt = c.CreatedAt
	a.CreatedAt, a.UpdatedAt = c.CreatedAt, c.UpdatedAt
	f.st.artifacts[a.ArtifactID] = &c
	return nil
}

func (r artRepo) Update(_ context.Context, id string, fn func(*core.Artifact) error) (*core.Artifact, error) {
	f := r.f
	for range 64 {
		f.mu.Lock()
		cur, ok := f.st.artifacts[id]
		if !ok {
			f.mu.Unlock()
			return nil, notFound("artifact " + id)
		}
		read := *cur
		f.mu.Unlock()
		next := read
		if err := fn(&next); err != nil {
			return nil, err
		}
		if _, err := core.ParseArtifactStatus(string(next.Status)); err != nil {
			return nil, err
		}
		f.mu.Lock()
		now, ok := f.st.artifacts[id]
		if !ok {
			f.mu.Unlock()
			return nil, notFound("artifact " + id)
		}
		if !now.UpdatedAt.Equal(read.UpdatedAt) {
			f.mu.Unlock()
			continue
		}
		next.ArtifactID, next.CreatedAt = read.ArtifactID, read.CreatedAt
		next.UpdatedAt = f.stamp(read.UpdatedAt)
		c := next
		f.st.artifacts[id] = &c
		f.mu.Unlock()
		return &next, nil
	}
	return nil, conflict("artifact " + id)
}

func (r artRepo) Delete(_ context.Context, id string) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	delete(r.f.st.artifacts, id)
	return nil
}

func (r artRepo) ListByStatus(_ context.Context, st core.ArtifactStatus, before time.Time, limit int) ([]*core.Artifact, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []*core.Artifact
	for _, a := range r.f.st.artifacts {
		if a.Status == st && (before.IsZero() || a.UpdatedAt.Before(before)) {
			c := *a
			out = append(out, &c)
		}
	}
	slices.SortFunc(out, func(a, b *core.Artifact) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (r artRepo) CountReferences(_ context.Context, aid, exclude string) (int, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	n := 0
	for tid, m := range r.f.st.replicas {
		if tid == exclude {
			continue
		}
		for _, rp := range m {
			if rp.ArtifactID == aid {
				n++
			}
		}
	}
	for _, j := range r.f.st.jobs {
		if j.TemplateID != exclude && j.ArtifactID == aid && !j.Status.Terminal() {
			n++
		}
	}
	for _, d := range r.f.st.defs {
		if d.TemplateID != exclude && d.RootfsArtifactID == aid {
			n++
		}
	}
	return n, nil
}

// ---- placements

type plRepo struct{ f *fakeStore }

func (r plRepo) Add(_ context.Context, p core.Placement) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	m := r.f.st.placements[p.ArtifactID]
	if m == nil {
		m = map[string]core.Placement{}
		r.f.st.placements[p.ArtifactID] = m
	}
	if prev, ok := m[p.NodeID]; ok {
		p.CreatedAt = prev.CreatedAt
	}
	m[p.NodeID] = p
	return nil
}

func (r plRepo) List(_ context.Context, aid string) ([]core.Placement, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	m := r.f.st.placements[aid]
	var out []core.Placement
	for _, n := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[n])
	}
	return out, nil
}

func (r plRepo) Delete(_ context.Context, aid string) (int, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	n := len(r.f.st.placements[aid])
	delete(r.f.st.placements, aid)
	return n, nil
}

// ---- clock, ids, locker

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

// fakeLocker is an in-process Locker (the memlock adapter's contract).
type fakeLocker struct {
	mu    sync.Mutex
	slots map[string]chan struct{}
}

func newFakeLocker() *fakeLocker { return &fakeLocker{slots: map[string]chan struct{}{}} }

func (l *fakeLocker) slot(name string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.slots[name]
	if s == nil {
		s = make(chan struct{}, 1)
		l.slots[name] = s
	}
	return s
}

func (l *fakeLocker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	s := l.slot(name)
	select {
	case s <- struct{}{}:
		return &fakeLock{name: name, s: s}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("lock %s: %w", name, ctx.Err())
	}
}

func (l *fakeLocker) TryLock(_ context.Context, name string) (ports.Lock, error) {
	s := l.slot(name)
	select {
	case s <- struct{}{}:
		return &fakeLock{name: name, s: s}, nil
	default:
		return nil, fmt.Errorf("lock %s: %w", name, core.ErrLocked)
	}
}

type fakeLock struct {
	once sync.Once
	name string
	s    chan struct{}
}

func (k *fakeLock) Name() string { return k.name }
func (k *fakeLock) Unlock(context.Context) error {
	k.once.Do(func() { <-k.s })
	return nil
}

// noNodes is an empty node table: the template service never reads it.
type noNodes struct{}

func (noNodes) List(context.Context) ([]ports.NodeRecord, error) { return nil, nil }
func (noNodes) Upsert(context.Context, ports.NodeRecord) error {
	return fmt.Errorf("fake store has no node table: %w", core.ErrUnsupported)
}
func (noNodes) Delete(context.Context, string) error { return nil }
