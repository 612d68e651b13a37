package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

func TestResumeHappyPath(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	job := e.ready("tpl-happy", fpA)
	aid := aidOf(fpA)

	eq(t, "job status", job.Status, core.JobReady)
	eq(t, "job phase", job.Phase, core.PhaseReady)
	eq(t, "job progress", job.Progress, 100)
	eq(t, "template status", job.TemplateStatus, string(core.TemplateReady))
	eq(t, "expected nodes", job.ExpectedNodeCount, 2)
	eq(t, "ready nodes", job.ReadyNodeCount, 2)
	eq(t, "failed nodes", job.FailedNodeCount, 0)
	eq(t, "job error", job.ErrorMessage, "")
	if job.ActiveKey != "" {
		t.Errorf("READY job still holds active key %q", job.ActiveKey)
	}

	var result map[string]json.RawMessage
	if err := json.Unmarshal([]byte(job.ResultJSON), &result); err != nil {
		t.Fatalf("result_json: %v", err)
	}
	if _, ok := result["remote_build_report"]; !ok {
		t.Errorf("result_json lacks the data plane's report: %s", job.ResultJSON)
	}

	a := e.artifact(aid)
	eq(t, "artifact status", a.Status, core.ArtifactReady)
	eq(t, "download token (a seed)", a.DownloadToken, "dk1.tok-1")
	eq(t, "tokens minted", e.ids.tokenCount(), 1)
	if a.GCDeadline != t0.Add(control.DefaultArtifactTTL).Unix() {
		t.Errorf("gc_deadline = %d, want now+TTL", a.GCDeadline)
	}

	def := e.def("tpl-happy")
	eq(t, "definition status", def.Status, core.TemplateReady)
	eq(t, "definition artifact", def.RootfsArtifactID, aid)
	var stored core.SandboxRequest
	if err := json.Unmarshal([]byte(def.RequestJSON), &stored); err != nil {
		t.Fatal(err)
	}
	if _, ok := stored.Annotations[core.AnnotationAppSnapshotCreate]; ok {
		t.Error("stored request keeps the snapshot-create annotation")
	}
	eq(t, "stored template id", stored.Annotations[core.AnnotationTemplateID], "tpl-happy")
	eq(t, "stored request id", stored.RequestID, "")

	reps := e.replicas("tpl-happy")
	for _, n := range []string{"node-1", "node-2"} {
		r := reps[n]
		if r == nil {
			t.Fatalf("no replica on %s", n)
		}
		eq(t, n+" replica status", r.Status, core.ReplicaReady)
		eq(t, n+" replica phase", r.Phase, core.ReplicaPhaseReady)
		eq(t, n+" snapshot path", r.SnapshotPath, "/snap/tpl-happy/"+n)
		eq(t, n+" guest image version", r.GuestImageVersion, "guest-"+n)
		eq(t, n+" kernel version", r.KernelVersion, "6.6")
		eq(t, n+" agent version (not reported)", r.AgentVersion, "")
		eq(t, n+" artifact", r.ArtifactID, aid)
		eq(t, n+" cleanup_required", r.CleanupRequired, false)
		eq(t, n+" spec", r.Spec, "cpu=2000m,mem=2000Mi")
	}
	eqSlice(t, "placements", e.placementNodes(aid), []string{"node-1", "node-2"})

	// What the nodes were told.
	for _, c := range e.agent.CreateImageCalls() {
		a := c.Art
		eq(t, "CreateImage artifact", a.ArtifactID, aid)
		eq(t, "url", a.DownloadURL, baseURL+"/cube/template/artifact/download?artifact_id="+aid+"&token="+e.nodeToken(aid))
		eq(t, "token", a.Token, e.nodeToken(aid))
		if a.Token == e.artifact(aid).DownloadToken {
			t.Error("the node was given the stored seed, not the derived token")
		}
		eq(t, "sha256", a.SHA256, shaExt4)
		eq(t, "size", a.SizeBytes, int64(67108864))
		eq(t, "wls", a.WritableLayerSize, "20Gi")
		eq(t, "fingerprint", a.Fingerprint, fpA)
		eq(t, "instance type", a.InstanceType, "cubebox")
	}
	for _, c := range e.agent.AppSnapshotCalls() {
		req := c.Req
		eq(t, "snapshot create annotation", req.Annotations[core.AnnotationAppSnapshotCreate], "true")
		eq(t, "snapshot request template", req.Annotations[core.AnnotationTemplateID], "tpl-happy")
		eq(t, "snapshot request id", req.RequestID, job.JobID)
	}
	eqSlice(t, "snapshot nodes", e.snapshotNodes(), []string{"node-1", "node-2"})
}

func TestResumePartialDistribution(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	nodeToken := testDownloadTokens.For(aidOf(fpA), "dk1.tok-1")
	e.createFail["node-2"] = errors.New("GET http://master:8089/cube/template/artifact/download?artifact_id=x&token=" + nodeToken + ": 503")
	job := e.ready("tpl-partial", fpA)
	if strings.Contains(job.ErrorMessage, nodeToken) || strings.Contains(job.ErrorMessage, "tok-1") {
		t.Errorf("job message leaks the download token: %q", job.ErrorMessage)
	}
	aid := aidOf(fpA)

	eq(t, "job status", job.Status, core.JobReady)
	eq(t, "template status", job.TemplateStatus, string(core.TemplatePartiallyReady))
	eq(t, "ready nodes", job.ReadyNodeCount, 1)
	eq(t, "failed nodes", job.FailedNodeCount, 1)
	if !strings.Contains(job.ErrorMessage, "node-2") {
		t.Errorf("job message %q does not name the failed node", job.ErrorMessage)
	}
	eq(t, "definition status", e.def("tpl-partial").Status, core.TemplatePartiallyReady)
	// node-2 was sent the artifact: its placement stays on record, so a
	// copy it may hold despite the error is destroyed with the artifact.
	eqSlice(t, "placements", e.placementNodes(aid), []string{"node-1", "node-2"})
	eqSlice(t, "snapshot nodes", e.snapshotNodes(), []string{"node-1"})

	r2 := e.replicas("tpl-partial")["node-2"]
	if r2 == nil {
		t.Fatal("no replica row for the failed node")
	}
	eq(t, "failed replica status", r2.Status, core.ReplicaFailed)
	eq(t, "failed replica error phase", r2.LastErrorPhase, string(core.PhaseDistributing))
	eq(t, "failed replica cleanup", r2.CleanupRequired, true)
}

func TestResumeSnapshotFailureOnEveryNode(t *testing.T) {
	e := newEnv(t, "node-1")
	e.snapFail["node-1"] = errors.New("vm boot failed")
	job := e.ready("tpl-snapfail", fpA)

	eq(t, "job status", job.Status, core.JobFailed)
	eq(t, "job phase", job.Phase, core.PhaseSnapshotting)
	eq(t, "template status", job.TemplateStatus, string(core.TemplateFailed))
	eq(t, "definition status", e.def("tpl-snapfail").Status, core.TemplateFailed)
	r := e.replicas("tpl-snapfail")["node-1"]
	eq(t, "replica error phase", r.LastErrorPhase, string(core.PhaseSnapshotting))
	// The copy is on the node: its placement is recorded for cleanup.
	eqSlice(t, "placements", e.placementNodes(aidOf(fpA)), []string{"node-1"})
}

func TestResumeZeroNodes(t *testing.T) {
	e := newEnv(t) // no healthy nodes
	job := e.create(request("tpl-nonodes"))
	e.build(job.JobID, fpA)
	e.wait()

	j := e.job(job.JobID)
	eq(t, "job status", j.Status, core.JobFailed)
	eq(t, "job phase", j.Phase, core.PhaseDistributing)
	if !strings.Contains(j.ErrorMessage, core.ErrNoTemplateNodes.Error()) {
		t.Errorf("job message %q does not say no template nodes", j.ErrorMessage)
	}
	if _, err := e.store.Templates().GetDefinition(e.ctx, "tpl-nonodes"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("definition written for a job without nodes (err=%v)", err)
	}
	if n := len(e.replicas("tpl-nonodes")); n != 0 {
		t.Errorf("%d replica rows written for a job without nodes", n)
	}
	eq(t, "CreateImage calls", len(e.agent.CreateImageCalls()), 0)

	// Resume itself reports the reason.
	err := e.svc.Resume(e.ctx, job.JobID)
	if err != nil {
		t.Errorf("Resume of a FAILED job = %v, want nil (nothing to do)", err)
	}
}

// TestResumeUnknownScopeEntries: nodes a scope named that are gone by the
// time the build is done (CreateFromImage refuses unknown ones up front;
// the submit below skips that check, as a node removed meanwhile would).
func TestResumeUnknownScopeEntries(t *testing.T) {
	e := newEnv(t, "node-1")
	req := request("tpl-scope")
	req.DistributionScope = []string{"node-9", "10.0.0.1", "node-3"}
	res, err := e.svc.SubmitFromImage(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	job := res.Job
	e.build(job.JobID, fpA)
	e.wait()
	j := e.job(job.JobID)
	eq(t, "job status", j.Status, core.JobFailed)
	if !strings.Contains(j.ErrorMessage, "not healthy or not found: node-3,node-9") {
		t.Errorf("job message %q does not list the unknown entries sorted", j.ErrorMessage)
	}
}

func TestResumeScopeByIP(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	req := request("tpl-ip")
	req.DistributionScope = []string{"10.0.0.2"}
	job := e.create(req)
	e.build(job.JobID, fpA)
	e.wait()
	eq(t, "job status", e.job(job.JobID).Status, core.JobReady)
	eqSlice(t, "CreateImage nodes", e.createImageNodes(), []string{"node-2"})
}

func TestResumeAllDistributionFailures(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.createFail["node-1"] = errors.New("disk full")
	e.createFail["node-2"] = errors.New("sha256 mismatch")
	job := e.ready("tpl-alldown", fpA)

	eq(t, "job status", job.Status, core.JobFailed)
	eq(t, "job phase", job.Phase, core.PhaseDistributing)
	if !strings.HasPrefix(job.ErrorMessage, "artifact distribution failed on all 2 nodes: node node-1: disk full") {
		t.Errorf("job message = %q", job.ErrorMessage)
	}
	if _, err := e.store.Templates().GetDefinition(e.ctx, "tpl-alldown"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("definition written although no node got the artifact (err=%v)", err)
	}
	eq(t, "AppSnapshot calls", len(e.agent.AppSnapshotCalls()), 0)
	// Both nodes were sent the artifact; whatever they kept is on record.
	eq(t, "placements", len(e.placementNodes(aidOf(fpA))), 2)
}

func TestDuplicateBuiltCallbacks(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	job := e.create(request("tpl-dup"))
	e.build(job.JobID, fpA)

	// The data plane retries its BUILT report while (and after) the first
	// one's resume runs.
	built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	built.ArtifactID, built.Fingerprint = aidOf(fpA), fpA
	for range 3 {
		ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, ports.StatusReport{Update: built, Artifact: artifactMeta(fpA), Inputs: inputsOf(fpA)})
		if err != nil || ok {
			t.Fatalf("duplicate BUILT: applied=%v err=%v, want false, nil", ok, err)
		}
	}
	e.wait()
	// And both replays of the pipeline find nothing to do.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.svc.Resume(e.ctx, job.JobID); err != nil {
				t.Errorf("Resume replay: %v", err)
			}
		}()
	}
	wg.Wait()

	eq(t, "job status", e.job(job.JobID).Status, core.JobReady)
	eq(t, "tokens minted", e.ids.tokenCount(), 1)
	eq(t, "CreateImage calls", len(e.agent.CreateImageCalls()), 2)
	eq(t, "AppSnapshot calls", len(e.agent.AppSnapshotCalls()), 2)
	eq(t, "replicas", len(e.replicas("tpl-dup")), 2)
}

func TestConcurrentResumeRegistersOnce(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-race"))
	// Make the job BUILT without starting the callback's own resume: write
	// the artifact and the BUILT state directly, as a crashed master left
	// them.
	if err := e.store.Artifacts().Create(e.ctx, artifactMeta(fpA)); err != nil {
		t.Fatal(err)
	}
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID, u.Fingerprint = aidOf(fpA), fpA
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { return j.Apply(u) }); err != nil {
		t.Fatal(err)
	}
	// CreateImage lingers until a second caller shows up (or a moment
	// passes), so unserialized resumes would overlap inside the pipeline.
	var inside sync.WaitGroup
	inside.Add(1)
	var once sync.Once
	var mu sync.Mutex
	calls := 0
	e.agent.CreateImageFunc = func(context.Context, ports.Node, core.NodeArtifact) error {
		mu.Lock()
		calls++
		if calls == 2 {
			once.Do(inside.Done)
		}
		mu.Unlock()
		done := make(chan struct{})
		go func() { inside.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
			once.Do(inside.Done)
		}
		return nil
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.svc.Resume(e.ctx, job.JobID) }()
	}
	wg.Wait()
	eq(t, "job status", e.job(job.JobID).Status, core.JobReady)
	eq(t, "CreateImage calls", calls, 1)
	eq(t, "tokens minted", e.ids.tokenCount(), 1)
	eq(t, "AppSnapshot calls", len(e.agent.AppSnapshotCalls()), 1)
}

func TestLateReportsAfterReadyAreIgnored(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.ready("tpl-late", fpA)
	before := e.job(job.JobID)
	token := e.artifact(aidOf(fpA)).DownloadToken

	built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	built.ArtifactID, built.Fingerprint = aidOf(fpA), fpA
	late := []core.JobUpdate{
		core.Progress(core.JobRunning, core.PhasePulling, 5),
		built,
		core.Fail(core.PhaseUploading, "late failure"),
	}
	for _, u := range late {
		meta := (*core.Artifact)(nil)
		if u.Status == core.JobBuilt {
			meta = artifactMeta(fpA)
			meta.Ext4SHA256 = strings.Repeat("f", 64) // must not be written
		}
		ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, ports.StatusReport{Update: u, Artifact: meta})
		if err != nil || ok {
			t.Fatalf("late %s report: applied=%v err=%v", u.Status, ok, err)
		}
	}
	e.wait()
	after := e.job(job.JobID)
	eq(t, "status", after.Status, before.Status)
	eq(t, "phase", after.Phase, before.Phase)
	eq(t, "message", after.ErrorMessage, before.ErrorMessage)
	eq(t, "artifact sha", e.artifact(aidOf(fpA)).Ext4SHA256, shaExt4)
	eq(t, "token", e.artifact(aidOf(fpA)).DownloadToken, token)
}

func TestStatusReportValidation(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-bad"))
	bad := func() *core.Artifact { return artifactMeta(fpA) }
	tests := []struct {
		name   string
		update core.JobUpdate
		meta   *core.Artifact
		target error
	}{
		{"unknown job", core.Progress(core.JobRunning, core.PhasePulling, 5), nil, core.ErrNotFound},
		{"READY from the data plane", core.Progress(core.JobReady, core.PhaseReady, 100), nil, core.ErrInvalidArgument},
		{"post-build phase", core.Progress(core.JobRunning, core.PhaseDistributing, 70), nil, core.ErrInvalidArgument},
		{"BUILT without artifact", core.JobUpdate{Status: core.JobBuilt}, nil, core.ErrInvalidArgument},
		{"BUILT with bad sha", core.JobUpdate{Status: core.JobBuilt, ArtifactID: aidOf(fpA)}, func() *core.Artifact { a := bad(); a.Ext4SHA256 = "xyz"; return a }(), core.ErrInvalidArgument},
		{"BUILT artifact/fingerprint mismatch", core.JobUpdate{Status: core.JobBuilt, ArtifactID: aidOf(fpB)}, bad(), core.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := job.JobID
			if tc.target == core.ErrNotFound {
				id = "job-missing"
			}
			ok, err := e.svc.HandleStatusReport(e.ctx, id, ports.StatusReport{Update: tc.update, Artifact: tc.meta})
			if ok {
				t.Error("applied")
			}
			wantErrIs(t, err, tc.target)
		})
	}
	eq(t, "job still pending", e.job(job.JobID).Status, core.JobPending)
}

func TestResumeReplaysAfterCrash(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.snapFail["node-2"] = errors.New("transient")
	job := e.create(request("tpl-crash"))
	e.build(job.JobID, fpA)
	e.wait()
	// Pretend the process died after snapshotting: push the job back to
	// RUNNING/SNAPSHOTTING (as it was mid-run) by rewriting the row.
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error {
		j.Status, j.Phase, j.Progress, j.ActiveKey = core.JobRunning, core.PhaseSnapshotting, 90, core.ActiveKeyFromImage("tpl-crash")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	delete(e.snapFail, "node-2")
	token := e.artifact(aidOf(fpA)).DownloadToken

	e.clock.Advance(time.Hour)
	n, err := e.svc.SweepBuilt(e.ctx, 10*time.Minute)
	if err != nil || n != 1 {
		t.Fatalf("SweepBuilt = %d, %v; want 1 resumed", n, err)
	}
	jj := e.job(job.JobID)
	eq(t, "job status", jj.Status, core.JobReady)
	eq(t, "template status", jj.TemplateStatus, string(core.TemplateReady))
	eq(t, "token kept", e.artifact(aidOf(fpA)).DownloadToken, token)
	eq(t, "definitions", len(mustList(t, e)), 1)
}

func mustList(t *testing.T, e *env) []*core.Definition {
	t.Helper()
	ds, err := e.store.Templates().ListDefinitions(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestSweepBuiltReplaysStuckJobs(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-stuck"))
	// The BUILT callback was applied but its resume never ran.
	if err := e.store.Artifacts().Create(e.ctx, artifactMeta(fpA)); err != nil {
		t.Fatal(err)
	}
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID, u.Fingerprint = aidOf(fpA), fpA
	if _, err := e.store.Jobs().Update(e.ctx, job.JobID, func(j *core.Job) error { return j.Apply(u) }); err != nil {
		t.Fatal(err)
	}
	n, err := e.svc.SweepBuilt(e.ctx, 10*time.Minute)
	if err != nil || n != 0 {
		t.Fatalf("fresh BUILT job swept: %d, %v", n, err)
	}
	// A resume at work holds the lock: the sweeper leaves the job alone.
	l, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(11 * time.Minute)
	if n, err := e.svc.SweepBuilt(e.ctx, 10*time.Minute); err != nil || n != 0 {
		t.Fatalf("locked job swept: %d, %v", n, err)
	}
	_ = l.Unlock(e.ctx)
	if n, err := e.svc.SweepBuilt(e.ctx, 10*time.Minute); err != nil || n != 1 {
		t.Fatalf("SweepBuilt = %d, %v; want 1", n, err)
	}
	eq(t, "job status", e.job(job.JobID).Status, core.JobReady)
}

func TestAliasFromRequest(t *testing.T) {
	e := newEnv(t, "node-1")
	req := request("tpl-aliased")
	req.Alias = "web"
	job := e.create(req)
	e.build(job.JobID, fpA)
	e.wait()
	eq(t, "alias", e.def("tpl-aliased").Alias, "web")

	// An alias another template holds is accepted and moves to the new
	// template once it is READY (upstream's newest release).
	req2 := request("tpl-newer")
	req2.Alias = "web"
	job2 := e.create(req2)
	eq(t, "still with the first while the new one builds", e.def("tpl-aliased").Alias, "web")
	e.build(job2.JobID, fpB)
	e.wait()
	eq(t, "job status", e.job(job2.JobID).Status, core.JobReady)
	eq(t, "moved to the newer", e.def("tpl-newer").Alias, "web")
	eq(t, "the first let go", e.def("tpl-aliased").Alias, "")
	if msg := e.job(job2.JobID).ErrorMessage; !strings.Contains(msg, `alias "web" moved here from template tpl-aliased`) {
		t.Errorf("job message %q does not record the move", msg)
	}
	info, _ := e.svc.GetTemplate(e.ctx, "tpl-newer")
	eq(t, "recorded", info.AliasMovedFrom, "tpl-aliased")

	// An id is never an alias, even at create: refused up front.
	e.ready("api", testFingerprint("sha256:"+strings.Repeat("c3", 32)))
	req3 := request("tpl-third")
	req3.Alias = "api"
	_, err := e.svc.CreateFromImage(e.ctx, req3, baseURL)
	var taken *core.NameTakenError
	if !errors.As(err, &taken) || taken.Holder != "api" || taken.HolderKind != core.NameID {
		t.Fatalf("alias equal to an id: %v", err)
	}
}

// TestAliasMovesOnlyToTheNewerReadyBuild: two creates asking for one
// alias; the newer takes it when READY, and the older, finishing later,
// does not take it back; a create that is not READY leaves it where it is.
func TestAliasMovesOnlyToTheNewerReadyBuild(t *testing.T) {
	e := newEnv(t, "node-1")
	older, newer := request("tpl-older"), request("tpl-newer")
	older.Alias, newer.Alias = "app", "app"
	jobOld := e.create(older)
	e.clock.Advance(time.Second)
	jobNew := e.create(newer)

	e.build(jobNew.JobID, fpB)
	e.wait()
	eq(t, "the newer took it", e.def("tpl-newer").Alias, "app")
	e.build(jobOld.JobID, fpA)
	e.wait()
	eq(t, "the older is READY", e.job(jobOld.JobID).Status, core.JobReady)
	eq(t, "the newer keeps it", e.def("tpl-newer").Alias, "app")
	eq(t, "the older has none", e.def("tpl-older").Alias, "")
	if msg := e.job(jobOld.JobID).ErrorMessage; !strings.Contains(msg, "whose latest build") {
		t.Errorf("older job message %q", msg)
	}

	// PARTIALLY_READY (one of two nodes failed) is not READY: no move.
	e2 := newEnv(t, "node-1", "node-2")
	e2.ready("tpl-holder", fpA)
	if _, err := e2.svc.SetAlias(e2.ctx, "tpl-holder", ptr("svc")); err != nil {
		t.Fatal(err)
	}
	e2.clock.Advance(time.Second)
	partial := request("tpl-partial")
	partial.Alias = "svc"
	e2.snapFail["node-2"] = errors.New("snapshot broke")
	j := e2.create(partial)
	e2.build(j.JobID, fpB)
	e2.wait()
	eq(t, "partial status", e2.def("tpl-partial").Status, core.TemplatePartiallyReady)
	eq(t, "alias stays with the holder", e2.def("tpl-holder").Alias, "svc")
	if msg := e2.job(j.JobID).ErrorMessage; !strings.Contains(msg, "moves only to a READY template") {
		t.Errorf("partial job message %q", msg)
	}
}

func ptr[T any](v T) *T { return &v }

func TestResumeTimeoutStillRecordsFailure(t *testing.T) {
	e := newEnv(t, "node-1")
	job := e.create(request("tpl-timeout"))
	e.agent.CreateImageFunc = func(ctx context.Context, _ ports.Node, _ core.NodeArtifact) error {
		<-ctx.Done()
		return ctx.Err()
	}
	e.svc.Config.ResumeTimeout = 50 * time.Millisecond
	e.build(job.JobID, fpA)
	e.wait()
	j := e.job(job.JobID)
	eq(t, "job status", j.Status, core.JobFailed)
	if !strings.Contains(j.ErrorMessage, "deadline exceeded") {
		t.Errorf("job message = %q", j.ErrorMessage)
	}
}

// TestFailureAfterTheDefinitionSettlesIt: the resume writes the definition
// PENDING before the snapshot; when the job then fails (here the snapshot
// outlives the resume's budget) the definition must take the status its
// replicas give, not stay PENDING with no job at work. A create that got
// nowhere ends FAILED, so the request can be posted again; a READY
// template whose redo failed on one node keeps serving from the others
// (PARTIALLY_READY) and stays in convergence. Before, both were left
// PENDING: the re-post was refused as "already exists (PENDING)" and the
// READY template dropped out of convergence and migrate.
func TestFailureAfterTheDefinitionSettlesIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		redo bool
		want core.TemplateStatus
	}{
		{"create", false, core.TemplateFailed},
		{"redo of a READY template", true, core.TemplatePartiallyReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1", "node-2")
			if tc.redo {
				eq(t, "before the redo", e.ready("tpl-to", fpA).Status, core.JobReady)
			}
			snapshot := e.agent.AppSnapshotFunc
			e.agent.AppSnapshotFunc = func(ctx context.Context, n ports.Node, req *core.SandboxRequest, dir string) (ports.SnapshotResult, error) {
				if n.ID != "node-2" && tc.redo {
					return snapshot(ctx, n, req, dir)
				}
				<-ctx.Done()
				return ports.SnapshotResult{}, ctx.Err()
			}
			e.svc.Config.ResumeTimeout = 50 * time.Millisecond
			var job *core.Job
			if tc.redo {
				var err error
				if job, err = e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "redo-1", TemplateID: "tpl-to", DistributionScope: []string{"node-2"}}); err != nil {
					t.Fatal(err)
				}
			} else {
				job = e.create(request("tpl-to"))
				e.build(job.JobID, fpA)
			}
			e.wait()
			j := e.job(job.JobID)
			eq(t, "job status", j.Status, core.JobFailed)
			d := e.def("tpl-to")
			eq(t, "definition status", d.Status, tc.want)
			if d.LastError == "" {
				t.Error("the definition does not say why")
			}

			e.svc.Config.ResumeTimeout = 0
			e.agent.AppSnapshotFunc = snapshot
			if tc.redo {
				if def, err := e.svc.ResolveTemplate(e.ctx, "tpl-to"); err != nil || def.TemplateID != "tpl-to" {
					t.Fatalf("ResolveTemplate after the failed redo: %v, %v", def, err)
				}
				started, err := e.svc.Converge(e.ctx)
				if err != nil || len(started) != 1 {
					t.Fatalf("convergence after the failed redo started %d jobs, %v", len(started), err)
				}
				e.wait()
			} else {
				again := e.create(request("tpl-to"))
				if again.JobID == job.JobID {
					t.Fatal("the re-post got the failed job back")
				}
				e.build(again.JobID, fpA)
				e.wait()
			}
			eq(t, "definition at the end", e.def("tpl-to").Status, core.TemplateReady)
		})
	}
}

// TestNodeErrorsNeverStoreTheDownloadToken: a node's error may quote the
// artifact URL it was given, token included, whether the copy or the
// snapshot failed (the snapshot request carries the URL too). No stored
// message the API shows may hold the token: the job's message and result,
// the replica's message, the definition's last error. Before, snapshot
// errors were stored as the node sent them.
func TestNodeErrorsNeverStoreTheDownloadToken(t *testing.T) {
	quoting := func(url string) error { return errors.New("fetch " + url + ": connection reset") }
	for _, tc := range []struct {
		name    string
		failing []string // nodes whose call fails
		copy    bool     // CreateImage fails, else AppSnapshot
	}{
		{"copy fails on one node", []string{"node-2"}, true},
		{"snapshot fails on one node", []string{"node-2"}, false},
		{"snapshot fails on every node", []string{"node-1", "node-2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1", "node-2")
			copyImage, snapshot := e.agent.CreateImageFunc, e.agent.AppSnapshotFunc
			e.agent.CreateImageFunc = func(ctx context.Context, n ports.Node, art core.NodeArtifact) error {
				if tc.copy && slices.Contains(tc.failing, n.ID) {
					return quoting(art.DownloadURL)
				}
				return copyImage(ctx, n, art)
			}
			e.agent.AppSnapshotFunc = func(ctx context.Context, n ports.Node, req *core.SandboxRequest, dir string) (ports.SnapshotResult, error) {
				if !tc.copy && slices.Contains(tc.failing, n.ID) {
					for _, c := range req.Containers {
						if c.Image != nil && c.Image.Annotations[core.AnnotationArtifactURL] != "" {
							return ports.SnapshotResult{}, quoting(c.Image.Annotations[core.AnnotationArtifactURL])
						}
					}
					t.Error("the snapshot request carries no artifact URL")
				}
				return snapshot(ctx, n, req, dir)
			}
			job := e.ready("tpl-leak", fpA)
			seed, token := e.artifact(aidOf(fpA)).DownloadToken, e.nodeToken(aidOf(fpA))
			if seed == "" {
				t.Fatal("the artifact has no download token")
			}
			stored := map[string]string{
				"job message":            job.ErrorMessage,
				"job result":             job.ResultJSON,
				"definition last error":  e.def("tpl-leak").LastError,
				"node-2 replica message": e.replicas("tpl-leak")["node-2"].ErrorMessage,
			}
			if !strings.Contains(stored["node-2 replica message"], "connection reset") {
				t.Errorf("the node's error is lost: %q", stored["node-2 replica message"])
			}
			for what, msg := range stored {
				if strings.Contains(msg, token) || strings.Contains(msg, seed) {
					t.Errorf("%s holds the download token or its seed: %q", what, msg)
				}
			}
		})
	}
}
