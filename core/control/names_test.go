package control_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestTemplateIDCannotTakeAnAlias: with template tpl-a known as "web", a
// new template whose id is "web" must be refused; before, it was built, and
// every sandbox asking for "web" then booted the new template's image
// (resolution tries ids first).
func TestTemplateIDCannotTakeAnAlias(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	if _, err := e.svc.SetAlias(e.ctx, "tpl-a", strp("web")); err != nil {
		t.Fatal(err)
	}

	_, err := e.svc.CreateFromImage(e.ctx, request("web"), baseURL)
	var taken *core.NameTakenError
	if !errors.As(err, &taken) || taken.Holder != "tpl-a" {
		t.Fatalf("create with id %q: %v, want a NameTakenError naming tpl-a", "web", err)
	}
	if _, err := e.store.Jobs().Latest(e.ctx, "web"); !errors.Is(err, core.ErrNotFound) {
		t.Fatal("a job was created for the refused id")
	}
	def, err := e.svc.ResolveTemplate(e.ctx, "web")
	if err != nil || def.TemplateID != "tpl-a" {
		t.Fatalf("web resolves to %v, %v; want tpl-a", def, err)
	}

	// The other way round: an alias equal to another template's id.
	e.ready("shop", fpB)
	if _, err := e.svc.SetAlias(e.ctx, "tpl-a", strp("shop")); !errors.As(err, &taken) || taken.Holder != "shop" {
		t.Fatalf("alias equal to another id: %v", err)
	}
	// A synchronous create cannot take the alias either.
	if _, err := e.svc.CreateTemplate(e.ctx, control.CreateTemplateRequest{Raw: sandboxCreate("web"), TemplateID: "web"}); !errors.As(err, &taken) {
		t.Fatalf("synchronous create with id web: %v", err)
	}
	// Deleting tpl-a frees both its names.
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.SetAlias(e.ctx, "shop", strp("web")); err != nil {
		t.Fatalf("a deleted template's alias is still taken: %v", err)
	}
}

func strp(s string) *string { return &s }

// TestRedoKeepsTheAliasTheUserSet: tpl-a was created with alias "foo",
// then its alias was cleared or changed. A redo works from the create's
// stored request, which still names "foo"; it must leave the definition's
// alias as the user set it. Before, a cleared alias came back on the
// definition without being claimed, and a new template with id "foo" was
// then accepted while tpl-a was known as "foo".
func TestRedoKeepsTheAliasTheUserSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  *string
		want string
	}{
		{"cleared", nil, ""},
		{"changed", strp("bar"), "bar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			req := request("tpl-a")
			req.Alias = "foo"
			job := e.create(req)
			e.build(job.JobID, fpA)
			e.wait()
			if _, err := e.svc.SetAlias(e.ctx, "tpl-a", tc.set); err != nil {
				t.Fatal(err)
			}
			redo, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "redo-1", TemplateID: "tpl-a"})
			if err != nil {
				t.Fatal(err)
			}
			e.wait()
			eq(t, "redo status", e.job(redo.JobID).Status, core.JobReady)
			eq(t, "alias after the redo", e.def("tpl-a").Alias, tc.want)
			if strings.Contains(e.job(redo.JobID).ErrorMessage, "foo") {
				t.Errorf("redo message %q talks about an alias it never meant to apply", e.job(redo.JobID).ErrorMessage)
			}

			// "foo" is free: a template may take it as its id, and it
			// then names that template alone.
			j, err := e.svc.CreateFromImage(e.ctx, request("foo"), baseURL)
			if err != nil {
				t.Fatalf("create with the released id foo: %v", err)
			}
			e.build(j.JobID, fpB)
			e.wait()
			def, err := e.svc.ResolveTemplate(e.ctx, "foo")
			if err != nil || def.TemplateID != "foo" {
				t.Fatalf("foo resolves to %v, %v; want template foo", def, err)
			}
			if a := e.def("tpl-a").Alias; a == "foo" {
				t.Errorf("tpl-a still carries alias %q next to template id foo", a)
			}
		})
	}
}
