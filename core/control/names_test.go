package control_test

import (
	"errors"
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
