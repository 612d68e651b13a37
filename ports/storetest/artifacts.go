package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

var artifactTests = []test{
	{"Artifact/CRUD", testArtifactCRUD},
	{"Artifact/Conflicts", testArtifactConflicts},
	{"Artifact/UpdateFnErrorWritesNothing", testArtifactUpdateFnError},
	{"Artifact/UpdateConcurrentNoneLost", testArtifactUpdateConcurrent},
	{"Artifact/ListByStatus", testArtifactListByStatus},
	{"Artifact/CountReferences", testCountReferences},
	{"Artifact/Builder", testArtifactBuilder},
}

var placementTests = []test{
	{"Placement/AddListDelete", testPlacements},
}

func newArtifact() *core.Artifact {
	fp := ids.NewHex() + ids.NewHex()
	id, _ := core.ArtifactIDFor(fp)
	return &core.Artifact{
		ArtifactID:           id,
		Fingerprint:          fp,
		SourceImageRef:       "registry.example/team/app:1.0",
		SourceImageDigest:    "sha256:" + fp,
		MasterNodeID:         "",
		DownloadBaseURL:      "http://10.0.0.5:8089",
		Ext4Path:             "/data/artifacts/" + id + "/" + id + ".ext4",
		Ext4SHA256:           fp,
		Ext4SizeBytes:        1 << 30,
		ImageConfigJSON:      `{"Entrypoint":["/bin/sh"]}`,
		GeneratedRequestJSON: `{"containers":[]}`,
		WritableLayerSize:    "20Gi",
		DownloadToken:        ids.NewToken(),
		Status:               core.ArtifactPending,
		LastError:            "",
		GCDeadline:           1_900_000_000,
		StorageBackend:       "s3",
		ObjectKey:            "artifacts/" + id + ".ext4",
		BuildOwnerToken:      ids.NewToken(),
		// The CubeEgress CA columns round-trip too.
		CubeEgressCABaked:          true,
		CubeEgressCAFingerprint:    fp,
		CubeEgressCATargetsWritten: 3,
		Builder:                    "ext4stream/3",
	}
}

func sameArtifact(t *testing.T, what string, want, got *core.Artifact) {
	t.Helper()
	w, g := *want, *got
	w.CreatedAt, w.UpdatedAt = g.CreatedAt, g.UpdatedAt
	if w != g {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func testArtifactCRUD(t *testing.T, e *env) {
	ar := e.s.Artifacts()
	a := newArtifact()
	must(t, ar.Create(e.ctx, a), "create")
	if a.CreatedAt.IsZero() || !a.UpdatedAt.Equal(a.CreatedAt) {
		t.Fatalf("Create set CreatedAt=%v UpdatedAt=%v", a.CreatedAt, a.UpdatedAt)
	}
	got, err := ar.Get(e.ctx, a.ArtifactID)
	must(t, err, "get")
	sameArtifact(t, "Get", a, got)
	got, err = ar.GetByFingerprint(e.ctx, a.Fingerprint)
	must(t, err, "get by fingerprint")
	sameArtifact(t, "GetByFingerprint", a, got)
	_, err = ar.Get(e.ctx, "rfs-missing")
	mustErrIs(t, err, core.ErrNotFound, "Get of a missing artifact")
	_, err = ar.GetByFingerprint(e.ctx, ids.NewHex())
	mustErrIs(t, err, core.ErrNotFound, "GetByFingerprint of a missing artifact")

	upd, err := ar.Update(e.ctx, a.ArtifactID, func(x *core.Artifact) error {
		if err := x.MoveTo(core.ArtifactBuilding); err != nil {
			return err
		}
		x.Ext4SizeBytes = 42
		x.LastError = "retrying"
		x.ArtifactID = "rfs-renamed" // identity is not fn's to change
		return nil
	})
	must(t, err, "Update")
	if upd.ArtifactID != a.ArtifactID || !upd.UpdatedAt.After(a.UpdatedAt) || !upd.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("Update returned id %s, timestamps %v/%v (before %v/%v)", upd.ArtifactID, upd.CreatedAt, upd.UpdatedAt, a.CreatedAt, a.UpdatedAt)
	}
	got, err = ar.Get(e.ctx, a.ArtifactID)
	must(t, err, "get after update")
	sameArtifact(t, "after Update", upd, got)
	if got.Status != core.ArtifactBuilding || got.Ext4SizeBytes != 42 {
		t.Fatalf("update not stored: %+v", got)
	}
	_, err = ar.Update(e.ctx, "rfs-missing", func(*core.Artifact) error { return nil })
	mustErrIs(t, err, core.ErrNotFound, "Update of a missing artifact")
	_, err = ar.Update(e.ctx, a.ArtifactID, func(x *core.Artifact) error { x.Status = "BOGUS"; return nil })
	mustErrIs(t, err, core.ErrInvalidArgument, "Update to an unknown status")
	bogus := newArtifact()
	bogus.Status = "BOGUS"
	mustErrIs(t, ar.Create(e.ctx, bogus), core.ErrInvalidArgument, "Create with an unknown status")
	_, err = ar.Get(e.ctx, bogus.ArtifactID)
	mustErrIs(t, err, core.ErrNotFound, "Get of the refused artifact")

	must(t, ar.Delete(e.ctx, a.ArtifactID), "delete")
	_, err = ar.Get(e.ctx, a.ArtifactID)
	mustErrIs(t, err, core.ErrNotFound, "Get after Delete")
	must(t, ar.Delete(e.ctx, a.ArtifactID), "deleting a missing artifact")
}

// testArtifactBuilder: the builder's Format is stored as given, however
// long (a plugin's has no limit); a row written without one reads "" (not
// known), and updates that do not touch it keep it.
func testArtifactBuilder(t *testing.T, e *env) {
	ar := e.s.Artifacts()
	old := newArtifact()
	old.Builder = ""
	must(t, ar.Create(e.ctx, old), "create without a builder")
	got, err := ar.Get(e.ctx, old.ArtifactID)
	must(t, err, "get")
	if got.Builder != "" {
		t.Fatalf("an artifact created without a builder reads Builder %q, want \"\"", got.Builder)
	}
	long := "plugin-" + strings.Repeat("v", 600) + "/api-3"
	_, err = ar.Update(e.ctx, old.ArtifactID, func(x *core.Artifact) error { x.Builder = long; return nil })
	must(t, err, "set the builder")
	_, err = ar.Update(e.ctx, old.ArtifactID, func(x *core.Artifact) error { x.LastError = "touched"; return nil })
	must(t, err, "update another field")
	got, err = ar.Get(e.ctx, old.ArtifactID)
	must(t, err, "get after updates")
	if got.Builder != long || got.LastError != "touched" {
		t.Fatalf("after updates: Builder %q (len %d), LastError %q; want the long builder kept", got.Builder, len(got.Builder), got.LastError)
	}
}

func testArtifactConflicts(t *testing.T, e *env) {
	ar := e.s.Artifacts()
	a := newArtifact()
	must(t, ar.Create(e.ctx, a), "create")
	sameID := newArtifact()
	sameID.ArtifactID = a.ArtifactID
	mustErrIs(t, ar.Create(e.ctx, sameID), core.ErrConflict, "Create with a taken artifact id")
	sameFP := newArtifact()
	sameFP.Fingerprint = a.Fingerprint
	mustErrIs(t, ar.Create(e.ctx, sameFP), core.ErrConflict, "Create with a taken fingerprint")
	_, err := ar.Get(e.ctx, sameFP.ArtifactID)
	mustErrIs(t, err, core.ErrNotFound, "the refused artifact")
	got, err := ar.Get(e.ctx, a.ArtifactID)
	must(t, err, "get")
	sameArtifact(t, "the first artifact after refused creates", a, got)
}

func testArtifactUpdateFnError(t *testing.T, e *env) {
	ar := e.s.Artifacts()
	a := newArtifact()
	must(t, ar.Create(e.ctx, a), "create")
	_, err := ar.Update(e.ctx, a.ArtifactID, func(x *core.Artifact) error {
		x.Ext4SizeBytes = 1
		return x.MoveTo(core.ArtifactDeleting) // PENDING -> DELETING is not allowed
	})
	mustErrIs(t, err, core.ErrInvalidTransition, "Update whose fn fails")
	got, err := ar.Get(e.ctx, a.ArtifactID)
	must(t, err, "get")
	sameArtifact(t, "after a failed Update", a, got)
	if !got.UpdatedAt.Equal(a.UpdatedAt) {
		t.Fatal("a failed Update moved UpdatedAt")
	}
}

func testArtifactUpdateConcurrent(t *testing.T, e *env) {
	ar := e.s.Artifacts()
	a := newArtifact()
	a.Ext4SizeBytes = 0
	must(t, ar.Create(e.ctx, a), "create")
	const writers = 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := ar.Update(e.ctx, a.ArtifactID, func(x *core.Artifact) error {
				x.Ext4SizeBytes++
				time.Sleep(fnPause) // so writers overlap between read and write
				return nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err, "concurrent artifact Update")
	}
	got, err := ar.Get(e.ctx, a.ArtifactID)
	must(t, err, "get")
	if got.Ext4SizeBytes != writers {
		t.Fatalf("after %d concurrent increments Ext4SizeBytes=%d: updates were lost", writers, got.Ext4SizeBytes)
	}
}

func testArtifactListByStatus(t *testing.T, e *env) {
	ar := e.s.Artifacts()
	var failed []*core.Artifact
	for i := 0; i < 3; i++ {
		a := newArtifact()
		a.Status = core.ArtifactFailed
		must(t, ar.Create(e.ctx, a), "create failed")
		failed = append(failed, a)
	}
	ready := newArtifact()
	ready.Status = core.ArtifactReady
	must(t, ar.Create(e.ctx, ready), "create ready")

	cutoff := failed[2].UpdatedAt
	waitPast(cutoff)
	// Touch the first: it becomes the newest.
	touched, err := ar.Update(e.ctx, failed[0].ArtifactID, func(x *core.Artifact) error { x.LastError = "touched"; return nil })
	must(t, err, "touch")

	check := func(name string, got []*core.Artifact, want ...*core.Artifact) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d artifacts, want %d", name, len(got), len(want))
		}
		for i := range got {
			if got[i].ArtifactID != want[i].ArtifactID {
				t.Fatalf("%s[%d] = %s, want %s (oldest first)", name, i, got[i].ArtifactID, want[i].ArtifactID)
			}
		}
	}
	all, err := ar.ListByStatus(e.ctx, core.ArtifactFailed, time.Time{}, 0)
	must(t, err, "list all failed")
	check("all failed", all, failed[1], failed[2], touched)
	old, err := ar.ListByStatus(e.ctx, core.ArtifactFailed, cutoff.Add(time.Microsecond), 0)
	must(t, err, "list old failed")
	check("old failed", old, failed[1], failed[2])
	one, err := ar.ListByStatus(e.ctx, core.ArtifactFailed, time.Time{}, 1)
	must(t, err, "list one")
	check("limit 1", one, failed[1])
	none, err := ar.ListByStatus(e.ctx, core.ArtifactDeleting, time.Time{}, 10)
	must(t, err, "list deleting")
	check("deleting", none)
}

func testCountReferences(t *testing.T, e *env) {
	art := newArtifact()
	must(t, e.s.Artifacts().Create(e.ctx, art), "create artifact")
	id := art.ArtifactID
	count := func(exclude string) int {
		t.Helper()
		n, err := e.s.Artifacts().CountReferences(e.ctx, id, exclude)
		must(t, err, "CountReferences")
		return n
	}
	if n := count(""); n != 0 {
		t.Fatalf("fresh artifact has %d references", n)
	}
	tplA, tplB, tplC := uniq("tpl-a-"), uniq("tpl-b-"), uniq("tpl-c-")
	tplD, tplE := uniq("tpl-d-"), uniq("tpl-e-")

	// Replicas bound to it: two of A, one of B; one of C bound elsewhere.
	must(t, e.s.Templates().UpsertReplica(e.ctx, newReplica(tplA, "n1", id)), "replica")
	must(t, e.s.Templates().UpsertReplica(e.ctx, newReplica(tplA, "n2", id)), "replica")
	must(t, e.s.Templates().UpsertReplica(e.ctx, newReplica(tplB, "n1", id)), "replica")
	must(t, e.s.Templates().UpsertReplica(e.ctx, newReplica(tplC, "n1", "rfs-elsewhere")), "replica")
	// Jobs naming it: those not yet terminal count (a BUILT job's resume
	// pipeline still distributes the artifact), READY and FAILED do not.
	mkJob := func(tpl string, attempt int, st core.JobStatus, artifactID string) {
		j := newJob(tpl, attempt)
		j.ArtifactID, j.Status = artifactID, st
		if st.Terminal() {
			j.ActiveKey = ""
		}
		createJob(t, e, j)
	}
	mkJob(tplC, 1, core.JobRunning, id)
	mkJob(tplC, 2, core.JobFailed, id)
	mkJob(tplB, 1, core.JobReady, id)
	mkJob(tplD, 1, core.JobPending, id)
	mkJob(tplE, 1, core.JobBuilt, id)
	mkJob(tplA, 1, core.JobRunning, "rfs-elsewhere")
	// Definitions whose rootfs it is.
	dc := newDef(tplC, "")
	dc.RootfsArtifactID = id
	must(t, e.s.Templates().CreateDefinition(e.ctx, dc), "definition")
	do := newDef(uniq("tpl-o-"), "")
	do.RootfsArtifactID = "rfs-elsewhere"
	must(t, e.s.Templates().CreateDefinition(e.ctx, do), "other definition")

	cases := []struct {
		exclude string
		want    int
		why     string
	}{
		{"", 7, "3 replicas + RUNNING, PENDING and BUILT jobs + 1 definition"},
		{tplA, 5, "A's two replicas left out"},
		{tplB, 6, "B's replica left out"},
		{tplC, 5, "C's job and definition left out"},
		{tplE, 6, "E's BUILT job left out"},
		{uniq("tpl-none-"), 7, "nothing to leave out"},
	}
	for _, c := range cases {
		if n := count(c.exclude); n != c.want {
			t.Fatalf("CountReferences excluding %q = %d, want %d (%s)", c.exclude, n, c.want, c.why)
		}
	}
	if n, err := e.s.Artifacts().CountReferences(e.ctx, "rfs-unknown", ""); err != nil || n != 0 {
		t.Fatalf("CountReferences of an unknown artifact = %d, %v", n, err)
	}
}

func testPlacements(t *testing.T, e *env) {
	pr := e.s.Placements()
	art, other := "rfs-"+ids.NewHex()[:24], "rfs-"+ids.NewHex()[:24]
	for _, p := range []core.Placement{
		{ArtifactID: art, NodeID: "node-b", NodeIP: "10.0.0.2"},
		{ArtifactID: art, NodeID: "node-a", NodeIP: "10.0.0.1"},
		{ArtifactID: other, NodeID: "node-a", NodeIP: "10.0.0.1"},
	} {
		must(t, pr.Add(e.ctx, p), "add")
	}
	list, err := pr.List(e.ctx, art)
	must(t, err, "list")
	if len(list) != 2 || list[0].NodeID != "node-a" || list[1].NodeID != "node-b" || list[0].CreatedAt.IsZero() {
		t.Fatalf("List = %+v, want node-a, node-b with CreatedAt", list)
	}
	created := list[0].CreatedAt
	// Adding the same pair again is idempotent and updates the ip.
	must(t, pr.Add(e.ctx, core.Placement{ArtifactID: art, NodeID: "node-a", NodeIP: "10.0.0.9"}), "re-add")
	must(t, pr.Add(e.ctx, core.Placement{ArtifactID: art, NodeID: "node-a", NodeIP: "10.0.0.9"}), "re-add again")
	list, err = pr.List(e.ctx, art)
	must(t, err, "list")
	if len(list) != 2 || list[0].NodeIP != "10.0.0.9" || !list[0].CreatedAt.Equal(created) {
		t.Fatalf("after re-adding node-a: %+v (created %v)", list, created)
	}
	n, err := pr.Delete(e.ctx, art)
	must(t, err, "delete")
	if n != 2 {
		t.Fatalf("Delete = %d, want 2", n)
	}
	if list, _ := pr.List(e.ctx, art); len(list) != 0 {
		t.Fatalf("%d placements left after Delete", len(list))
	}
	if list, _ := pr.List(e.ctx, other); len(list) != 1 {
		t.Fatalf("Delete touched another artifact: %d left", len(list))
	}
	n, err = pr.Delete(e.ctx, art)
	if err != nil || n != 0 {
		t.Fatalf("second Delete = %d, %v", n, err)
	}
}
