package control_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// losableLocker hands out the in-process locker's locks with a Lost
// channel the test closes, as a dead database session would.
type losableLocker struct {
	ports.Locker
	mu   sync.Mutex
	lost map[string]chan struct{}
	held map[string]ports.Lock // the in-process lock behind each name
}

type losableLock struct {
	ports.Lock
	lost chan struct{}
}

func (l losableLock) Lost() <-chan struct{} { return l.lost }

func (l *losableLocker) wrap(k ports.Lock, err error) (ports.Lock, error) {
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	l.lost[k.Name()] = ch
	if l.held == nil {
		l.held = map[string]ports.Lock{}
	}
	l.held[k.Name()] = k
	return losableLock{Lock: k, lost: ch}, nil
}

func (l *losableLocker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	return l.wrap(l.Locker.Lock(ctx, name))
}

func (l *losableLocker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	return l.wrap(l.Locker.TryLock(ctx, name))
}

func (l *losableLocker) lose(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.lost[name])
}

// die is what the death of the lock's database session does: the holder
// is told (Lost) and the name is free for anyone else at once.
func (l *losableLocker) die(name string) {
	l.mu.Lock()
	k := l.held[name]
	l.mu.Unlock()
	l.lose(name)
	_ = k.Unlock(context.Background())
}

// TestResumeStopsWhenItsLockIsLost: the artifact lock's session dies while
// the resume distributes. The resume must stop (another master may hold
// the lock now) without writing the definition, a snapshot or a FAILED
// status another master's run would trip over; the sweep then finishes
// the job. Before, nothing watched the lock and the holder carried on.
func TestResumeStopsWhenItsLockIsLost(t *testing.T) {
	e := newEnv(t, "node-1")
	ll := &losableLocker{Locker: e.locker, lost: map[string]chan struct{}{}}
	e.svc.Locker = ll
	inCreate := make(chan struct{})
	var first sync.Once
	stalled := true
	e.agent.CreateImageFunc = func(ctx context.Context, _ ports.Node, _ core.NodeArtifact) error {
		if !stalled {
			return nil
		}
		first.Do(func() { close(inCreate) })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Second):
			return nil
		}
	}
	job := e.create(request("tpl-lost"))
	e.build(job.JobID, fpA)
	<-inCreate
	ll.lose("tc_resume_" + aidOf(fpA))
	e.wait()
	j := e.job(job.JobID)
	if j.Status == core.JobFailed || j.Status == core.JobReady {
		t.Fatalf("status = %s after losing the lock; want the job left for the sweep", j.Status)
	}
	if _, err := e.store.Templates().GetDefinition(e.ctx, "tpl-lost"); err == nil {
		t.Error("the resume wrote the definition after losing its lock")
	}
	eq(t, "snapshots", len(e.agent.AppSnapshotCalls()), 0)

	stalled = false
	// A negative age takes the job however recently it was touched.
	if n, err := e.svc.SweepBuilt(e.ctx, -time.Minute); err != nil || n != 1 {
		t.Fatalf("SweepBuilt = %d, %v; want the job resumed", n, err)
	}
	eq(t, "status after the sweep", e.job(job.JobID).Status, core.JobReady)
}

// TestStaleRunCannotPublish: while a resume distributes, a later run
// claims the job (what another master does once this one's lock session
// died, before this one notices). The first run's remaining writes carry
// its old run number and are refused: it neither snapshots nor publishes
// the template, and writes no FAILED over the new run's work. Before,
// nothing told the runs apart and the stale one went on to READY.
func TestStaleRunCannotPublish(t *testing.T) {
	e := newEnv(t, "node-1")
	inCreate, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.agent.CreateImageFunc = func(context.Context, ports.Node, core.NodeArtifact) error {
		once.Do(func() { close(inCreate) })
		<-release
		return nil
	}
	job := e.create(request("tpl-stale"))
	e.build(job.JobID, fpA)
	<-inCreate
	took, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { j.Fence++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	e.wait()
	j := e.job(job.JobID)
	if j.Status == core.JobReady || j.Status == core.JobFailed {
		t.Fatalf("status = %s: the superseded run wrote the job's end", j.Status)
	}
	eq(t, "fence", j.Fence, took.Fence)
	if d, err := e.store.Templates().GetDefinition(e.ctx, "tpl-stale"); err == nil && d.Status == core.TemplateReady {
		t.Error("the superseded run published the template READY")
	}
	eq(t, "snapshots", len(e.agent.AppSnapshotCalls()), 0)
}

// TestStaleRunCannotWriteReplicas: the replica rows are what sandboxes are
// scheduled by, so a superseded run must not write them either. While the
// first run copies the artifact, a later run claims the job and records
// the node READY; the first run's copy then returns. Before, its replica
// write (DISTRIBUTED, which counts as not ready) went through unfenced and
// took the node out of service.
func TestStaleRunCannotWriteReplicas(t *testing.T) {
	e := newEnv(t, "node-1")
	inCreate, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.agent.CreateImageFunc = func(context.Context, ports.Node, core.NodeArtifact) error {
		once.Do(func() { close(inCreate) })
		<-release
		return nil
	}
	job := e.create(request("tpl-rep"))
	e.build(job.JobID, fpA)
	<-inCreate
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { j.Fence++; return nil }); err != nil {
		t.Fatal(err)
	}
	newer := &core.Replica{TemplateID: "tpl-rep", NodeID: "node-1", NodeIP: "10.0.0.1", Status: core.ReplicaReady,
		Phase: core.ReplicaPhaseReady, ArtifactID: aidOf(fpA), LastJobID: "the newer run", SnapshotPath: "/snap/new"}
	if err := e.store.Templates().UpsertReplica(e.ctx, newer); err != nil {
		t.Fatal(err)
	}
	close(release)
	e.wait()
	r := e.replicas("tpl-rep")["node-1"]
	if r == nil || r.Status != core.ReplicaReady || r.LastJobID != "the newer run" {
		t.Fatalf("node-1 replica = %+v; the superseded run overwrote the newer run's row", r)
	}
}
