package control_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcclient"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// startBuild creates tpl and reports it RUNNING without naming an artifact
// (a data plane that finds the artifact already built names it only in
// BUILT), so the job is no reference yet.
func (e *env) startBuild(tid string) *core.Job {
	e.t.Helper()
	job := e.create(request(tid))
	if ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, statusReport(core.Progress(core.JobRunning, core.PhaseUnpacking, 20))); err != nil || !ok {
		e.t.Fatalf("RUNNING report: applied=%v err=%v", ok, err)
	}
	return job
}

func builtReport(fp string) ports.StatusReport {
	u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	u.ArtifactID, u.ArtifactStatus, u.Fingerprint = aidOf(fp), "READY", fp
	u.ResultJSON = `{"status":"BUILT","artifact_id":"` + aidOf(fp) + `"}`
	return ports.StatusReport{Update: u, Artifact: artifactMeta(fp), Inputs: inputsOf(fp)}
}

// refusedBuild checks a BUILT report for an artifact being deleted: the
// callback is answered (recorded, applied), and the resume then fails the
// job with the reason and binds nothing.
func (e *env) refusedBuild(tid, jobID string, applied bool, err error) {
	e.t.Helper()
	if err != nil || !applied {
		e.t.Fatalf("BUILT report: applied=%v err=%v, want it recorded", applied, err)
	}
	e.wait()
	j := e.job(jobID)
	eq(e.t, "job status", j.Status, core.JobFailed)
	if !strings.Contains(j.ErrorMessage, "being deleted; redo to rebuild") {
		e.t.Errorf("job error = %q, want the being-deleted reason", j.ErrorMessage)
	}
	if n := len(e.replicas(tid)); n != 0 {
		e.t.Errorf("%d replicas of %s bound", n, tid)
	}
}

func TestBuiltReportForArtifactBeingDeletedIsRefused(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	e.destroyFail["node-1"] = errors.New("node busy")
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatal(err)
	}
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactCleanupPending)

	job := e.startBuild("tpl-b")
	ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, builtReport(fpA))
	e.refusedBuild("tpl-b", job.JobID, ok, err)
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactCleanupPending)
	eq(t, "CreateImage calls", len(e.createImageNodes()), 1) // tpl-a's only

	// Without metadata (the row holds it) the answer is the same.
	job2 := e.startBuild("tpl-c")
	u := builtReport(fpA)
	u.Artifact = nil
	ok, err = e.svc.HandleStatusReport(e.ctx, job2.JobID, u)
	e.refusedBuild("tpl-c", job2.JobID, ok, err)
}

// noLockLocker fails the test when the status callback itself asks for a
// lock: the callback path must never wait on one. (The resume it starts
// takes the artifact's lock on its own goroutine; that is allowed.)
type noLockLocker struct {
	ports.Locker
	t *testing.T
}

func (l *noLockLocker) check(name string) {
	if strings.Contains(string(debug.Stack()), ".HandleStatusReport(") {
		l.t.Errorf("the status callback asked for lock %s", name)
	}
}

func (l *noLockLocker) Lock(ctx context.Context, name string) (ports.Lock, error) {
	l.check(name)
	return l.Locker.Lock(ctx, name)
}

func (l *noLockLocker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	l.check(name)
	return l.Locker.TryLock(ctx, name)
}

// TestBuiltReportIsAnsweredWhileAnotherTemplateHoldsTheArtifact: template A
// is distributing artifact X (its resume holds X's lock for minutes) when
// template B, built from the same spec, reports BUILT with X. The report
// must be recorded and answered without waiting for the lock (before, it
// waited up to 10 s — as long as the data plane's own request timeout — and
// either timed out unbound or bound after the data plane had given up), and
// B's resume runs once A's lets go.
func TestBuiltReportIsAnsweredWhileAnotherTemplateHoldsTheArtifact(t *testing.T) {
	e := newEnv(t, "node-1")
	aid := aidOf(fpA)
	held, err := e.locker.Lock(e.ctx, "tc_resume_"+aid) // template A's long distribution
	if err != nil {
		t.Fatal(err)
	}
	e.svc.Locker = &noLockLocker{Locker: e.locker, t: t}
	job := e.startBuild("tpl-b")

	ctx, cancel := context.WithCancel(e.ctx)
	ok, err := e.svc.HandleStatusReport(ctx, job.JobID, builtReport(fpA))
	cancel() // the data plane's request ends right after the answer
	if err != nil || !ok {
		t.Fatalf("BUILT report: applied=%v err=%v", ok, err)
	}
	j := e.job(job.JobID)
	eq(t, "job status after the answer", j.Status, core.JobBuilt)
	eq(t, "job artifact", j.ArtifactID, aid)

	if err := held.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wait()
	j = e.job(job.JobID)
	eq(t, "job status", j.Status, core.JobReady)
	a := e.artifact(aid)
	eq(t, "artifact sha256 from the report", a.Ext4SHA256, shaExt4)
	eq(t, "artifact status", a.Status, core.ArtifactReady)
	if !strings.Contains(j.ResultJSON, "remote_build_report") {
		t.Errorf("result_json %s lost the data plane's report", j.ResultJSON)
	}
}

// TestBuiltReportDuringDeleteIsAnsweredAtOnce: a delete of another
// template holds the artifact's lock in its phase 2 and ends it
// CLEANUP_PENDING. The BUILT report is answered at once; B's resume runs
// after the delete and finds the artifact being deleted.
func TestBuiltReportDuringDeleteIsAnsweredAtOnce(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	job := e.startBuild("tpl-b")

	inDestroy, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.agent.DestroyImageFunc = func(_ context.Context, n ports.Node, _ string) error {
		if n.ID == "node-2" {
			return errors.New("node busy") // the delete ends CLEANUP_PENDING
		}
		once.Do(func() { close(inDestroy) })
		<-release
		return nil
	}
	delErr := make(chan error, 1)
	go func() { delErr <- e.svc.Delete(e.ctx, "tpl-a", "") }()
	<-inDestroy // phase 2, artifact lock held

	e.svc.Locker = &noLockLocker{Locker: e.locker, t: t}
	ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, builtReport(fpA))
	if err != nil || !ok {
		t.Fatalf("BUILT report: applied=%v err=%v", ok, err)
	}
	close(release)
	if err := <-delErr; err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.refusedBuild("tpl-b", job.JobID, ok, err)
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactCleanupPending)
}

func TestDeletePhase3KeepForgetsDestroyedCopies(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	jobB := e.startBuild("tpl-b")

	// While phase 2 destroys the copies, tpl-b's job comes to name the
	// artifact: phase 3 finds a reference again.
	var once sync.Once
	destroy := e.agent.DestroyImageFunc
	e.agent.DestroyImageFunc = func(ctx context.Context, n ports.Node, image string) error {
		once.Do(func() {
			if _, err := e.store.Jobs().Update(context.Background(), jobB.JobID, func(j *core.Job) error {
				j.ArtifactID = aid
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
		return destroy(ctx, n, image)
	}
	if err := e.svc.Delete(e.ctx, "tpl-a", ""); err != nil {
		t.Fatal(err)
	}
	eq(t, "artifact status", e.artifact(aid).Status, core.ArtifactReady)
	eq(t, "DeleteArtifact calls", len(e.disp.DeleteArtifactCalls()), 0)
	eqSlice(t, "DestroyImage nodes", e.destroyNodes(), []string{"node-1", "node-2"})
	eq(t, "placements of destroyed copies", len(e.placementNodes(aid)), 0)

	// tpl-b's resume distributes the artifact again.
	if ok, err := e.svc.HandleStatusReport(e.ctx, jobB.JobID, builtReport(fpA)); err != nil || !ok {
		t.Fatalf("BUILT report: applied=%v err=%v", ok, err)
	}
	e.wait()
	eq(t, "tpl-b job", e.job(jobB.JobID).Status, core.JobReady)
	eqSlice(t, "placements", e.placementNodes(aid), []string{"node-1", "node-2"})
	for _, n := range []string{"node-1", "node-2"} {
		if !e.onNode[n][aid] {
			t.Errorf("%s did not get the artifact back", n)
		}
	}
}

// TestBuiltReportAfterItsArtifactWasDeleted: the artifact's row and bytes
// were removed (its last template deleted and GC run) while this job's
// build was reported; the BUILT report carries the metadata. The master
// must not create the row READY for bytes that are gone: the job fails
// naming the fix. Before, the row was recreated READY and the job went
// READY on an artifact nobody could download.
func TestBuiltReportAfterItsArtifactWasDeleted(t *testing.T) {
	e := newEnv(t, "node-1")
	e.disp.ArtifactExistsFunc = func(context.Context, *core.Artifact) (bool, error) { return false, nil }
	job := e.create(request("tpl-late"))
	e.build(job.JobID, fpA)
	e.wait()
	j := e.job(job.JobID)
	eq(t, "status", j.Status, core.JobFailed)
	if !strings.Contains(j.ErrorMessage, "redo") {
		t.Errorf("error message %q does not name the fix", j.ErrorMessage)
	}
	if a, err := e.store.Artifacts().Get(e.ctx, aidOf(fpA)); err == nil {
		t.Errorf("artifact row recreated as %s without bytes", a.Status)
	}
	eq(t, "node copies", len(e.agent.CreateImageCalls()), 0)
}

// TestBuiltReportWithNoRowAsksTheDataPlane: the artifact has no row when
// its BUILT report is bound (its last template deleted and GC run while it
// was built), and the master asks the real data-plane client whether the
// bytes are there. The client can only ask about a READY row with a
// download token (it answers "present" without asking for a row that is
// not READY); before, the master asked with a bare row, so the guard never
// ran and a READY row was created for bytes that were gone.
func TestBuiltReportWithNoRowAsksTheDataPlane(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer int // the download route's answer to HEAD
		want   core.JobStatus
	}{
		{"bytes gone", http.StatusNotFound, core.JobFailed},
		{"bytes there", http.StatusOK, core.JobReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			var mu sync.Mutex
			var asked []string // download tokens the data plane was asked with
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodHead || r.URL.Path != core.DownloadPath {
					http.Error(w, "unexpected request", http.StatusTeapot)
					return
				}
				mu.Lock()
				asked = append(asked, r.Header.Get(core.DownloadTokenHeader))
				mu.Unlock()
				w.WriteHeader(tc.answer)
			}))
			defer srv.Close()
			dp, err := tcclient.New(tcclient.Config{BaseURL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			e.disp.ArtifactExistsFunc = dp.ArtifactExists

			job := e.create(request("tpl-late"))
			e.build(job.JobID, fpA)
			e.wait()
			j := e.job(job.JobID)
			eq(t, "job status", j.Status, tc.want)
			mu.Lock()
			defer mu.Unlock()
			if len(asked) != 1 || asked[0] == "" {
				t.Fatalf("the data plane was asked %d times, with tokens %q; want once, with a token", len(asked), asked)
			}
			a, err := e.store.Artifacts().Get(e.ctx, aidOf(fpA))
			if tc.want == core.JobFailed {
				if err == nil {
					t.Errorf("artifact row created as %s for bytes the data plane does not have", a.Status)
				}
				if !strings.Contains(j.ErrorMessage, "redo") {
					t.Errorf("error message %q does not name the fix", j.ErrorMessage)
				}
				eq(t, "node copies", len(e.agent.CreateImageCalls()), 0)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "artifact status", a.Status, core.ArtifactReady)
			eq(t, "the row keeps the token it was asked with", testDownloadTokens.For(a.ArtifactID, a.DownloadToken), asked[0])
		})
	}
}
