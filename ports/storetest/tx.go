package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

var txTests = []test{
	{"Tx/Commit", testTxCommit},
	{"Tx/RollbackOnError", testTxRollback},
	{"Tx/ConflictRollsBackEverything", testTxConflict},
	{"Tx/UpdatesInside", testTxUpdates},
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
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		must(t, r.Templates().CreateDefinition(ctx, newDef(tpl, uniq("alias-"))), "definition in tx")
		must(t, r.Jobs().Create(ctx, j), "job in tx")
		must(t, r.Artifacts().Create(ctx, a), "artifact in tx")
		must(t, r.Templates().UpsertReplica(ctx, newReplica(tpl, "n1", a.ArtifactID)), "replica in tx")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx returned %v, want fn's error", err)
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
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		if err := r.Templates().CreateDefinition(ctx, newDef(other, "")); err != nil {
			return err
		}
		return r.Jobs().Create(ctx, newJob(tpl, 2)) // the key is held
	})
	mustErrIs(t, err, core.ErrConflict, "Tx whose create conflicts")
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
