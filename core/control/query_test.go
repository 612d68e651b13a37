package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// TestSetAliasMovesClearsAndRefuses: set-alias takes an alias from the
// template that holds it, as upstream's newest master does, but only for a
// READY template; the move is recorded and moving back undoes it; an id is
// never an alias.
func TestSetAliasMovesClearsAndRefuses(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	e.ready("tpl-b", fpB)
	e.ready("api", testFingerprint("sha256:"+strings.Repeat("c3", 32)))

	d, err := e.svc.SetAlias(e.ctx, "tpl-a", ptr("web"))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "alias", d.Alias, "web")

	// Moved, in one step: tpl-a lets go, the name remembers it.
	d, err = e.svc.SetAlias(e.ctx, "tpl-b", ptr("web"))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "moved to b", d.Alias, "web")
	eq(t, "a let go", e.def("tpl-a").Alias, "")
	info, _ := e.svc.GetTemplate(e.ctx, "tpl-b")
	eq(t, "moved from", info.AliasMovedFrom, "tpl-a")
	if got, _ := e.svc.ResolveTemplate(e.ctx, "web"); got == nil || got.TemplateID != "tpl-b" {
		t.Fatalf("web resolves to %+v", got)
	}
	// Rolled back by moving it back.
	if _, err := e.svc.SetAlias(e.ctx, "tpl-a", ptr("web")); err != nil {
		t.Fatal(err)
	}
	eq(t, "back on a", e.def("tpl-a").Alias, "web")
	eq(t, "b let go", e.def("tpl-b").Alias, "")
	info, _ = e.svc.GetTemplate(e.ctx, "tpl-a")
	eq(t, "moved back from", info.AliasMovedFrom, "tpl-b")

	// Only to a READY template: one still building cannot take it.
	e.create(request("tpl-p"))
	_, err = e.svc.SetAlias(e.ctx, "tpl-p", ptr("web"))
	if err != nil {
		// No definition yet: not found; either way the alias stays.
		if !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrTemplateNotReady) {
			t.Fatalf("move to a building template: %v", err)
		}
	}
	eq(t, "still on a", e.def("tpl-a").Alias, "web")
	e.snapFail["node-1"] = errors.New("snapshot broke")
	e.ready("tpl-f", testFingerprint("sha256:"+strings.Repeat("d4", 32)))
	_, err = e.svc.SetAlias(e.ctx, "tpl-f", ptr("web"))
	wantErrIs(t, err, core.ErrTemplateNotReady)
	wantErrIs(t, err, core.ErrConflict) // 130409, as upstream answers it
	eq(t, "still on a after a failed move", e.def("tpl-a").Alias, "web")

	// An id never becomes an alias.
	_, err = e.svc.SetAlias(e.ctx, "tpl-b", ptr("api"))
	var taken *core.NameTakenError
	if !errors.As(err, &taken) || taken.Holder != "api" || taken.HolderKind != core.NameID {
		t.Fatalf("alias equal to another template's id: %v", err)
	}
	_, err = e.svc.SetAlias(e.ctx, "tpl-b", ptr("Bad_Alias"))
	wantErrIs(t, err, core.ErrInvalidArgument)
	_, err = e.svc.SetAlias(e.ctx, "tpl-b", ptr("tpl-x"))
	wantErrIs(t, err, core.ErrInvalidArgument)
	_, err = e.svc.SetAlias(e.ctx, "tpl-missing", ptr("db"))
	wantErrIs(t, err, core.ErrNotFound)

	for name, clear := range map[string]*string{"null": nil, "empty": ptr("")} {
		if _, err := e.svc.SetAlias(e.ctx, "tpl-a", ptr("web")); err != nil {
			t.Fatal(err)
		}
		d, err := e.svc.SetAlias(e.ctx, "tpl-a", clear)
		if err != nil {
			t.Fatalf("clear with %s: %v", name, err)
		}
		eq(t, "cleared by "+name, d.Alias, "")
	}
	// Free again: any template may take it, READY or not.
	if _, err := e.svc.SetAlias(e.ctx, "tpl-f", ptr("web")); err != nil {
		t.Fatal(err)
	}
}

func TestResolveTemplate(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	if _, err := e.svc.SetAlias(e.ctx, "tpl-a", ptr("web")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"tpl-a", "web"} {
		d, err := e.svc.ResolveTemplate(e.ctx, key)
		if err != nil {
			t.Fatalf("ResolveTemplate(%s): %v", key, err)
		}
		eq(t, "resolved "+key, d.TemplateID, "tpl-a")
	}
	_, err := e.svc.ResolveTemplate(e.ctx, "nope")
	wantErrIs(t, err, core.ErrNotFound)
	_, err = e.svc.ResolveTemplate(e.ctx, "")
	wantErrIs(t, err, core.ErrTemplateIDRequired)

	// READY replicas only on nodes that are down: not ready.
	e.setHealthy()
	_, err = e.svc.ResolveTemplate(e.ctx, "web")
	wantErrIs(t, err, core.ErrTemplateNotReady)

	// A template whose every snapshot failed is not ready either.
	e.setHealthy("node-1", "node-2")
	e.snapFail["node-1"], e.snapFail["node-2"] = errors.New("x"), errors.New("y")
	e.ready("tpl-b", fpB)
	_, err = e.svc.ResolveTemplate(e.ctx, "tpl-b")
	wantErrIs(t, err, core.ErrTemplateNotReady)
}

func TestGetTemplateAndList(t *testing.T) {
	e := newEnv(t, "node-1")
	done := e.ready("tpl-a", fpA)
	pending := e.create(request("tpl-p"))

	info, err := e.svc.GetTemplate(e.ctx, "tpl-a")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", info.Status, "READY")
	eq(t, "job", info.JobID, done.JobID)
	eq(t, "replicas", len(info.Replicas), 1)
	eq(t, "image info", info.ImageInfo, "registry.local/app:1@"+digestA)
	var req map[string]any
	if err := json.Unmarshal([]byte(info.CreateRequest), &req); err != nil {
		t.Fatalf("create_request: %v", err)
	}

	// No definition yet: shown through the latest job.
	p, err := e.svc.GetTemplate(e.ctx, "tpl-p")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "pending status", p.Status, "PENDING")
	eq(t, "pending job", p.JobID, pending.JobID)

	_, err = e.svc.GetTemplate(e.ctx, "tpl-none")
	wantErrIs(t, err, core.ErrNotFound)

	list, err := e.svc.ListTemplates(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].TemplateID != "tpl-a" || list[1].TemplateID != "tpl-p" || list[1].Status != "PENDING" {
		t.Errorf("ListTemplates = %+v", list)
	}
	if list[0].Replicas != nil || list[0].CreateRequest != "" {
		t.Error("list carries replicas or requests")
	}
}

func TestGetJobAndLiveProgress(t *testing.T) {
	e := newEnv(t, "node-1")
	_, err := e.svc.GetJob(e.ctx, "job-unknown")
	wantErrIs(t, err, core.ErrNotFound)
	_, err = e.svc.GetLiveJob(e.ctx, "job-unknown")
	wantErrIs(t, err, core.ErrNotFound)
	_, err = e.svc.GetJob(e.ctx, "")
	wantErrIs(t, err, core.ErrInvalidArgument)

	job := e.create(request("tpl-a"))
	live := core.PullProgress{TotalBytes: 2048, DownloadedBytes: 1024, TotalLayers: 2, CompletedLayers: 1}
	e.svc.Progress = &portsmock.ProgressSinkMock{GetFunc: func(context.Context, string) (ports.LiveProgress, bool, error) {
		return ports.LiveProgress{Phase: core.PhasePulling, Progress: 20, Pull: live}, true, nil
	}}
	got, err := e.svc.GetLiveJob(e.ctx, job.JobID)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "live pull bytes", got.Pull.DownloadedBytes, int64(1024))
	eq(t, "status", got.Status, core.JobPending)
	e.svc.Progress = nil
	e.build(job.JobID, fpA)
	e.wait()
	got, _ = e.svc.GetLiveJob(e.ctx, job.JobID)
	eq(t, "ready", got.Status, core.JobReady)
	eq(t, "progress", got.Progress, 100)
}

// TestListTemplatesOrder: upstream's `tpl ls` order, definitions most
// recently updated first, then templates that have only jobs, by id.
// Before, definitions came by id.
func TestListTemplatesOrder(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	e.clock.Advance(time.Minute)
	e.ready("tpl-b", fpB)
	e.clock.Advance(time.Minute)
	e.create(request("tpl-q"))
	e.create(request("tpl-p"))
	list, err := e.svc.ListTemplates(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tpl := range list {
		got = append(got, tpl.TemplateID)
	}
	eq(t, "order", strings.Join(got, ","), "tpl-b,tpl-a,tpl-p,tpl-q")
}

// TestComponentVersions: each replica with the versions its node reported
// at snapshot time (the shim's too); a template without a definition is
// not found.
func TestComponentVersions(t *testing.T) {
	e := newEnv(t, "node-1")
	e.agent.AppSnapshotFunc = func(_ context.Context, n ports.Node, _ *core.SandboxRequest, _ string) (ports.SnapshotResult, error) {
		return ports.SnapshotResult{SnapshotPath: "/snap/" + n.ID, GuestImageVersion: "g1", AgentVersion: "0.4.2", KernelVersion: "6.6.30", ShimVersion: "s7"}, nil
	}
	e.ready("tpl-a", fpA)
	reps, err := e.svc.ComponentVersions(e.ctx, "tpl-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].NodeID != "node-1" || reps[0].AgentVersion != "0.4.2" || reps[0].ShimVersion != "s7" ||
		reps[0].GuestImageVersion != "g1" || reps[0].KernelVersion != "6.6.30" {
		t.Fatalf("replicas %+v", reps[0])
	}
	e.create(request("tpl-p"))
	_, err = e.svc.ComponentVersions(e.ctx, "tpl-p")
	wantErrIs(t, err, core.ErrNotFound)
	_, err = e.svc.ComponentVersions(e.ctx, "")
	wantErrIs(t, err, core.ErrTemplateIDRequired)
}
