package liveness_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/liveness"
	"github.com/cubesandbox/templatecenter/ports"
)

// sharedLocks is the in-process locker seen as a database's: its locks
// stand for other processes' (their owner locks).
type sharedLocks struct{ ports.Locker }

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type world struct {
	t      *testing.T
	ctx    context.Context
	clock  *clock
	store  *memstore.Store
	locker *memlock.Locker
	judge  *liveness.Judge
}

func newWorld(t *testing.T) *world {
	c := &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	w := &world{t: t, ctx: context.Background(), clock: c, store: memstore.New(memstore.WithClock(c)), locker: memlock.New()}
	w.judge = &liveness.Judge{Store: w.store, Locker: sharedLocks{w.locker}, Clock: c, Who: "test"}
	return w
}

// job writes a job of its own template in the given state.
func (w *world) job(id string, st core.JobStatus, ph core.Phase, owner string, op core.Operation) {
	w.t.Helper()
	j := &core.Job{JobID: id, TemplateID: "tpl-" + id, AttemptNo: 1, Operation: op, Status: st, Phase: ph, BuildOwner: owner}
	if st.Active() {
		j.ActiveKey = core.ActiveKeyFromImage(j.TemplateID)
	}
	if err := w.store.Jobs().Create(w.ctx, j); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) get(id string) *core.Job {
	w.t.Helper()
	j, err := w.store.Jobs().Get(w.ctx, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return j
}

// alive holds the owner lock of instance, as its process would.
func (w *world) alive(instance string) {
	w.t.Helper()
	if _, err := w.locker.Lock(w.ctx, liveness.OwnerLockName(instance)); err != nil {
		w.t.Fatal(err)
	}
}

func TestSweepFailsWhatWasAbandoned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  core.JobStatus
		phase   core.Phase
		owner   string
		op      core.Operation
		live    bool          // the owner holds its lock
		age     time.Duration // since the row was last touched
		failed  bool
		message string
	}{
		{"owner exited: at once", core.JobRunning, core.PhaseUploading, "tc-a", core.OpCreate, false, time.Second, true, "(tc-a) stopped"},
		{"owner exited while pending", core.JobPending, core.PhasePulling, "tc-a", core.OpCreate, false, time.Second, true, "(tc-a) stopped"},
		{"owner alive, heartbeat fresh", core.JobRunning, core.PhaseBuildingExt4, "tc-a", core.OpCreate, true, time.Minute, false, ""},
		{"owner alive, no heartbeat for the timeout: hung", core.JobRunning, core.PhasePulling, "tc-a", core.OpCreate, true, 2 * time.Minute, true, "no heartbeat"},
		{"no owner (an older data plane), heartbeat fresh", core.JobRunning, core.PhaseUnpacking, "", core.OpCreate, false, time.Minute, false, ""},
		{"no owner, no heartbeat for the timeout", core.JobRunning, core.PhaseUnpacking, "", core.OpCreate, false, 2 * time.Minute, true, "no heartbeat"},
		{"pending, never taken", core.JobPending, "", "", core.OpCreate, false, 2 * time.Minute, true, "never started"},
		{"pending, just created", core.JobPending, "", "", core.OpCreate, false, time.Second, false, ""},
		{"post-build phases are the master's resume's", core.JobRunning, core.PhaseDistributing, "tc-a", core.OpCreate, false, time.Hour, false, ""},
		{"a redo reusing its artifact", core.JobPending, core.PhaseDistributing, "", core.OpRedo, false, time.Hour, false, ""},
		{"migrate jobs are the master's", core.JobRunning, core.PhaseMigrating, "", core.OpMigrate, false, time.Hour, false, ""},
		{"BUILT is the master's", core.JobBuilt, core.PhaseReady, "tc-a", core.OpCreate, false, time.Hour, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if tc.live {
				w.alive(tc.owner)
			}
			w.job("j", tc.status, tc.phase, tc.owner, tc.op)
			w.clock.advance(tc.age)
			failed, err := w.judge.Sweep(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			j := w.get("j")
			if got := j.Status == core.JobFailed; got != tc.failed || (len(failed) == 1) != tc.failed {
				t.Fatalf("after the sweep: %s (swept %v); want failed %v", j.Status, failed, tc.failed)
			}
			if tc.failed && !strings.Contains(j.ErrorMessage, tc.message) {
				t.Errorf("message %q, want it to say %q", j.ErrorMessage, tc.message)
			}
			if tc.failed && j.ActiveKey != "" {
				t.Error("a failed job still holds its template's active key")
			}
		})
	}
}

// The process judging skips its own lock (it holds it) and judges its own
// builds by their heartbeat.
func TestSelfIsJudgedByItsHeartbeat(t *testing.T) {
	w := newWorld(t)
	w.judge.Self = "tc-me"
	w.job("mine", core.JobRunning, core.PhasePulling, "tc-me", core.OpCreate)
	w.clock.advance(time.Minute)
	if failed, err := w.judge.Sweep(w.ctx); err != nil || len(failed) != 0 {
		t.Fatalf("a fresh build of this process was failed: %v %v", failed, err)
	}
	w.clock.advance(time.Minute)
	if failed, err := w.judge.Sweep(w.ctx); err != nil || len(failed) != 1 {
		t.Fatalf("a build of this process without a heartbeat for 2m: failed %v, %v; want failed", failed, err)
	}
}

// FailIfAbandoned frees the job in a template's way at once when its data
// plane is gone, and leaves a live one alone.
func TestFailIfAbandoned(t *testing.T) {
	w := newWorld(t)
	w.alive("tc-live")
	w.job("dead", core.JobRunning, core.PhaseUploading, "tc-dead", core.OpCreate)
	w.job("live", core.JobRunning, core.PhaseUploading, "tc-live", core.OpCreate)
	stale := w.get("dead")
	for _, tc := range []struct {
		id   string
		free bool
	}{{"dead", true}, {"live", false}} {
		free, err := w.judge.FailIfAbandoned(w.ctx, w.get(tc.id))
		if err != nil || free != tc.free {
			t.Errorf("%s: free %v, %v; want %v", tc.id, free, err, tc.free)
		}
	}
	// A second call with the copy read before the first answers "free":
	// the job was failed meanwhile.
	if free, err := w.judge.FailIfAbandoned(w.ctx, stale); err != nil || !free {
		t.Errorf("already failed: free %v, %v", free, err)
	}
}

// A job that moved between the scan and the write is not failed: its
// build showed signs of life.
func TestGuardedWrite(t *testing.T) {
	w := newWorld(t)
	w.job("j", core.JobRunning, core.PhasePulling, "", core.OpCreate)
	w.clock.advance(2 * time.Minute)
	stale := w.get("j")
	if _, err := w.store.Jobs().Update(w.ctx, "j", func(*core.Job) error { return nil }); err != nil { // a heartbeat
		t.Fatal(err)
	}
	if free, err := w.judge.FailIfAbandoned(w.ctx, stale); err != nil || free {
		t.Fatalf("a job that heartbeat after it was read: free %v, %v", free, err)
	}
	if st := w.get("j").Status; st != core.JobRunning {
		t.Fatalf("status %s, want RUNNING", st)
	}
}

// HoldOwner keeps the owner lock until Release, and the judge sees it.
func TestHoldOwner(t *testing.T) {
	w := newWorld(t)
	o, err := liveness.HoldOwner(w.ctx, w.locker, "tc-x", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.job("j", core.JobRunning, core.PhasePulling, "tc-x", core.OpCreate)
	if failed, _ := w.judge.Sweep(w.ctx); len(failed) != 0 {
		t.Fatal("the build of a live owner was failed")
	}
	o.Release()
	if failed, _ := w.judge.Sweep(w.ctx); len(failed) != 1 {
		t.Fatal("the build of an owner that released its lock was not failed")
	}
}

// With an in-process locker (SQLite's one-process mode) another process's
// lock cannot be seen: its builds are judged by their heartbeat alone.
func TestProcessLocalLocksJudgeByHeartbeat(t *testing.T) {
	w := newWorld(t)
	w.judge.Locker = w.locker
	w.job("j", core.JobRunning, core.PhasePulling, "tc-elsewhere", core.OpCreate)
	if failed, _ := w.judge.Sweep(w.ctx); len(failed) != 0 {
		t.Fatal("a build was failed for a lock this process cannot see")
	}
	w.clock.advance(2 * time.Minute)
	if failed, _ := w.judge.Sweep(w.ctx); len(failed) != 1 {
		t.Fatal("a build without a heartbeat for 2m was not failed")
	}
}

// A data plane that starts fails at once the builds its previous run (the
// same work directory) left, unless that run still holds its lock.
func TestFailRestarted(t *testing.T) {
	w := newWorld(t)
	w.judge.Self = "tc-new"
	w.job("old", core.JobRunning, core.PhaseBuildingExt4, "tc-old", core.OpCreate)
	w.job("other", core.JobRunning, core.PhaseBuildingExt4, "tc-other", core.OpCreate)
	w.alive("tc-other")
	failed, err := w.judge.FailRestarted(w.ctx, "tc-old")
	if err != nil || len(failed) != 1 || failed[0] != "old" {
		t.Fatalf("failed %v, %v; want the previous run's job", failed, err)
	}
	if j := w.get("old"); !strings.Contains(j.ErrorMessage, "restarted") {
		t.Errorf("message %q", j.ErrorMessage)
	}
	if _, err := w.judge.FailRestarted(w.ctx, "tc-other"); err == nil || w.get("other").Status != core.JobRunning {
		t.Fatal("the builds of a process that still runs on the same work directory were failed")
	}
	w.judge.Locker = w.locker // process-local: the previous run is gone all the same
	w.job("old2", core.JobRunning, core.PhasePulling, "tc-old2", core.OpCreate)
	if failed, err := w.judge.FailRestarted(w.ctx, "tc-old2"); err != nil || len(failed) != 1 {
		t.Fatalf("process-local locks: failed %v, %v", failed, err)
	}
}
