package storetest

import (
	"errors"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

var templateTests = []test{
	{"Template/DefinitionCRUD", testDefinitionCRUD},
	{"Template/DefinitionConflicts", testDefinitionConflicts},
	{"Template/AliasCase", testAliasCase},
	{"Template/UpdateDefinitionFnError", testUpdateDefinitionFnError},
	{"Template/Replicas", testReplicas},
	{"Template/DeleteReplicas", testDeleteReplicas},
	{"Template/ReplicaCompat", testReplicaCompat},
}

func newDef(id, alias string) *core.Definition {
	return &core.Definition{
		TemplateID:       id,
		InstanceType:     core.DefaultInstanceType,
		Version:          core.DefaultTemplateVersion,
		Status:           core.TemplatePending,
		RequestJSON:      `{"annotations":{"template":"` + id + `"}}`,
		LastError:        "",
		Alias:            alias,
		RootfsArtifactID: "rfs-aaaaaaaaaaaaaaaaaaaaaaaa",
	}
}

func sameDef(t *testing.T, what string, want, got *core.Definition) {
	t.Helper()
	w, g := *want, *got
	w.CreatedAt, w.UpdatedAt = g.CreatedAt, g.UpdatedAt
	if w != g {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func testDefinitionCRUD(t *testing.T, e *env) {
	tr := e.s.Templates()
	b := newDef(uniq("tpl-b-"), "")
	a := newDef(uniq("tpl-a-"), uniq("alias-"))
	must(t, tr.CreateDefinition(e.ctx, b), "create b")
	must(t, tr.CreateDefinition(e.ctx, a), "create a")
	if a.CreatedAt.IsZero() || !a.UpdatedAt.Equal(a.CreatedAt) {
		t.Fatalf("CreateDefinition set CreatedAt=%v UpdatedAt=%v", a.CreatedAt, a.UpdatedAt)
	}
	got, err := tr.GetDefinition(e.ctx, a.TemplateID)
	must(t, err, "get")
	sameDef(t, "GetDefinition", a, got)
	got, err = tr.GetDefinitionByAlias(e.ctx, a.Alias)
	must(t, err, "get by alias")
	sameDef(t, "GetDefinitionByAlias", a, got)
	_, err = tr.GetDefinition(e.ctx, uniq("tpl-none-"))
	mustErrIs(t, err, core.ErrNotFound, "GetDefinition of a missing template")
	_, err = tr.GetDefinitionByAlias(e.ctx, uniq("none-"))
	mustErrIs(t, err, core.ErrNotFound, "GetDefinitionByAlias of a free alias")
	_, err = tr.GetDefinitionByAlias(e.ctx, "")
	mustErrIs(t, err, core.ErrNotFound, "GetDefinitionByAlias of the empty alias")

	list, err := tr.ListDefinitions(e.ctx)
	must(t, err, "list")
	if len(list) != 2 || list[0].TemplateID != a.TemplateID || list[1].TemplateID != b.TemplateID {
		t.Fatalf("ListDefinitions not ordered by template id: %+v", list)
	}

	upd, err := tr.UpdateDefinition(e.ctx, a.TemplateID, func(d *core.Definition) error {
		d.Status = core.TemplateReady
		d.LastError = "none"
		d.Alias = ""
		d.RootfsArtifactID = "rfs-bbbbbbbbbbbbbbbbbbbbbbbb"
		return nil
	})
	must(t, err, "UpdateDefinition")
	if !upd.UpdatedAt.After(a.UpdatedAt) || !upd.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("UpdateDefinition timestamps %v/%v after %v/%v", upd.CreatedAt, upd.UpdatedAt, a.CreatedAt, a.UpdatedAt)
	}
	got, err = tr.GetDefinition(e.ctx, a.TemplateID)
	must(t, err, "get after update")
	sameDef(t, "after UpdateDefinition", upd, got)
	if got.Alias != "" || got.Status != core.TemplateReady {
		t.Fatalf("update not stored: %+v", got)
	}
	_, err = tr.GetDefinitionByAlias(e.ctx, a.Alias)
	mustErrIs(t, err, core.ErrNotFound, "alias after it was cleared")

	_, err = tr.UpdateDefinition(e.ctx, uniq("tpl-none-"), func(*core.Definition) error { return nil })
	mustErrIs(t, err, core.ErrNotFound, "UpdateDefinition of a missing template")

	must(t, tr.DeleteDefinition(e.ctx, a.TemplateID), "delete")
	_, err = tr.GetDefinition(e.ctx, a.TemplateID)
	mustErrIs(t, err, core.ErrNotFound, "GetDefinition after delete")
	must(t, tr.DeleteDefinition(e.ctx, a.TemplateID), "deleting a missing definition")
	if _, err := tr.GetDefinition(e.ctx, b.TemplateID); err != nil {
		t.Fatalf("delete removed another definition: %v", err)
	}
}

func testDefinitionConflicts(t *testing.T, e *env) {
	tr := e.s.Templates()
	alias := uniq("alias-")
	a := newDef(uniq("tpl-"), alias)
	must(t, tr.CreateDefinition(e.ctx, a), "create")

	dupID := newDef(a.TemplateID, "")
	mustErrIs(t, tr.CreateDefinition(e.ctx, dupID), core.ErrConflict, "CreateDefinition with a taken id")
	dupAlias := newDef(uniq("tpl-"), alias)
	mustErrIs(t, tr.CreateDefinition(e.ctx, dupAlias), core.ErrConflict, "CreateDefinition with a taken alias")
	_, err := tr.GetDefinition(e.ctx, dupAlias.TemplateID)
	mustErrIs(t, err, core.ErrNotFound, "the refused definition")

	// Definitions without alias never collide on it.
	b := newDef(uniq("tpl-"), "")
	c := newDef(uniq("tpl-"), "")
	must(t, tr.CreateDefinition(e.ctx, b), "create b without alias")
	must(t, tr.CreateDefinition(e.ctx, c), "create c without alias")

	_, err = tr.UpdateDefinition(e.ctx, b.TemplateID, func(d *core.Definition) error {
		d.Alias = alias
		d.Status = core.TemplateReady
		return nil
	})
	mustErrIs(t, err, core.ErrConflict, "UpdateDefinition taking a used alias")
	got, err := tr.GetDefinition(e.ctx, b.TemplateID)
	must(t, err, "get b")
	sameDef(t, "b after the refused update", b, got)

	// Once a drops the alias, b may take it.
	_, err = tr.UpdateDefinition(e.ctx, a.TemplateID, func(d *core.Definition) error { d.Alias = ""; return nil })
	must(t, err, "clear a's alias")
	_, err = tr.UpdateDefinition(e.ctx, b.TemplateID, func(d *core.Definition) error { d.Alias = alias; return nil })
	must(t, err, "b takes the freed alias")
	got, err = tr.GetDefinitionByAlias(e.ctx, alias)
	must(t, err, "by alias")
	if got.TemplateID != b.TemplateID {
		t.Fatalf("alias %s resolves to %s, want %s", alias, got.TemplateID, b.TemplateID)
	}
}

func testAliasCase(t *testing.T, e *env) {
	tr := e.s.Templates()
	suffix := ids.NewHex()[:8]
	lower := newDef(uniq("tpl-"), "foo-"+suffix)
	upper := newDef(uniq("tpl-"), "Foo-"+suffix)
	accent := newDef(uniq("tpl-"), "föo-"+suffix)
	for _, d := range []*core.Definition{lower, accent} {
		must(t, tr.CreateDefinition(e.ctx, d), "create alias "+d.Alias+" (aliases differing in an accent are different)")
	}
	mustErrIs(t, tr.CreateDefinition(e.ctx, upper), core.ErrConflict, "alias differing only in case from an existing one")
	for _, d := range []*core.Definition{lower, accent} {
		got, err := tr.GetDefinitionByAlias(e.ctx, d.Alias)
		must(t, err, "by alias "+d.Alias)
		if got.TemplateID != d.TemplateID {
			t.Fatalf("alias %q resolves to %s, want %s", d.Alias, got.TemplateID, d.TemplateID)
		}
	}
	_, err := tr.GetDefinitionByAlias(e.ctx, "FOO-"+suffix)
	mustErrIs(t, err, core.ErrNotFound, "alias differing only in case")
	// Template ids are keys too.
	idLower := newDef("tpl-case-"+suffix, "")
	idUpper := newDef("TPL-CASE-"+suffix, "")
	must(t, tr.CreateDefinition(e.ctx, idLower), "create lower id")
	must(t, tr.CreateDefinition(e.ctx, idUpper), "create upper id (ids differing in case are different)")
}

func testUpdateDefinitionFnError(t *testing.T, e *env) {
	tr := e.s.Templates()
	d := newDef(uniq("tpl-"), uniq("alias-"))
	must(t, tr.CreateDefinition(e.ctx, d), "create")
	boom := errors.New("boom")
	_, err := tr.UpdateDefinition(e.ctx, d.TemplateID, func(x *core.Definition) error {
		x.Status = core.TemplateFailed
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("UpdateDefinition returned %v, want fn's error", err)
	}
	got, err := tr.GetDefinition(e.ctx, d.TemplateID)
	must(t, err, "get")
	sameDef(t, "after a failed update", d, got)
	if !got.UpdatedAt.Equal(d.UpdatedAt) {
		t.Fatal("a failed update moved UpdatedAt")
	}
}

func newReplica(tpl, node, artifact string) *core.Replica {
	return &core.Replica{
		TemplateID:      tpl,
		NodeID:          node,
		NodeIP:          "10.0.0.1",
		InstanceType:    core.DefaultInstanceType,
		Spec:            "cpu=2,mem=4Gi",
		SnapshotPath:    "/data/snap/" + tpl,
		Status:          core.ReplicaFailed,
		Phase:           core.ReplicaPhaseDistributed,
		ArtifactID:      artifact,
		LastJobID:       ids.NewJobID(),
		LastErrorPhase:  "",
		CleanupRequired: true,
		ErrorMessage:    "",
		// Versions and a verdict, so every replica test round-trips them.
		GuestImageVersion: "guest-1.2.3",
		AgentVersion:      "agent-0.9",
		KernelVersion:     "6.6.30",
		ShimVersion:       "shim-2.0",
		CompatStatus:      core.CompatCompatible,
		CompatCheckedUnix: 1700000000,
	}
}

func testReplicaCompat(t *testing.T, e *env) {
	tr := e.s.Templates()
	tpl := uniq("tpl-")
	r := newReplica(tpl, "node-1", "rfs-"+ids.NewHex()[:24])
	r.CompatStatus, r.CompatCheckedUnix = "", 0
	must(t, tr.UpsertReplica(e.ctx, r), "upsert")

	must(t, tr.SetReplicaCompat(e.ctx, tpl, "node-1", core.CompatIncompatible, 1800000000), "SetReplicaCompat")
	list, err := tr.ListReplicas(e.ctx, tpl)
	must(t, err, "ListReplicas")
	if len(list) != 1 {
		t.Fatalf("ListReplicas = %d rows, want 1", len(list))
	}
	want := *r
	want.CompatStatus, want.CompatCheckedUnix = core.CompatIncompatible, 1800000000
	sameReplica(t, "after SetReplicaCompat", &want, list[0])

	err = tr.SetReplicaCompat(e.ctx, tpl, "node-missing", core.CompatCompatible, 1)
	if !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetReplicaCompat of a missing row = %v, want core.ErrNotFound", err)
	}
}

func sameReplica(t *testing.T, what string, want, got *core.Replica) {
	t.Helper()
	w, g := *want, *got
	w.CreatedAt, w.UpdatedAt = g.CreatedAt, g.UpdatedAt
	if w != g {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func testReplicas(t *testing.T, e *env) {
	tr := e.s.Templates()
	tpl, other := uniq("tpl-"), uniq("tpl-")
	art := "rfs-" + ids.NewHex()[:24]
	r2 := newReplica(tpl, "node-2", art)
	r1 := newReplica(tpl, "node-1", art)
	ro := newReplica(other, "node-1", art)
	rx := newReplica(other, "node-2", "rfs-other")
	for _, r := range []*core.Replica{r2, r1, ro, rx} {
		must(t, tr.UpsertReplica(e.ctx, r), "upsert "+r.TemplateID+"/"+r.NodeID)
	}
	list, err := tr.ListReplicas(e.ctx, tpl)
	must(t, err, "ListReplicas")
	if len(list) != 2 {
		t.Fatalf("ListReplicas = %d rows, want 2", len(list))
	}
	sameReplica(t, "first replica", r1, list[0])
	sameReplica(t, "second replica", r2, list[1])
	created := list[0].CreatedAt

	// Upsert of an existing (template, node) replaces the row in place.
	r1b := *r1
	r1b.Status, r1b.Phase, r1b.NodeIP, r1b.CleanupRequired, r1b.ErrorMessage = core.ReplicaReady, core.ReplicaPhaseReady, "10.0.0.9", false, "was slow"
	waitPast(created)
	must(t, tr.UpsertReplica(e.ctx, &r1b), "upsert again")
	list, err = tr.ListReplicas(e.ctx, tpl)
	must(t, err, "ListReplicas")
	if len(list) != 2 {
		t.Fatalf("upsert of an existing pair made %d rows, want 2", len(list))
	}
	sameReplica(t, "replaced replica", &r1b, list[0])
	if !list[0].CreatedAt.Equal(created) {
		t.Fatalf("upsert changed CreatedAt from %v to %v", created, list[0].CreatedAt)
	}
	if !list[0].UpdatedAt.After(created) {
		t.Fatalf("upsert did not move UpdatedAt (%v, created %v)", list[0].UpdatedAt, created)
	}

	byArt, err := tr.ListReplicasByArtifact(e.ctx, art)
	must(t, err, "ListReplicasByArtifact")
	if len(byArt) != 3 {
		t.Fatalf("ListReplicasByArtifact = %d rows, want 3", len(byArt))
	}
	for _, r := range byArt {
		if r.ArtifactID != art {
			t.Fatalf("ListReplicasByArtifact returned a replica of %s", r.ArtifactID)
		}
	}
	none, err := tr.ListReplicas(e.ctx, uniq("tpl-none-"))
	must(t, err, "ListReplicas of a template without replicas")
	if len(none) != 0 {
		t.Fatalf("ListReplicas of an unknown template = %d rows", len(none))
	}
}

func testDeleteReplicas(t *testing.T, e *env) {
	tr := e.s.Templates()
	tpl, other := uniq("tpl-"), uniq("tpl-")
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		must(t, tr.UpsertReplica(e.ctx, newReplica(tpl, n, "rfs-x")), "upsert")
	}
	must(t, tr.UpsertReplica(e.ctx, newReplica(other, "n1", "rfs-x")), "upsert other")

	n, err := tr.DeleteReplicas(e.ctx, tpl, "n2", "n4", "n9")
	must(t, err, "DeleteReplicas on nodes")
	if n != 2 {
		t.Fatalf("DeleteReplicas(n2,n4,n9) = %d, want 2", n)
	}
	list, _ := tr.ListReplicas(e.ctx, tpl)
	if len(list) != 2 || list[0].NodeID != "n1" || list[1].NodeID != "n3" {
		t.Fatalf("after deleting n2,n4 the replicas are %+v", list)
	}
	n, err = tr.DeleteReplicas(e.ctx, tpl)
	must(t, err, "DeleteReplicas all")
	if n != 2 {
		t.Fatalf("DeleteReplicas(all) = %d, want 2", n)
	}
	n, err = tr.DeleteReplicas(e.ctx, tpl)
	must(t, err, "DeleteReplicas again")
	if n != 0 {
		t.Fatalf("DeleteReplicas on no rows = %d", n)
	}
	if list, _ := tr.ListReplicas(e.ctx, other); len(list) != 1 {
		t.Fatalf("DeleteReplicas touched another template: %d rows left", len(list))
	}
}
