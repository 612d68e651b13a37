package control_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestMergeTemplateRequestGolden pins the merge rules of seed 002 §8.1.
// The expected requests (testdata/resolve/<name>.golden.json) were written
// by hand from the rules in MergeTemplateRequest's doc, not by running it.
func TestMergeTemplateRequestGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/resolve/*.case.json")
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, path := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".case.json"), func(t *testing.T) {
			var c struct {
				Template json.RawMessage `json:"template"`
				Caller   json.RawMessage `json:"caller"`
			}
			readJSON(t, path, &c)
			tpl, _, err := core.ParseSandboxRequest(c.Template)
			if err != nil {
				t.Fatal(err)
			}
			caller, _, err := core.ParseSandboxRequest(c.Caller)
			if err != nil {
				t.Fatal(err)
			}
			callerBefore, _ := json.Marshal(caller)
			tplBefore, _ := json.Marshal(tpl)

			got, _ := json.Marshal(control.MergeTemplateRequest(tpl, caller))
			var gotV, wantV any
			_ = json.Unmarshal(got, &gotV)
			readJSON(t, strings.TrimSuffix(path, ".case.json")+".golden.json", &wantV)
			if !reflect.DeepEqual(gotV, wantV) {
				t.Errorf("merged request:\n got %s", got)
			}
			if b, _ := json.Marshal(caller); string(b) != string(callerBefore) {
				t.Error("the caller's request was modified")
			}
			if b, _ := json.Marshal(tpl); string(b) != string(tplBefore) {
				t.Error("the template's request was modified")
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestResolveSandboxRequest(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	if _, err := e.svc.SetAlias(e.ctx, "tpl-a", ptr("web")); err != nil {
		t.Fatal(err)
	}
	stored, _, err := core.ParseSandboxRequest([]byte(e.def("tpl-a").RequestJSON))
	if err != nil {
		t.Fatal(err)
	}

	caller := &core.SandboxRequest{Annotations: map[string]string{core.AnnotationTemplateID: "web", "mine": "1"}, Namespace: "tenant-a"}
	res, err := e.svc.ResolveSandboxRequest(e.ctx, caller)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "template", res.TemplateID, "tpl-a")
	eq(t, "alias", res.Alias, "web")
	r := res.Request
	eq(t, "template id annotation", r.Annotations[core.AnnotationTemplateID], "tpl-a")
	eq(t, "caller annotation", r.Annotations["mine"], "1")
	eq(t, "artifact annotation", r.Annotations[core.AnnotationArtifactID], stored.Annotations[core.AnnotationArtifactID])
	eq(t, "namespace", r.Namespace, "tenant-a")
	eq(t, "containers", len(r.Containers), len(stored.Containers))
	if r.RequestID == "" {
		t.Error("no fresh request id")
	}
	eq(t, "caller untouched", caller.Annotations[core.AnnotationTemplateID], "web")

	// By id, with the caller's own request id.
	res, err = e.svc.ResolveSandboxRequest(e.ctx, &core.SandboxRequest{RequestID: "req-9", Annotations: map[string]string{core.AnnotationTemplateID: "tpl-a"}})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "request id kept", res.Request.RequestID, "req-9")
	eq(t, "no alias", res.Alias, "")

	_, err = e.svc.ResolveSandboxRequest(e.ctx, &core.SandboxRequest{})
	wantErrIs(t, err, core.ErrTemplateIDRequired)
	_, err = e.svc.ResolveSandboxRequest(e.ctx, &core.SandboxRequest{Annotations: map[string]string{core.AnnotationTemplateID: "nope"}})
	wantErrIs(t, err, core.ErrNotFound)
	e.setHealthy()
	_, err = e.svc.ResolveSandboxRequest(e.ctx, &core.SandboxRequest{Annotations: map[string]string{core.AnnotationTemplateID: "tpl-a"}})
	wantErrIs(t, err, core.ErrTemplateNotReady)
}

func TestResolveTemplateKey(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	pending := e.create(request("tpl-p"))
	if _, err := e.svc.SetAlias(e.ctx, "tpl-a", ptr("web")); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"tpl-a": "tpl-a", "web": "tpl-a", " web ": "tpl-a",
		pending.TemplateID: pending.TemplateID, // a job-only template is its id
		"nothing":          "nothing",          // unknown: unchanged, the caller reports it
		"Not_An_Alias":     "Not_An_Alias",
	} {
		got, err := e.svc.ResolveTemplateKey(e.ctx, key)
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		eq(t, "key "+key, got, want)
	}
	_, err := e.svc.ResolveTemplateKey(e.ctx, " ")
	wantErrIs(t, err, core.ErrTemplateIDRequired)
}
