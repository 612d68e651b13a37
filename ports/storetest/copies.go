package storetest

import (
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Values cross the store by copy: changing what was handed to a write, what
// a read returned, or what an Update's fn received, after the call, leaves
// the stored row alone. (A SQL store gets this for free; an in-memory one
// must copy.)
var copyTests = []test{
	{"Copy/Jobs", testJobCopies},
	{"Copy/Definitions", testDefinitionCopies},
	{"Copy/Replicas", testReplicaCopies},
	{"Copy/Artifacts", testArtifactCopies},
	{"Copy/PlacementsAndNodes", testPlacementNodeCopies},
}

// scribble changes every field of j a caller could hold on to, the
// elements of its redo scope included.
func scribble(j *core.Job) {
	for i := range j.RedoScope {
		j.RedoScope[i] = "scribbled"
	}
	j.Status, j.ActiveKey, j.Progress, j.Pull.TotalBytes = core.JobFailed, "", -1, -1
}

func testJobCopies(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	j := newJob(tpl, 1)
	createJob(t, e, j)
	want := j.Clone()
	check := func(what string) {
		t.Helper()
		got, err := e.s.Jobs().Get(e.ctx, want.JobID)
		must(t, err, "Get")
		sameJob(t, "stored job after changing "+what, want, got)
	}
	scribble(j)
	check("the created value")

	reads := []struct {
		name string
		read func() ([]*core.Job, error)
	}{
		{"Get", func() ([]*core.Job, error) { j, err := e.s.Jobs().Get(e.ctx, want.JobID); return []*core.Job{j}, err }},
		{"GetActive", func() ([]*core.Job, error) {
			j, err := e.s.Jobs().GetActive(e.ctx, want.ActiveKey)
			return []*core.Job{j}, err
		}},
		{"Latest", func() ([]*core.Job, error) { j, err := e.s.Jobs().Latest(e.ctx, tpl); return []*core.Job{j}, err }},
		{"ListByTemplate", func() ([]*core.Job, error) { return e.s.Jobs().ListByTemplate(e.ctx, tpl) }},
		{"ListStale", func() ([]*core.Job, error) {
			return e.s.Jobs().ListStale(e.ctx, ports.StaleQuery{Statuses: []core.JobStatus{core.JobPending}})
		}},
	}
	for _, r := range reads {
		got, err := r.read()
		must(t, err, r.name)
		if len(got) != 1 {
			t.Fatalf("%s returned %d jobs, want 1", r.name, len(got))
		}
		scribble(got[0])
		check("what " + r.name + " returned")
	}

	var inFn *core.Job
	upd, err := e.s.Jobs().Update(e.ctx, want.JobID, func(x *core.Job) error {
		inFn = x
		x.Progress = 50
		return nil
	})
	must(t, err, "Update")
	want.Progress = 50
	scribble(inFn)
	scribble(upd)
	check("what Update's fn received and what Update returned")
}

func testDefinitionCopies(t *testing.T, e *env) {
	tr := e.s.Templates()
	d := newDef(uniq("tpl-"), uniq("alias-"))
	must(t, tr.CreateDefinition(e.ctx, d), "create")
	want := *d
	check := func(what string) {
		t.Helper()
		got, err := tr.GetDefinition(e.ctx, want.TemplateID)
		must(t, err, "GetDefinition")
		sameDef(t, "stored definition after changing "+what, &want, got)
	}
	scribbleDef := func(x *core.Definition) { x.Status, x.Alias, x.RootfsArtifactID = core.TemplateFailed, "scribbled", "" }
	scribbleDef(d)
	check("the created value")
	got, err := tr.GetDefinition(e.ctx, want.TemplateID)
	must(t, err, "GetDefinition")
	scribbleDef(got)
	check("what GetDefinition returned")
	got, err = tr.GetDefinitionByAlias(e.ctx, want.Alias)
	must(t, err, "GetDefinitionByAlias")
	scribbleDef(got)
	check("what GetDefinitionByAlias returned")
	list, err := tr.ListDefinitions(e.ctx)
	must(t, err, "ListDefinitions")
	scribbleDef(list[0])
	check("what ListDefinitions returned")
	var inFn *core.Definition
	upd, err := tr.UpdateDefinition(e.ctx, want.TemplateID, func(x *core.Definition) error {
		inFn = x
		x.LastError = "updated"
		return nil
	})
	must(t, err, "UpdateDefinition")
	want.LastError = "updated"
	scribbleDef(inFn)
	scribbleDef(upd)
	check("what UpdateDefinition's fn received and returned")
}

func testReplicaCopies(t *testing.T, e *env) {
	tr := e.s.Templates()
	tpl, art := uniq("tpl-"), "rfs-"+ids.NewHex()[:24]
	r := newReplica(tpl, "n1", art)
	must(t, tr.UpsertReplica(e.ctx, r), "upsert")
	want := *r
	check := func(what string) {
		t.Helper()
		list, err := tr.ListReplicas(e.ctx, tpl)
		must(t, err, "ListReplicas")
		if len(list) != 1 {
			t.Fatalf("%d replicas, want 1", len(list))
		}
		sameReplica(t, "stored replica after changing "+what, &want, list[0])
	}
	scribbleReplica := func(x *core.Replica) { x.Status, x.NodeIP, x.ArtifactID = core.ReplicaReady, "scribbled", "scribbled" }
	scribbleReplica(r)
	check("the upserted value")
	list, err := tr.ListReplicas(e.ctx, tpl)
	must(t, err, "ListReplicas")
	scribbleReplica(list[0])
	check("what ListReplicas returned")
	list, err = tr.ListReplicasByArtifact(e.ctx, art)
	must(t, err, "ListReplicasByArtifact")
	scribbleReplica(list[0])
	check("what ListReplicasByArtifact returned")
}

func testArtifactCopies(t *testing.T, e *env) {
	ar := e.s.Artifacts()
	a := newArtifact()
	must(t, ar.Create(e.ctx, a), "create")
	want := *a
	check := func(what string) {
		t.Helper()
		got, err := ar.Get(e.ctx, want.ArtifactID)
		must(t, err, "Get")
		sameArtifact(t, "stored artifact after changing "+what, &want, got)
	}
	scribbleArt := func(x *core.Artifact) {
		x.Status, x.DownloadToken, x.Ext4SizeBytes = core.ArtifactDeleting, "scribbled", -1
	}
	scribbleArt(a)
	check("the created value")
	got, err := ar.Get(e.ctx, want.ArtifactID)
	must(t, err, "Get")
	scribbleArt(got)
	check("what Get returned")
	got, err = ar.GetByFingerprint(e.ctx, want.Fingerprint)
	must(t, err, "GetByFingerprint")
	scribbleArt(got)
	check("what GetByFingerprint returned")
	list, err := ar.ListByStatus(e.ctx, want.Status, time.Time{}, 0)
	must(t, err, "ListByStatus")
	scribbleArt(list[0])
	check("what ListByStatus returned")
	var inFn *core.Artifact
	upd, err := ar.Update(e.ctx, want.ArtifactID, func(x *core.Artifact) error {
		inFn = x
		x.LastError = "updated"
		return nil
	})
	must(t, err, "Update")
	want.LastError = "updated"
	scribbleArt(inFn)
	scribbleArt(upd)
	check("what Update's fn received and returned")
}

func testPlacementNodeCopies(t *testing.T, e *env) {
	art := "rfs-" + ids.NewHex()[:24]
	must(t, e.s.Placements().Add(e.ctx, core.Placement{ArtifactID: art, NodeID: "n1", NodeIP: "10.0.0.1"}), "add placement")
	ps, err := e.s.Placements().List(e.ctx, art)
	must(t, err, "List placements")
	ps[0].NodeIP = "scribbled"
	ps, err = e.s.Placements().List(e.ctx, art)
	must(t, err, "List placements")
	if ps[0].NodeIP != "10.0.0.1" {
		t.Fatalf("changing a listed placement changed the stored one: %+v", ps[0])
	}

	must(t, e.s.Nodes().Upsert(e.ctx, ports.NodeRecord{NodeID: "n1", GRPCAddr: "h:1"}), "upsert node")
	ns, err := e.s.Nodes().List(e.ctx)
	must(t, err, "List nodes")
	ns[0].GRPCAddr = "scribbled"
	ns, err = e.s.Nodes().List(e.ctx)
	must(t, err, "List nodes")
	if ns[0].GRPCAddr != "h:1" {
		t.Fatalf("changing a listed node changed the stored one: %+v", ns[0])
	}
}
