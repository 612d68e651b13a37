package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

var txTests = []test{
	{"Tx/Commit", testTxCommit},
	{"Tx/RollbackOnError", testTxRollback},
	{"Tx/ConflictRollsBackEverything", testTxConflict},
	{"Tx/UpdatesInside", testTxUpdates},
	{"Tx/ConcurrentWritersSerialize", testTxConcurrent},
	{"Tx/OppositeOrderBothCommit", testTxOppositeOrder},
	{"Tx/UpdateFnCallsStore", testUpdateFnCallsStore},
}

func testTxCommit(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	j := newJob(tpl, 1)
	a := newArtifact()
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		if err := r.Templates().CreateDefinition(ctx, newDef(tpl, "")); err != nil {
			return err
		}
		if err := r.Jobs().Create(ctx, j); err != nil {
			return err
		}
		if err := r.Artifacts().Create(ctx, a); err != nil {
			return err
		}
		if err := r.Placements().Add(ctx, core.Placement{ArtifactID: a.ArtifactID, NodeID: "n1"}); err != nil {
			return err
		}
		// The transaction reads its own writes.
		got, err := r.Jobs().GetActive(ctx, j.ActiveKey)
		if err != nil {
			return err
		}
		if got.JobID != j.JobID {
			t.Errorf("GetActive inside the tx = %s, want %s", got.JobID, j.JobID)
		}
		// Nobody else sees them before the commit.
		if _, err := e.s.Jobs().Get(e.ctx, j.JobID); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Get outside the tx before commit = %v, want core.ErrNotFound", err)
		}
		if _, err := e.s.Templates().GetDefinition(e.ctx, tpl); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("GetDefinition outside the tx before commit = %v, want core.ErrNotFound", err)
		}
		return nil
	})
	must(t, err, "Tx")
	_, err = e.s.Templates().GetDefinition(e.ctx, tpl)
	must(t, err, "definition after commit")
	_, err = e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "job after commit")
	_, err = e.s.Artifacts().Get(e.ctx, a.ArtifactID)
	must(t, err, "artifact after commit")
	if ps, _ := e.s.Placements().List(e.ctx, a.ArtifactID); len(ps) != 1 {
		t.Fatalf("placements after commit: %d", len(ps))
	}
}

func testTxRollback(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	j := newJob(tpl, 1)
	a := newArtifact()
	boom := errors.New("boom")
	calls := 0
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		calls++
		must(t, r.Templates().CreateDefinition(ctx, newDef(tpl, uniq("alias-"))), "definition in tx")
		must(t, r.Jobs().Create(ctx, j), "job in tx")
		must(t, r.Artifacts().Create(ctx, a), "artifact in tx")
		must(t, r.Templates().UpsertReplica(ctx, newReplica(tpl, "n1", a.ArtifactID)), "replica in tx")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx returned %v, want fn's error", err)
	}
	if calls != 1 {
		t.Fatalf("fn ran %d times; an error of fn's own is not retried", calls)
	}
	_, err = e.s.Templates().GetDefinition(e.ctx, tpl)
	mustErrIs(t, err, core.ErrNotFound, "definition after rollback")
	_, err = e.s.Jobs().Get(e.ctx, j.JobID)
	mustErrIs(t, err, core.ErrNotFound, "job after rollback")
	_, err = e.s.Jobs().GetActive(e.ctx, j.ActiveKey)
	mustErrIs(t, err, core.ErrNotFound, "active key after rollback")
	_, err = e.s.Artifacts().Get(e.ctx, a.ArtifactID)
	mustErrIs(t, err, core.ErrNotFound, "artifact after rollback")
	if rs, _ := e.s.Templates().ListReplicas(e.ctx, tpl); len(rs) != 0 {
		t.Fatalf("replicas after rollback: %d", len(rs))
	}
	// The key is free: a job may take it now.
	createJob(t, e, newJob(tpl, 1))
}

func testTxConflict(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	holder := createJob(t, e, newJob(tpl, 1))
	other := uniq("tpl-")
	calls := 0
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		calls++
		if err := r.Templates().CreateDefinition(ctx, newDef(other, "")); err != nil {
			return err
		}
		return r.Jobs().Create(ctx, newJob(tpl, 2)) // the key is held
	})
	mustErrIs(t, err, core.ErrConflict, "Tx whose create conflicts")
	if calls != 1 {
		t.Fatalf("fn ran %d times; a unique-key conflict is not retried", calls)
	}
	_, err = e.s.Templates().GetDefinition(e.ctx, other)
	mustErrIs(t, err, core.ErrNotFound, "definition written before the conflict")
	got, err := e.s.Jobs().GetActive(e.ctx, holder.ActiveKey)
	must(t, err, "holder")
	if got.JobID != holder.JobID {
		t.Fatalf("active job is %s, want %s", got.JobID, holder.JobID)
	}
}

func testTxUpdates(t *testing.T, e *env) {
	j := createJob(t, e, newJob(uniq("tpl-"), 1))
	a := newArtifact()
	must(t, e.s.Artifacts().Create(e.ctx, a), "artifact")
	d := newDef(uniq("tpl-"), "")
	must(t, e.s.Templates().CreateDefinition(e.ctx, d), "definition")

	// Rolled back: nothing of the three updates stays.
	boom := errors.New("boom")
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		if _, err := r.Jobs().Update(ctx, j.JobID, func(x *core.Job) error { return x.Apply(core.Fail(core.PhasePulling, "x")) }); err != nil {
			return err
		}
		if _, err := r.Artifacts().Update(ctx, a.ArtifactID, func(x *core.Artifact) error { return x.MoveTo(core.ArtifactReady) }); err != nil {
			return err
		}
		if _, err := r.Templates().UpdateDefinition(ctx, d.TemplateID, func(x *core.Definition) error { x.Status = core.TemplateReady; return nil }); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want boom", err)
	}
	gj, _ := e.s.Jobs().Get(e.ctx, j.JobID)
	ga, _ := e.s.Artifacts().Get(e.ctx, a.ArtifactID)
	gd, _ := e.s.Templates().GetDefinition(e.ctx, d.TemplateID)
	if gj.Status != core.JobPending || gj.ActiveKey == "" || ga.Status != core.ArtifactPending || gd.Status != core.TemplatePending {
		t.Fatalf("rolled-back updates stayed: job %s key %q, artifact %s, definition %s", gj.Status, gj.ActiveKey, ga.Status, gd.Status)
	}

	// Committed: all three are there.
	err = e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		if _, err := r.Jobs().Update(ctx, j.JobID, func(x *core.Job) error { return x.Apply(core.Fail(core.PhasePulling, "x")) }); err != nil {
			return err
		}
		if _, err := r.Artifacts().Update(ctx, a.ArtifactID, func(x *core.Artifact) error { return x.MoveTo(core.ArtifactReady) }); err != nil {
			return err
		}
		_, err := r.Templates().UpdateDefinition(ctx, d.TemplateID, func(x *core.Definition) error { x.Status = core.TemplateReady; return nil })
		return err
	})
	must(t, err, "Tx")
	gj, _ = e.s.Jobs().Get(e.ctx, j.JobID)
	ga, _ = e.s.Artifacts().Get(e.ctx, a.ArtifactID)
	gd, _ = e.s.Templates().GetDefinition(e.ctx, d.TemplateID)
	if gj.Status != core.JobFailed || gj.ActiveKey != "" || ga.Status != core.ArtifactReady || gd.Status != core.TemplateReady {
		t.Fatalf("committed updates missing: job %s key %q, artifact %s, definition %s", gj.Status, gj.ActiveKey, ga.Status, gd.Status)
	}
}

// testTxConcurrent increments a job and an artifact from transactions and
// from plain updates at once: none of the increments is lost.
func testTxConcurrent(t *testing.T, e *env) {
	j := newJob(uniq("tpl-"), 1)
	j.Progress = 0
	createJob(t, e, j)
	a := newArtifact()
	a.Ext4SizeBytes = 0
	must(t, e.s.Artifacts().Create(e.ctx, a), "create artifact")
	incJob := func(x *core.Job) error { x.Progress++; time.Sleep(fnPause); return nil }
	incArt := func(x *core.Artifact) error { x.Ext4SizeBytes++; time.Sleep(fnPause); return nil }
	const writers = 12
	errs := race(writers, func(i int) error {
		if i%2 == 1 {
			if _, err := e.s.Artifacts().Update(e.ctx, a.ArtifactID, incArt); err != nil {
				return err
			}
			_, err := e.s.Jobs().Update(e.ctx, j.JobID, incJob)
			return err
		}
		return e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
			if _, err := r.Artifacts().Update(ctx, a.ArtifactID, incArt); err != nil {
				return err
			}
			_, err := r.Jobs().Update(ctx, j.JobID, incJob)
			return err
		})
	})
	for i, err := range errs {
		must(t, err, fmt.Sprintf("writer %d", i))
	}
	gj, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "Get job")
	ga, err := e.s.Artifacts().Get(e.ctx, a.ArtifactID)
	must(t, err, "Get artifact")
	if gj.Progress != writers || ga.Ext4SizeBytes != writers {
		t.Fatalf("after %d increments job progress %d, artifact size %d: increments were lost", writers, gj.Progress, ga.Ext4SizeBytes)
	}
}

// testTxOppositeOrder runs transactions that update two rows in opposite
// orders. Where the database picks a deadlock victim, Tx runs it again; in
// the end every transaction committed exactly once.
func testTxOppositeOrder(t *testing.T, e *env) {
	x, y := newArtifact(), newArtifact()
	for _, a := range []*core.Artifact{x, y} {
		a.Ext4SizeBytes = 0
		must(t, e.s.Artifacts().Create(e.ctx, a), "create artifact")
	}
	inc := func(a *core.Artifact) error { a.Ext4SizeBytes++; return nil }
	const rounds = 5
	errs := race(2, func(i int) error {
		first, second := x.ArtifactID, y.ArtifactID
		if i == 1 {
			first, second = second, first
		}
		for range rounds {
			err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
				if _, err := r.Artifacts().Update(ctx, first, inc); err != nil {
					return err
				}
				_, err := r.Artifacts().Update(ctx, second, inc)
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for i, err := range errs {
		must(t, err, fmt.Sprintf("transaction loop %d", i))
	}
	for _, a := range []*core.Artifact{x, y} {
		got, err := e.s.Artifacts().Get(e.ctx, a.ArtifactID)
		must(t, err, "Get")
		if got.Ext4SizeBytes != 2*rounds {
			t.Fatalf("artifact size %d, want %d: every transaction commits exactly once", got.Ext4SizeBytes, 2*rounds)
		}
	}
}

// testUpdateFnCallsStore: the fn of an Update may read the store, and
// inside a transaction use the transaction's Repos (reads and writes), as
// core does (CountReferences from an artifact Update). None of it may
// deadlock, and what fn reads is right.
func testUpdateFnCallsStore(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	a := newArtifact()
	must(t, e.s.Artifacts().Create(e.ctx, a), "create artifact")
	must(t, e.s.Templates().UpsertReplica(e.ctx, newReplica(tpl, "n1", a.ArtifactID)), "replica")
	d := newDef(tpl, "")
	must(t, e.s.Templates().CreateDefinition(e.ctx, d), "definition")
	j := newJob(tpl, 1)
	j.ArtifactID = a.ArtifactID
	createJob(t, e, j)
	must(t, e.s.Templates().UpsertReplica(e.ctx, newReplica(uniq("tpl-"), "n1", a.ArtifactID)), "second replica")
	// Two replicas and the active job; the transaction adds a replica.
	const refs = 3

	wantRefs := func(r ports.Repos, ctx context.Context, want int) error {
		n, err := r.Artifacts().CountReferences(ctx, a.ArtifactID, "")
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("CountReferences inside fn = %d, want %d", n, want)
		}
		return nil
	}
	cases := []struct {
		name string
		run  func() error
	}{
		{"artifact update reads the store", func() error {
			_, err := e.s.Artifacts().Update(e.ctx, a.ArtifactID, func(x *core.Artifact) error {
				if _, err := e.s.Artifacts().Get(e.ctx, a.ArtifactID); err != nil {
					return err
				}
				x.LastError = "outside"
				return wantRefs(e.s, e.ctx, refs)
			})
			return err
		}},
		{"job update reads the store", func() error {
			_, err := e.s.Jobs().Update(e.ctx, j.JobID, func(x *core.Job) error {
				if _, err := e.s.Jobs().Get(e.ctx, j.JobID); err != nil {
					return err
				}
				x.ErrorMessage = "outside"
				return wantRefs(e.s, e.ctx, refs)
			})
			return err
		}},
		{"definition update reads the store", func() error {
			_, err := e.s.Templates().UpdateDefinition(e.ctx, tpl, func(x *core.Definition) error {
				if _, err := e.s.Templates().GetDefinition(e.ctx, tpl); err != nil {
					return err
				}
				x.LastError = "outside"
				return wantRefs(e.s, e.ctx, refs)
			})
			return err
		}},
		{"updates inside a tx use its repos", func() error {
			return e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
				if err := r.Templates().UpsertReplica(ctx, newReplica(uniq("tpl-"), "n2", a.ArtifactID)); err != nil {
					return err
				}
				_, err := r.Artifacts().Update(ctx, a.ArtifactID, func(x *core.Artifact) error {
					// The tx's own replica counts; the committed state is
					// what the outer store sees.
					if err := wantRefs(r, ctx, refs+1); err != nil {
						return err
					}
					if err := wantRefs(e.s, e.ctx, refs); err != nil {
						return fmt.Errorf("outer store: %w", err)
					}
					if _, err := r.Artifacts().Get(ctx, a.ArtifactID); err != nil {
						return err
					}
					if err := r.Placements().Add(ctx, core.Placement{ArtifactID: a.ArtifactID, NodeID: "n-in-fn"}); err != nil {
						return err
					}
					_, err := r.Jobs().Update(ctx, j.JobID, func(y *core.Job) error {
						_, err := r.Templates().UpdateDefinition(ctx, tpl, func(z *core.Definition) error {
							z.LastError = "inside"
							return nil
						})
						y.ErrorMessage = "inside"
						return err
					})
					x.LastError = "inside"
					return err
				})
				return err
			})
		}},
	}
	for _, c := range cases {
		must(t, c.run(), c.name)
	}
	ga, err := e.s.Artifacts().Get(e.ctx, a.ArtifactID)
	must(t, err, "Get artifact")
	gj, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "Get job")
	gd, err := e.s.Templates().GetDefinition(e.ctx, tpl)
	must(t, err, "Get definition")
	ps, err := e.s.Placements().List(e.ctx, a.ArtifactID)
	must(t, err, "List placements")
	if ga.LastError != "inside" || gj.ErrorMessage != "inside" || gd.LastError != "inside" || len(ps) != 1 {
		t.Fatalf("writes made from inside fns are missing: artifact %q, job %q, definition %q, %d placements",
			ga.LastError, gj.ErrorMessage, gd.LastError, len(ps))
	}
}
