package data_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func newReconciler(d *db, l *locks, cfg data.ReconcilerConfig) *data.Reconciler {
	cfg.Logger = quiet
	return &data.Reconciler{Store: d, Locker: l, Clock: d.clock, Config: cfg}
}

func TestTiersFailJobsJustOverTheirThreshold(t *testing.T) {
	cfg := data.ReconcilerConfig{PendingStaleAfter: 10 * time.Minute, PullingStaleAfter: 30 * time.Minute, RunningStaleAfter: time.Hour}
	cases := []struct {
		status core.JobStatus
		phase  core.Phase
		after  time.Duration
		msg    string
	}{
		{core.JobPending, core.PhasePulling, 10 * time.Minute, "stayed PENDING"},
		{core.JobPending, "", 10 * time.Minute, "stayed PENDING"},
		{core.JobRunning, core.PhasePulling, 30 * time.Minute, "while pulling the source image"},
		{core.JobRunning, core.PhaseUnpacking, time.Hour, "no progress report for 1h0m0s"},
		{core.JobRunning, core.PhaseBuildingExt4, time.Hour, "no progress report for 1h0m0s"},
		{core.JobRunning, core.PhaseUploading, time.Hour, "no progress report for 1h0m0s"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s", tc.status, tc.phase), func(t *testing.T) {
			d, l := newDB(t0), newLocks()
			d.addJob(t, "over", tc.status, tc.phase, t0.Add(-tc.after-time.Second))
			d.addJob(t, "under", tc.status, tc.phase, t0.Add(-tc.after+time.Second))
			d.addJob(t, "exactly", tc.status, tc.phase, t0.Add(-tc.after))
			rep, err := newReconciler(d, l, cfg).RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.Failed, []string{"over"}) {
				t.Fatalf("failed %v, want [over]", rep.Failed)
			}
			j := d.job("over")
			if j.Status != core.JobFailed || j.Phase != tc.phase || j.Progress != 100 || j.ActiveKey != "" || !strings.Contains(j.ErrorMessage, tc.msg) {
				t.Fatalf("over = %+v, want FAILED in %s with a message containing %q", j, tc.phase, tc.msg)
			}
			for _, id := range []string{"under", "exactly"} {
				if j := d.job(id); j.Status != tc.status || j.ErrorMessage != "" {
					t.Fatalf("%s was touched: %+v", id, j)
				}
			}
			l.released(t, data.LockName)
		})
	}
}

func TestControlPlaneJobsAreNeverSwept(t *testing.T) {
	d, l := newDB(t0), newLocks()
	old := t0.Add(-30 * 24 * time.Hour)
	keep := map[string][2]string{
		"built":             {string(core.JobBuilt), string(core.PhaseReady)},
		"built-pulling":     {string(core.JobBuilt), string(core.PhasePulling)},
		"distributing":      {string(core.JobRunning), string(core.PhaseDistributing)},
		"creating-template": {string(core.JobRunning), string(core.PhaseCreatingTemplate)},
		"snapshotting":      {string(core.JobRunning), string(core.PhaseSnapshotting)},
		"registering":       {string(core.JobRunning), string(core.PhaseRegistering)},
		"running-ready":     {string(core.JobRunning), string(core.PhaseReady)},
		"migrating":         {string(core.JobRunning), string(core.PhaseMigrating)},
		"pending-migrate":   {string(core.JobPending), string(core.PhaseMigrating)},
		"redo-distributing": {string(core.JobPending), string(core.PhaseDistributing)},
		"ready":             {string(core.JobReady), string(core.PhaseReady)},
		"failed":            {string(core.JobFailed), string(core.PhasePulling)},
	}
	for id, sp := range keep {
		d.addJob(t, id, core.JobStatus(sp[0]), core.Phase(sp[1]), old)
	}
	rep, err := newReconciler(d, l, data.ReconcilerConfig{}).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failed) != 0 || rep.MovedOn != 0 {
		t.Fatalf("report %+v, want nothing swept", rep)
	}
	for id, sp := range keep {
		if j := d.job(id); string(j.Status) != sp[0] || !j.UpdatedAt.Equal(old) {
			t.Fatalf("%s was touched: %+v", id, j)
		}
	}
}

func TestGuardedUpdateLosesToAProgressReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		race func(t *testing.T, d *db)
	}{
		{"report lands between scan and update", func(t *testing.T, d *db) {
			d.listStale = func(orig ports.JobRepository, ctx context.Context, q ports.StaleQuery) ([]*core.Job, error) {
				out, err := orig.ListStale(ctx, q)
				if len(out) > 0 { // a heartbeat: same status and phase, fresh updated_at
					if _, herr := orig.Update(ctx, "job", func(*core.Job) error { return nil }); herr != nil {
						t.Error(herr)
					}
				}
				return out, err
			}
		}},
		{"report lands during the update", func(t *testing.T, d *db) {
			done := false
			d.interfere = func(ctx context.Context, jobs ports.JobRepository, id string) {
				if done {
					return
				}
				done = true
				if _, err := jobs.Update(ctx, id, func(j *core.Job) error { j.Phase = core.PhaseUnpacking; return nil }); err != nil {
					t.Error(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, l := newDB(t0), newLocks()
			d.addJob(t, "job", core.JobRunning, core.PhasePulling, t0.Add(-2*time.Hour))
			tc.race(t, d)
			rep, err := newReconciler(d, l, data.ReconcilerConfig{}).RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Failed) != 0 || rep.MovedOn != 1 {
				t.Fatalf("report %+v, want the job skipped as moved on", rep)
			}
			if j := d.job("job"); j.Status != core.JobRunning {
				t.Fatalf("job = %+v, want still RUNNING", j)
			}
		})
	}
}

func TestScanLimitBoundsATick(t *testing.T) {
	d, l := newDB(t0), newLocks()
	for i := range 5 {
		d.addJob(t, fmt.Sprintf("job-%d", i), core.JobPending, core.PhasePulling, t0.Add(-time.Hour-time.Duration(i)*time.Minute))
	}
	rep, err := newReconciler(d, l, data.ReconcilerConfig{ScanLimit: 2}).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The oldest first.
	if !slices.Equal(rep.Failed, []string{"job-4", "job-3"}) {
		t.Fatalf("failed %v", rep.Failed)
	}
}

func TestLockHeldElsewhereSkipsTheTick(t *testing.T) {
	d, l := newDB(t0), newLocks()
	l.holdElsewhere(t, data.LockName)
	d.addJob(t, "job", core.JobPending, core.PhasePulling, t0.Add(-time.Hour))
	d.addArtifact(t, "rfs-1", core.ArtifactCleanupPending, t0.Add(-time.Hour))
	var deletes int
	rep, err := newReconciler(d, l, data.ReconcilerConfig{DeleteArtifact: func(context.Context, string) error {
		deletes++
		return nil
	}}).RunOnce(context.Background())
	if err != nil || !rep.Skipped {
		t.Fatalf("report %+v, err %v, want skipped", rep, err)
	}
	if d.scans() != 0 || deletes != 0 || d.job("job").Status != core.JobPending {
		t.Fatal("a skipped tick scanned or changed something")
	}
}

func TestCleanupPendingBackstop(t *testing.T) {
	d, l := newDB(t0), newLocks()
	old, young := t0.Add(-6*time.Minute), t0.Add(-4*time.Minute)
	d.addArtifact(t, "rfs-old", core.ArtifactCleanupPending, old)
	d.addArtifact(t, "rfs-young", core.ArtifactCleanupPending, young)
	d.addArtifact(t, "rfs-referenced", core.ArtifactCleanupPending, old)
	d.addReference(t, "rfs-referenced")
	d.addArtifact(t, "rfs-placed", core.ArtifactCleanupPending, old)
	d.addPlacement(t, "rfs-placed", "node-1")
	d.addArtifact(t, "rfs-half-deleted", core.ArtifactDeleting, old)
	d.addArtifact(t, "rfs-ready", core.ArtifactReady, old)
	d.addArtifact(t, "rfs-broken", core.ArtifactCleanupPending, old)

	var called []string
	rep, err := newReconciler(d, l, data.ReconcilerConfig{DeleteArtifact: func(_ context.Context, id string) error {
		called = append(called, id)
		if id == "rfs-broken" {
			return errors.New("s3: 503")
		}
		return nil
	}}).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(called)
	if !slices.Equal(called, []string{"rfs-broken", "rfs-half-deleted", "rfs-old"}) {
		t.Fatalf("deleter called for %v", called)
	}
	slices.Sort(rep.Deleted)
	if !slices.Equal(rep.Deleted, []string{"rfs-half-deleted", "rfs-old"}) || rep.DeleteErrors != 1 || rep.Kept != 2 {
		t.Fatalf("report %+v", rep)
	}
}

func TestRunTicksUntilCancelled(t *testing.T) {
	d, l := newDB(t0), newLocks()
	var ticks atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	d.listStale = func(orig ports.JobRepository, c context.Context, q ports.StaleQuery) ([]*core.Job, error) {
		if q.Statuses[0] == core.JobPending && ticks.Add(1) == 3 {
			cancel()
		}
		return orig.ListStale(c, q)
	}
	done := make(chan error, 1)
	go func() { done <- newReconciler(d, l, data.ReconcilerConfig{Interval: time.Millisecond}).Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop after cancellation")
	}
	if ticks.Load() < 3 {
		t.Fatalf("%d ticks", ticks.Load())
	}

	// Disabled: returns at once without scanning.
	d2 := newDB(t0)
	if err := newReconciler(d2, newLocks(), data.ReconcilerConfig{Disabled: true}).Run(context.Background()); err != nil || d2.scans() != 0 {
		t.Fatalf("disabled Run: err %v, %d scans", err, d2.scans())
	}
}

// TestAbandonedBuildingArtifactsAreFailed: a template center died while
// building an artifact and left its row BUILDING. The reconciler must fail
// the row once no build holds its fingerprint lock (before, only a later
// build of the same spec reclaimed it, and GC never saw it). A row whose
// build is alive (lock held) or that is young is left alone.
func TestAbandonedBuildingArtifactsAreFailed(t *testing.T) {
	d, l := newDB(t0), newLocks()
	old := t0.Add(-2 * time.Hour)
	d.addArtifact(t, "rfs-dead", core.ArtifactBuilding, old)
	d.addArtifact(t, "rfs-alive", core.ArtifactBuilding, old)
	l.holdElsewhere(t, data.LockPrefix+"fp-rfs-alive")
	d.addArtifact(t, "rfs-young", core.ArtifactBuilding, t0.Add(-time.Minute))
	d.addArtifact(t, "rfs-pending", core.ArtifactPending, old)
	rep, err := newReconciler(d, l, data.ReconcilerConfig{}).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.AbandonedArtifacts)
	if !slices.Equal(rep.AbandonedArtifacts, []string{"rfs-dead", "rfs-pending"}) {
		t.Fatalf("abandoned %v, want rfs-dead and rfs-pending", rep.AbandonedArtifacts)
	}
	for id, want := range map[string]core.ArtifactStatus{"rfs-dead": core.ArtifactFailed, "rfs-pending": core.ArtifactFailed,
		"rfs-alive": core.ArtifactBuilding, "rfs-young": core.ArtifactBuilding} {
		a, _ := d.artifact(id)
		if a.Status != want {
			t.Errorf("%s is %s, want %s", id, a.Status, want)
		}
	}
	if a, _ := d.artifact("rfs-dead"); !strings.Contains(a.LastError, "abandoned") {
		t.Errorf("last error %q", a.LastError)
	}
}

// TestStalenessUsesTheStoresClock: the reconciler's host clock runs two
// hours ahead of the database's. A job the data plane reported a minute
// ago (by the database's clock, which stamps every row) is not stale;
// before, the host's clock made it look two hours old and it was failed.
func TestStalenessUsesTheStoresClock(t *testing.T) {
	d, l := newDB(t0), newLocks()
	d.addJob(t, "fresh", core.JobRunning, core.PhaseUnpacking, t0.Add(-time.Minute))
	d.addJob(t, "stale", core.JobRunning, core.PhaseUnpacking, t0.Add(-2*time.Hour))
	rec := newReconciler(d, l, data.ReconcilerConfig{})
	rec.Clock = &portsmock.ClockMock{NowFunc: func() time.Time { return t0.Add(2 * time.Hour) }}
	rep, err := rec.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Failed, []string{"stale"}) {
		t.Fatalf("failed %v, want only the job that is stale by the store's clock", rep.Failed)
	}
}
