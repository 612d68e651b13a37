package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

var jobTests = []test{
	{"Job/CreateGet", testJobCreateGet},
	{"Job/CreateConflicts", testJobCreateConflicts},
	{"Job/GetActive", testJobGetActive},
	{"Job/LatestAndList", testJobLatestAndList},
	{"Job/Update", testJobUpdate},
	{"Job/UpdateFnErrorWritesNothing", testJobUpdateFnError},
	{"Job/UpdateIsHeartbeat", testJobUpdateHeartbeat},
	{"Job/UpdateConcurrentNoneLost", testJobUpdateConcurrent},
	{"Job/TerminalAbsorbs", testJobTerminalAbsorbs},
	{"Job/ActiveKeyReleasedOnTerminal", testJobActiveKeyReleased},
	{"Job/UpdateActiveKeyConflict", testJobUpdateActiveKeyConflict},
	{"Job/ListStale", testJobListStale},
	{"Job/DeleteByTemplate", testJobDeleteByTemplate},
	{"Store/ClosedStore", testClosedStore},
}

func testJobCreateGet(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	j := newJob(tpl, 1)
	before := time.Now().Add(-time.Minute)
	createJob(t, e, j)
	if j.CreatedAt.IsZero() || !j.UpdatedAt.Equal(j.CreatedAt) || j.CreatedAt.Before(before) {
		t.Fatalf("Create set CreatedAt=%v UpdatedAt=%v; want both now and equal", j.CreatedAt, j.UpdatedAt)
	}
	got, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "get")
	sameJob(t, "Get after Create", j, got)
	if !got.UpdatedAt.Equal(j.UpdatedAt) || !got.CreatedAt.Equal(j.CreatedAt) {
		t.Fatalf("stored timestamps %v/%v differ from the ones Create reported %v/%v", got.CreatedAt, got.UpdatedAt, j.CreatedAt, j.UpdatedAt)
	}

	// A job without active key, redo scope or pull numbers round-trips too.
	bare := &core.Job{JobID: ids.NewJobID(), TemplateID: tpl, AttemptNo: 2, Status: core.JobReady, Phase: core.PhaseReady, Progress: 100}
	createJob(t, e, bare)
	got, err = e.s.Jobs().Get(e.ctx, bare.JobID)
	must(t, err, "get bare")
	sameJob(t, "bare job", bare, got)

	_, err = e.s.Jobs().Get(e.ctx, ids.NewJobID())
	mustErrIs(t, err, core.ErrNotFound, "Get of a missing job")
}

func testJobCreateConflicts(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	first := createJob(t, e, newJob(tpl, 1))

	sameID := newJob(uniq("tpl-"), 1)
	sameID.JobID = first.JobID
	mustErrIs(t, e.s.Jobs().Create(e.ctx, sameID), core.ErrConflict, "Create with a taken job id")

	sameAttempt := newJob(tpl, 1)
	sameAttempt.ActiveKey = ""
	mustErrIs(t, e.s.Jobs().Create(e.ctx, sameAttempt), core.ErrConflict, "Create with a taken (template, attempt)")

	sameKey := newJob(tpl, 2)
	mustErrIs(t, e.s.Jobs().Create(e.ctx, sameKey), core.ErrConflict, "Create with a taken active key")

	// Nothing of the refused rows was written.
	jobs, err := e.s.Jobs().ListByTemplate(e.ctx, tpl)
	must(t, err, "list")
	if len(jobs) != 1 || jobs[0].JobID != first.JobID {
		t.Fatalf("after refused creates the template has %d jobs, want only %s", len(jobs), first.JobID)
	}
	for _, id := range []string{sameAttempt.JobID, sameKey.JobID} {
		_, err := e.s.Jobs().Get(e.ctx, id)
		mustErrIs(t, err, core.ErrNotFound, "Get of a refused job")
	}
	if _, err := e.s.Jobs().Get(e.ctx, first.JobID); err != nil {
		t.Fatalf("the first job is gone after a conflicting create: %v", err)
	}

	// Jobs without an active key never collide on it (NULLs are distinct).
	for i := 2; i <= 4; i++ {
		j := newJob(tpl, i)
		j.ActiveKey = ""
		createJob(t, e, j)
	}
}

func testJobGetActive(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	j := createJob(t, e, newJob(tpl, 1))
	got, err := e.s.Jobs().GetActive(e.ctx, j.ActiveKey)
	must(t, err, "GetActive")
	if got.JobID != j.JobID {
		t.Fatalf("GetActive returned %s, want %s", got.JobID, j.JobID)
	}
	_, err = e.s.Jobs().GetActive(e.ctx, core.ActiveKeyMigrate(tpl))
	mustErrIs(t, err, core.ErrNotFound, "GetActive of a free key")
	_, err = e.s.Jobs().GetActive(e.ctx, "")
	mustErrIs(t, err, core.ErrNotFound, "GetActive of the empty key")
	// Keys compare byte for byte (case matters).
	_, err = e.s.Jobs().GetActive(e.ctx, "IMAGE/"+tpl)
	mustErrIs(t, err, core.ErrNotFound, "GetActive with a key differing in case")
}

func testJobLatestAndList(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	other := uniq("tpl-")
	for _, a := range []int{1, 3, 2} {
		j := newJob(tpl, a)
		j.ActiveKey = ""
		createJob(t, e, j)
	}
	oj := newJob(other, 9)
	createJob(t, e, oj)

	latest, err := e.s.Jobs().Latest(e.ctx, tpl)
	must(t, err, "Latest")
	if latest.AttemptNo != 3 {
		t.Fatalf("Latest attempt = %d, want 3", latest.AttemptNo)
	}
	list, err := e.s.Jobs().ListByTemplate(e.ctx, tpl)
	must(t, err, "ListByTemplate")
	if len(list) != 3 {
		t.Fatalf("ListByTemplate returned %d jobs, want 3", len(list))
	}
	for i, j := range list {
		if j.AttemptNo != i+1 || j.TemplateID != tpl {
			t.Fatalf("ListByTemplate[%d] = attempt %d of %s, want attempt %d of %s", i, j.AttemptNo, j.TemplateID, i+1, tpl)
		}
	}
	_, err = e.s.Jobs().Latest(e.ctx, uniq("tpl-none-"))
	mustErrIs(t, err, core.ErrNotFound, "Latest of a template without jobs")
	list, err = e.s.Jobs().ListByTemplate(e.ctx, uniq("tpl-none-"))
	must(t, err, "ListByTemplate of a template without jobs")
	if len(list) != 0 {
		t.Fatalf("ListByTemplate of a template without jobs returned %d", len(list))
	}
}

func testJobUpdate(t *testing.T, e *env) {
	j := createJob(t, e, newJob(uniq("tpl-"), 1))
	got, err := e.s.Jobs().Update(e.ctx, j.JobID, func(x *core.Job) error {
		x.Status = core.JobRunning
		x.Phase = core.PhaseBuildingExt4
		x.Progress = 40
		x.RedoScope = []string{"node-z"}
		x.Pull.CompletedLayers = 7
		x.ResultJSON = "{}"
		// Identity is not the callback's to change.
		x.JobID = "something-else"
		x.TemplateID = "other-template"
		return nil
	})
	must(t, err, "Update")
	if got.JobID != j.JobID || got.TemplateID != j.TemplateID {
		t.Fatalf("Update changed the identity to %s/%s", got.JobID, got.TemplateID)
	}
	if !got.UpdatedAt.After(j.UpdatedAt) {
		t.Fatalf("UpdatedAt %v did not move forward from %v", got.UpdatedAt, j.UpdatedAt)
	}
	if !got.CreatedAt.Equal(j.CreatedAt) {
		t.Fatalf("Update changed CreatedAt from %v to %v", j.CreatedAt, got.CreatedAt)
	}
	stored, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "Get")
	sameJob(t, "stored job after Update", got, stored)
	if !stored.UpdatedAt.Equal(got.UpdatedAt) {
		t.Fatalf("stored UpdatedAt %v, Update returned %v", stored.UpdatedAt, got.UpdatedAt)
	}
	if stored.Status != core.JobRunning || stored.Progress != 40 || stored.Pull.CompletedLayers != 7 || len(stored.RedoScope) != 1 {
		t.Fatalf("stored job lacks the update: %+v", stored)
	}

	_, err = e.s.Jobs().Update(e.ctx, ids.NewJobID(), func(*core.Job) error { t.Fatal("fn called for a missing job"); return nil })
	mustErrIs(t, err, core.ErrNotFound, "Update of a missing job")
}

func testJobUpdateFnError(t *testing.T, e *env) {
	j := createJob(t, e, newJob(uniq("tpl-"), 1))
	boom := errors.New("boom")
	_, err := e.s.Jobs().Update(e.ctx, j.JobID, func(x *core.Job) error {
		x.Status = core.JobFailed
		x.ActiveKey = ""
		x.RedoScope[0] = "changed in place" // fn works on a copy
		return boom
	})
	if err != boom {
		t.Fatalf("Update returned %v, want fn's error as is", err)
	}
	stored, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "Get")
	sameJob(t, "job after a failed Update", j, stored)
	if !stored.UpdatedAt.Equal(j.UpdatedAt) {
		t.Fatalf("a failed Update moved UpdatedAt from %v to %v", j.UpdatedAt, stored.UpdatedAt)
	}
}

func testJobUpdateHeartbeat(t *testing.T, e *env) {
	j := createJob(t, e, newJob(uniq("tpl-"), 1))
	prev := j.UpdatedAt
	for i := 0; i < 5; i++ {
		got, err := e.s.Jobs().Update(e.ctx, j.JobID, func(*core.Job) error { return nil })
		must(t, err, "heartbeat Update")
		if !got.UpdatedAt.After(prev) {
			t.Fatalf("heartbeat %d: UpdatedAt %v is not after %v", i, got.UpdatedAt, prev)
		}
		stored, err := e.s.Jobs().Get(e.ctx, j.JobID)
		must(t, err, "Get")
		if !stored.UpdatedAt.Equal(got.UpdatedAt) {
			t.Fatalf("heartbeat %d: stored UpdatedAt %v, returned %v", i, stored.UpdatedAt, got.UpdatedAt)
		}
		prev = got.UpdatedAt
	}
}

func testJobUpdateConcurrent(t *testing.T, e *env) {
	j := newJob(uniq("tpl-"), 1)
	j.Progress, j.ReadyNodeCount = 0, 0
	createJob(t, e, j)
	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.s.Jobs().Update(e.ctx, j.JobID, func(x *core.Job) error {
				x.Progress++
				x.ReadyNodeCount++
				time.Sleep(fnPause) // so writers overlap between read and write
				return nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err, "concurrent Update")
	}
	got, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "Get")
	if got.Progress != writers || got.ReadyNodeCount != writers {
		t.Fatalf("after %d concurrent increments Progress=%d ReadyNodeCount=%d: updates were lost", writers, got.Progress, got.ReadyNodeCount)
	}
}

// apply is how services drive a job: through core's state machine.
func apply(e *env, jobID string, u core.JobUpdate) (*core.Job, error) {
	return e.s.Jobs().Update(e.ctx, jobID, func(j *core.Job) error { return j.Apply(u) })
}

func testJobTerminalAbsorbs(t *testing.T, e *env) {
	j := createJob(t, e, newJob(uniq("tpl-"), 1))
	_, err := apply(e, j.JobID, core.Progress(core.JobRunning, core.PhaseUnpacking, 20))
	must(t, err, "RUNNING")
	failed, err := apply(e, j.JobID, core.Fail(core.PhaseUnpacking, "layer 3 is corrupt"))
	must(t, err, "FAILED")
	if failed.Status != core.JobFailed || failed.ActiveKey != "" {
		t.Fatalf("after Fail: status %s active key %q", failed.Status, failed.ActiveKey)
	}
	for _, u := range []core.JobUpdate{
		core.Progress(core.JobRunning, core.PhaseBuildingExt4, 60),
		{Status: core.JobReady},
		core.Fail(core.PhasePulling, "again"),
		{ReadyNodeCount: ptr(9)},
	} {
		_, err := apply(e, j.JobID, u)
		mustErrIs(t, err, core.ErrStaleUpdate, "update after FAILED")
	}
	stored, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "Get")
	sameJob(t, "job after refused updates", failed, stored)
	if !stored.UpdatedAt.Equal(failed.UpdatedAt) {
		t.Fatalf("refused updates moved UpdatedAt from %v to %v", failed.UpdatedAt, stored.UpdatedAt)
	}
}

func testJobActiveKeyReleased(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	a := createJob(t, e, newJob(tpl, 1))
	b := newJob(tpl, 2)
	mustErrIs(t, e.s.Jobs().Create(e.ctx, b), core.ErrConflict, "second active job with the same key")

	_, err := apply(e, a.JobID, core.Fail(core.PhasePulling, "registry said no"))
	must(t, err, "fail the first job")
	_, err = e.s.Jobs().GetActive(e.ctx, a.ActiveKey)
	mustErrIs(t, err, core.ErrNotFound, "GetActive after the holder failed")

	must(t, e.s.Jobs().Create(e.ctx, b), "create with the released key")
	got, err := e.s.Jobs().GetActive(e.ctx, b.ActiveKey)
	must(t, err, "GetActive")
	if got.JobID != b.JobID {
		t.Fatalf("GetActive = %s, want the new job %s", got.JobID, b.JobID)
	}

	// Several terminal jobs of one template keep NULL keys side by side.
	_, err = apply(e, b.JobID, core.Fail(core.PhasePulling, "again"))
	must(t, err, "fail the second job")
	c := newJob(tpl, 3)
	createJob(t, e, c)
}

func testJobUpdateActiveKeyConflict(t *testing.T, e *env) {
	a := createJob(t, e, newJob(uniq("tpl-"), 1))
	b := createJob(t, e, newJob(uniq("tpl-"), 1))
	_, err := e.s.Jobs().Update(e.ctx, b.JobID, func(x *core.Job) error {
		x.ActiveKey = a.ActiveKey
		x.Progress = 99
		return nil
	})
	mustErrIs(t, err, core.ErrConflict, "Update taking another job's active key")
	stored, err := e.s.Jobs().Get(e.ctx, b.JobID)
	must(t, err, "Get")
	sameJob(t, "job after refused Update", b, stored)
}

func testJobListStale(t *testing.T, e *env) {
	tpl := uniq("tpl-")
	mk := func(attempt int, st core.JobStatus, ph core.Phase) *core.Job {
		j := newJob(tpl, attempt)
		j.Status, j.Phase, j.ActiveKey = st, ph, ""
		return createJob(t, e, j)
	}
	oldPending := mk(1, core.JobPending, core.PhasePulling)
	oldRunning := mk(2, core.JobRunning, core.PhaseBuildingExt4)
	oldBuilt := mk(3, core.JobBuilt, core.PhaseDistributing)
	oldReady := mk(4, core.JobReady, core.PhaseReady)
	oldRunningPost := mk(5, core.JobRunning, core.PhaseSnapshotting)
	freshRunning := mk(6, core.JobRunning, core.PhaseUnpacking)

	cutoff := freshRunning.UpdatedAt
	waitPast(cutoff)
	fresh, err := e.s.Jobs().Update(e.ctx, freshRunning.JobID, func(*core.Job) error { return nil })
	must(t, err, "heartbeat")
	if !fresh.UpdatedAt.After(cutoff) {
		t.Fatalf("heartbeat UpdatedAt %v not after %v", fresh.UpdatedAt, cutoff)
	}
	before := cutoff.Add(time.Microsecond)

	jobIDs := func(js []*core.Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.JobID)
		}
		return out
	}
	cases := []struct {
		name string
		q    ports.StaleQuery
		want []*core.Job
	}{
		{"active", ports.StaleQuery{Statuses: []core.JobStatus{core.JobPending, core.JobRunning}, UpdatedBefore: before},
			[]*core.Job{oldPending, oldRunning, oldRunningPost}},
		{"no age filter", ports.StaleQuery{Statuses: []core.JobStatus{core.JobRunning}},
			[]*core.Job{oldRunning, oldRunningPost, fresh}},
		{"phases", ports.StaleQuery{Statuses: []core.JobStatus{core.JobRunning, core.JobBuilt}, Phases: []core.Phase{core.PhaseDistributing, core.PhaseSnapshotting}, UpdatedBefore: before},
			[]*core.Job{oldBuilt, oldRunningPost}},
		{"exclude phases", ports.StaleQuery{Statuses: []core.JobStatus{core.JobRunning}, ExcludePhases: []core.Phase{core.PhaseSnapshotting}, UpdatedBefore: before},
			[]*core.Job{oldRunning}},
		{"limit keeps the oldest", ports.StaleQuery{Statuses: []core.JobStatus{core.JobPending, core.JobRunning, core.JobBuilt}, UpdatedBefore: before, Limit: 2},
			[]*core.Job{oldPending, oldRunning}},
		{"newest first", ports.StaleQuery{Statuses: []core.JobStatus{core.JobPending, core.JobRunning, core.JobBuilt}, UpdatedBefore: before, NewestFirst: true},
			[]*core.Job{oldRunningPost, oldBuilt, oldRunning, oldPending}},
		{"newest first, limit keeps the newest", ports.StaleQuery{Statuses: []core.JobStatus{core.JobRunning}, Limit: 2, NewestFirst: true},
			[]*core.Job{fresh, oldRunningPost}},
		{"terminal", ports.StaleQuery{Statuses: []core.JobStatus{core.JobReady}, UpdatedBefore: before},
			[]*core.Job{oldReady}},
		{"nothing older", ports.StaleQuery{Statuses: []core.JobStatus{core.JobRunning}, UpdatedBefore: oldPending.UpdatedAt},
			nil},
	}
	for _, c := range cases {
		got, err := e.s.Jobs().ListStale(e.ctx, c.q)
		must(t, err, "ListStale "+c.name)
		g, w := jobIDs(got), jobIDs(c.want)
		if len(g) != len(w) {
			t.Fatalf("ListStale %s = %v, want %v", c.name, g, w)
		}
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("ListStale %s = %v, want %v (NewestFirst %v)", c.name, g, w, c.q.NewestFirst)
			}
		}
	}
}

func testJobDeleteByTemplate(t *testing.T, e *env) {
	tpl, other := uniq("tpl-"), uniq("tpl-")
	for i := 1; i <= 3; i++ {
		j := newJob(tpl, i)
		j.ActiveKey = ""
		createJob(t, e, j)
	}
	keep := createJob(t, e, newJob(other, 1))
	n, err := e.s.Jobs().DeleteByTemplate(e.ctx, tpl)
	must(t, err, "DeleteByTemplate")
	if n != 3 {
		t.Fatalf("DeleteByTemplate = %d, want 3", n)
	}
	if list, _ := e.s.Jobs().ListByTemplate(e.ctx, tpl); len(list) != 0 {
		t.Fatalf("%d jobs left after DeleteByTemplate", len(list))
	}
	if _, err := e.s.Jobs().Get(e.ctx, keep.JobID); err != nil {
		t.Fatalf("DeleteByTemplate removed another template's job: %v", err)
	}
	n, err = e.s.Jobs().DeleteByTemplate(e.ctx, tpl)
	must(t, err, "second DeleteByTemplate")
	if n != 0 {
		t.Fatalf("second DeleteByTemplate = %d, want 0", n)
	}
}

func testClosedStore(t *testing.T, e *env) {
	// A row to aim at, so no call fails for a reason other than the close.
	j := createJob(t, e, newJob(uniq("tpl-"), 1))
	must(t, e.s.Close(), "Close")
	noop := func(context.Context, ports.Repos) error { return nil }
	calls := []struct {
		name string
		call func() error
	}{
		{"Jobs().Get", func() error { _, err := e.s.Jobs().Get(e.ctx, j.JobID); return err }},
		{"Jobs().Create", func() error { return e.s.Jobs().Create(e.ctx, newJob(uniq("tpl-"), 1)) }},
		{"Jobs().Update", func() error {
			_, err := e.s.Jobs().Update(e.ctx, j.JobID, func(*core.Job) error { return nil })
			return err
		}},
		{"Jobs().ListStale", func() error { _, err := e.s.Jobs().ListStale(e.ctx, ports.StaleQuery{}); return err }},
		{"Templates().ListDefinitions", func() error { _, err := e.s.Templates().ListDefinitions(e.ctx); return err }},
		{"Templates().UpdateDefinition", func() error {
			_, err := e.s.Templates().UpdateDefinition(e.ctx, "tpl", func(*core.Definition) error { return nil })
			return err
		}},
		{"Templates().UpsertReplica", func() error { return e.s.Templates().UpsertReplica(e.ctx, newReplica("tpl", "n1", "rfs-x")) }},
		{"Artifacts().Create", func() error { return e.s.Artifacts().Create(e.ctx, newArtifact()) }},
		{"Artifacts().CountReferences", func() error { _, err := e.s.Artifacts().CountReferences(e.ctx, "rfs-x", ""); return err }},
		{"Placements().List", func() error { _, err := e.s.Placements().List(e.ctx, "rfs-x"); return err }},
		{"Nodes().Upsert", func() error { return e.s.Nodes().Upsert(e.ctx, ports.NodeRecord{NodeID: "n1"}) }},
		{"Tx", func() error { return e.s.Tx(e.ctx, noop) }},
	}
	for _, c := range calls {
		mustErrIs(t, c.call(), core.ErrStoreNotInitialized, c.name+" on a closed store")
	}
}
