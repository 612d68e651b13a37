package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// sandboxCreate is a POST /cube/template body for tid (tid "" leaves the
// template id annotation out).
func sandboxCreate(tid string, scope ...string) json.RawMessage {
	ann := map[string]string{"custom": "kept", core.AnnotationAppSnapshotCreate: "true"}
	if tid != "" {
		ann[core.AnnotationTemplateID] = tid
	}
	body := map[string]any{
		"requestID": "req-1", "timeout": 30, "ins_id": "ins-1", "ins_ip": "1.2.3.4", "snapshot_dir": "/snaps",
		"network_type": "tap", "annotations": ann, "unknown_field": map[string]any{"x": 1},
		"containers": []any{map[string]any{"name": "c0", "resources": map[string]any{"cpu": "2000m", "mem": "2000Mi"}}},
	}
	if len(scope) > 0 {
		body["distribution_scope"] = scope
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

func (e *env) createTemplate(body json.RawMessage) (*control.Template, error) {
	e.t.Helper()
	req, err := control.ParseCreateTemplateRequest(body)
	if err != nil {
		e.t.Fatalf("ParseCreateTemplateRequest: %v", err)
	}
	return e.svc.CreateTemplate(e.ctx, req)
}

func TestCreateTemplateHappyPath(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	info, err := e.createTemplate(sandboxCreate("tpl-sync"))
	if err != nil {
		t.Fatalf("CreateTemplate: %v", err)
	}
	eq(t, "status", info.Status, string(core.TemplateReady))
	eq(t, "instance type", info.InstanceType, core.DefaultInstanceType)
	eq(t, "version", info.Version, core.DefaultTemplateVersion)
	eq(t, "last error", info.LastError, "")
	eq(t, "replicas in info", len(info.Replicas), 2)
	eqSlice(t, "snapshot nodes", e.snapshotNodes(), []string{"node-1", "node-2"})

	for _, c := range e.agent.AppSnapshotCalls() {
		eq(t, "snapshot dir", c.SnapshotDir, "/snaps")
		ann := c.Req.Annotations
		eq(t, "snapshot create annotation", ann[core.AnnotationAppSnapshotCreate], "true")
		eq(t, "snapshot template id", ann[core.AnnotationTemplateID], "tpl-sync")
		eq(t, "custom annotation", ann["custom"], "kept")
		eq(t, "network type", c.Req.NetworkType, "tap")
	}

	reps := e.replicas("tpl-sync")
	for _, id := range []string{"node-1", "node-2"} {
		r := reps[id]
		if r == nil {
			t.Fatalf("no replica on %s", id)
		}
		eq(t, id+" status", r.Status, core.ReplicaReady)
		eq(t, id+" path", r.SnapshotPath, "/snap/tpl-sync/"+id)
		eq(t, id+" spec", r.Spec, "cpu=2000m,mem=2000Mi")
	}

	d := e.def("tpl-sync")
	eq(t, "definition status", d.Status, core.TemplateReady)
	var stored map[string]any
	if err := json.Unmarshal([]byte(d.RequestJSON), &stored); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"requestID", "timeout", "ins_id", "ins_ip", "snapshot_dir"} {
		if _, ok := stored[k]; ok {
			t.Errorf("stored request keeps %s", k)
		}
	}
	if stored["unknown_field"] == nil {
		t.Error("stored request dropped a field this service does not model")
	}
	ann := stored["annotations"].(map[string]any)
	if _, ok := ann[core.AnnotationAppSnapshotCreate]; ok {
		t.Error("stored request keeps the snapshot-create annotation")
	}
	eq(t, "stored template id", ann[core.AnnotationTemplateID], any("tpl-sync"))
	eq(t, "stored version", ann[core.AnnotationAppSnapshotVersion], any("v2"))
	eq(t, "stored template version", ann[core.AnnotationTemplateVersion], any("v2"))
	eq(t, "stored custom annotation", ann["custom"], any("kept"))
	eq(t, "stored instance type", stored["instance_type"], any(core.DefaultInstanceType))
	eq(t, "stored network type", stored["network_type"], any("tap"))
}

func TestCreateTemplateOneNodeFails(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.snapFail["node-2"] = errors.New("snapshot exploded")
	info, err := e.createTemplate(sandboxCreate("tpl-part"))
	if err != nil {
		t.Fatalf("CreateTemplate: %v", err)
	}
	eq(t, "status", info.Status, string(core.TemplatePartiallyReady))
	if !strings.Contains(info.LastError, "node node-2: snapshot exploded") {
		t.Errorf("last error %q does not name the failed node", info.LastError)
	}
	r := e.replicas("tpl-part")["node-2"]
	eq(t, "failed replica status", r.Status, core.ReplicaFailed)
	eq(t, "failed replica error phase", r.LastErrorPhase, string(core.PhaseSnapshotting))
	eq(t, "failed replica cleanup", r.CleanupRequired, true)
	eq(t, "ready replica", e.replicas("tpl-part")["node-1"].Status, core.ReplicaReady)
	eq(t, "definition status", e.def("tpl-part").Status, core.TemplatePartiallyReady)

	// Every node failing ends FAILED, reported in the info, not as an error.
	e.snapFail["node-1"] = errors.New("also broken")
	info, err = e.createTemplate(sandboxCreate("tpl-allfail"))
	if err != nil {
		t.Fatalf("CreateTemplate: %v", err)
	}
	eq(t, "all failed status", info.Status, string(core.TemplateFailed))
}

func TestCreateTemplateRefusals(t *testing.T) {
	t.Run("zero nodes", func(t *testing.T) {
		e := newEnv(t)
		_, err := e.createTemplate(sandboxCreate("tpl-none"))
		wantErrIs(t, err, core.ErrNoTemplateNodes)
		if _, err := e.store.Templates().GetDefinition(e.ctx, "tpl-none"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("definition written without nodes (err=%v)", err)
		}
		eq(t, "replica rows", len(e.replicas("tpl-none")), 0)
	})
	t.Run("unknown scope", func(t *testing.T) {
		e := newEnv(t, "node-1")
		_, err := e.createTemplate(sandboxCreate("tpl-scope", "node-9"))
		wantErrIs(t, err, core.ErrNoTemplateNodes)
	})
	t.Run("missing template id", func(t *testing.T) {
		e := newEnv(t, "node-1")
		_, err := e.createTemplate(sandboxCreate(""))
		wantErrIs(t, err, core.ErrTemplateIDRequired)
		eq(t, "AppSnapshot calls", len(e.agent.AppSnapshotCalls()), 0)
	})
	t.Run("duplicate", func(t *testing.T) {
		e := newEnv(t, "node-1")
		if _, err := e.createTemplate(sandboxCreate("tpl-dup")); err != nil {
			t.Fatal(err)
		}
		_, err := e.createTemplate(sandboxCreate("tpl-dup"))
		wantErrIs(t, err, core.ErrDuplicateTemplate)
		eq(t, "AppSnapshot calls", len(e.agent.AppSnapshotCalls()), 1)
	})
	t.Run("active from-image job", func(t *testing.T) {
		e := newEnv(t, "node-1")
		e.create(request("tpl-busy"))
		_, err := e.createTemplate(sandboxCreate("tpl-busy"))
		var active *core.ActiveJobError
		if !errors.As(err, &active) {
			t.Fatalf("error = %v, want *core.ActiveJobError", err)
		}
	})
	t.Run("bad body", func(t *testing.T) {
		if _, err := control.ParseCreateTemplateRequest(json.RawMessage(`[1]`)); err == nil {
			t.Error("a JSON array was accepted")
		}
	})
}

func TestCreateTemplateReplacesFailed(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.snapFail["node-1"] = errors.New("down")
	e.snapFail["node-2"] = errors.New("down")
	info, err := e.createTemplate(sandboxCreate("tpl-again", "node-1", "node-2"))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "first status", info.Status, string(core.TemplateFailed))

	e.set(func() { delete(e.snapFail, "node-1"); delete(e.snapFail, "node-2") })
	info, err = e.createTemplate(sandboxCreate("tpl-again", "node-1"))
	if err != nil {
		t.Fatalf("re-create: %v", err)
	}
	eq(t, "second status", info.Status, string(core.TemplateReady))
	eq(t, "last error", info.LastError, "")
	cleaned := callNodes(e.agent.CleanupTemplateCalls(), func(c struct {
		Ctx          context.Context
		Node         ports.Node
		TemplateID   string
		SnapshotPath string
	}) string {
		return c.Node.ID
	})
	eqSlice(t, "cleaned nodes", cleaned, []string{"node-1", "node-2"})
	reps := e.replicas("tpl-again")
	eq(t, "replica rows", len(reps), 1)
	eq(t, "node-1 status", reps["node-1"].Status, core.ReplicaReady)
}

func TestCreateTemplateFailedCleanupKeepsRows(t *testing.T) {
	e := newEnv(t, "node-1")
	e.snapFail["node-1"] = errors.New("down")
	if _, err := e.createTemplate(sandboxCreate("tpl-stuck")); err != nil {
		t.Fatal(err)
	}
	e.set(func() { delete(e.snapFail, "node-1"); e.cleanupFail["node-1"] = errors.New("unreachable") })
	if _, err := e.createTemplate(sandboxCreate("tpl-stuck")); err == nil {
		t.Fatal("re-create succeeded although the old template could not be cleaned")
	}
	eq(t, "definition status", e.def("tpl-stuck").Status, core.TemplateFailed)
	eq(t, "replica rows", len(e.replicas("tpl-stuck")), 1)
}
