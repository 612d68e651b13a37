package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// otherMaster is a second control plane on the same database and locks
// (another cubemaster replica).
func (e *env) otherMaster() *control.Service {
	return &control.Service{
		Store: e.store, Locker: e.locker, Nodes: e.dir, Agent: e.agent, DataPlane: e.disp,
		IDs: e.ids, Clock: e.clock, Config: control.Config{DistributionWorkers: 2},
	}
}

// TestDeleteStopsWhenItsLockIsLost: the template lock's session dies while
// a delete asks the nodes to drop the template, and another master's redo
// takes the lock at once, finds the template intact and snapshots it on
// the node again. The delete must stop: its lock no longer keeps anyone
// out, and carrying on would destroy the artifact and delete every row,
// the redo's job included (a job id handed to a caller that no longer
// exists, a node template no row knows about). Before, Delete never
// watched its lock: it went on and reported success.
func TestDeleteStopsWhenItsLockIsLost(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-dl", fpA)
	ll := &losableLocker{Locker: e.locker, lost: map[string]chan struct{}{}}
	e.svc.Locker = ll
	other := e.otherMaster()
	var redo *core.Job
	var first atomic.Bool
	e.agent.CleanupTemplateFunc = func(context.Context, ports.Node, string, string) error {
		// The other master's snapshot cleans up too; only the delete's
		// first call plays the session's death.
		if first.CompareAndSwap(false, true) {
			ll.die("tc_template_tpl-dl")
			var err error
			if redo, err = other.Redo(e.ctx, control.RedoRequest{RequestID: "redo-dl", TemplateID: "tpl-dl"}); err != nil {
				t.Errorf("the other master's redo: %v", err)
			}
			if err := other.Wait(e.ctx); err != nil {
				t.Error(err)
			}
		}
		return nil
	}
	err := e.svc.Delete(e.ctx, "tpl-dl", "")
	if err == nil {
		t.Error("Delete succeeded after losing its lock")
	}
	if redo == nil {
		t.Fatal("no redo")
	}
	if _, gerr := e.store.Jobs().Get(e.ctx, redo.JobID); gerr != nil {
		t.Errorf("the other master's redo job: %v", gerr)
	}
	if d, gerr := e.store.Templates().GetDefinition(e.ctx, "tpl-dl"); gerr != nil || d.Status != core.TemplateReady {
		t.Errorf("definition = %+v, %v; want the redone template READY", d, gerr)
	}
	if a, gerr := e.store.Artifacts().Get(e.ctx, aidOf(fpA)); gerr != nil || a.Status != core.ArtifactReady {
		t.Errorf("artifact = %+v, %v; want READY", a, gerr)
	}
	if !e.onNode["node-1"][aidOf(fpA)] {
		t.Error("the node's copy of the artifact was destroyed")
	}
}

// TestCreateTemplateStopsWhenItsLockIsLost: a synchronous create holds the
// template's lock while every node snapshots; once the lock is lost it
// must not record an outcome over what another master writes meanwhile.
// Before, the outcome was written even after the lock was gone.
func TestCreateTemplateStopsWhenItsLockIsLost(t *testing.T) {
	e := newEnv(t, "node-1")
	ll := &losableLocker{Locker: e.locker, lost: map[string]chan struct{}{}}
	e.svc.Locker = ll
	e.agent.AppSnapshotFunc = func(context.Context, ports.Node, *core.SandboxRequest, string) (ports.SnapshotResult, error) {
		ll.die("tc_template_tpl-sync")
		// Another master replaces the template meanwhile: its definition
		// is the one that counts now.
		if _, err := e.store.Templates().UpdateDefinition(e.ctx, "tpl-sync", func(d *core.Definition) error {
			d.Status, d.LastError = core.TemplateFailed, "replaced by another master"
			return nil
		}); err != nil {
			t.Error(err)
		}
		return ports.SnapshotResult{SnapshotPath: "/snap/x"}, nil
	}
	raw := json.RawMessage(`{"annotations":{"cube.master.appsnapshot.template.id":"tpl-sync"},"containers":[{"name":"c","image":{"image":"busybox"}}]}`)
	req, err := control.ParseCreateTemplateRequest(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.CreateTemplate(e.ctx, req)
	if err == nil {
		t.Error("CreateTemplate succeeded after losing its lock")
	}
	d := e.def("tpl-sync")
	eq(t, "definition status", d.Status, core.TemplateFailed)
	eq(t, "definition error", d.LastError, "replaced by another master")
}

// TestSubmitStopsWhenItsLockIsLost: a submit whose template lock is gone
// before it writes writes nothing.
func TestSubmitStopsWhenItsLockIsLost(t *testing.T) {
	e := newEnv(t, "node-1")
	e.svc.Locker = lostOnTake{e.locker}
	_, err := e.svc.SubmitFromImage(e.ctx, request("tpl-sub"))
	if err == nil {
		t.Fatal("submit succeeded without its lock")
	}
	if _, err := e.store.Jobs().Latest(e.ctx, "tpl-sub"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("a job was written: %v", err)
	}
}

// lostOnTake hands out locks that are already lost.
type lostOnTake struct{ ports.Locker }

func (l lostOnTake) Lock(ctx context.Context, name string) (ports.Lock, error) {
	k, err := l.Locker.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	return losableLock{Lock: k, lost: closedChan()}, nil
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
