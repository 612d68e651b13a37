package data_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// buildOnce runs job jobID for req on r and returns the outcome.
func buildOnce(t *testing.T, w *world, r *replica, jobID string, req *core.FromImageRequest) data.Outcome {
	t.Helper()
	w.addJob(t, jobID, req)
	if err := r.exec.Submit(context.Background(), buildReq(jobID, req)); err != nil {
		t.Fatal(err)
	}
	return r.wait(t)
}

func lastReport(w *world, jobID string) ports.StatusReport {
	reps := w.reportsOf(jobID)
	return reps[len(reps)-1].r
}

func TestReadyArtifactWithBytesIsReused(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{})
	first := buildOnce(t, w, r, "job-1", fromImage("tpl-a"))
	if first.Err != nil || first.Reused {
		t.Fatalf("first build: %+v", first)
	}
	row, _ := w.artifact(first.ArtifactID)

	// Another template with the same spec: same fingerprint, no build.
	second := buildOnce(t, w, r, "job-2", fromImage("tpl-b"))
	if second.Err != nil || !second.Reused || second.ArtifactID != first.ArtifactID || second.Result != nil {
		t.Fatalf("second build: %+v", second)
	}
	if n := len(r.builder.BuildCalls()); n != 1 {
		t.Fatalf("builder ran %d times, want 1", n)
	}
	if n := len(r.source.StreamLayersCalls()); n != 1 {
		t.Fatalf("layers fetched %d times; a reuse must not pull", n)
	}
	last := lastReport(w, "job-2")
	if last.Update.Status != core.JobBuilt || last.Update.ArtifactID != first.ArtifactID || last.Artifact == nil || *last.Artifact != row {
		t.Fatalf("reuse report = %+v / %+v, want BUILT with the existing row %+v", last.Update, last.Artifact, row)
	}
	if now, _ := w.artifact(first.ArtifactID); now != row {
		t.Fatalf("reuse changed the artifact row: %+v -> %+v", row, now)
	}
}

// The stored object of a READY row is checked before it is reused: its
// size and, when the store reports one, its sha256 must match the row, and
// the row must belong to the build's fingerprint. Each case breaks one of
// these alone. A build checks under the fingerprint lock and, while another
// build holds the lock, each time it polls; both paths are run.
func TestReadyArtifactReuseChecksTheStoredObject(t *testing.T) {
	type verdict int
	const (
		reuse verdict = iota
		rebuild
		conflict
	)
	cases := []struct {
		name   string
		break_ func(t *testing.T, w *world, id, key string)
		want   verdict
	}{
		{"intact", func(*testing.T, *world, string, string) {}, reuse},
		{"bytes deleted", func(t *testing.T, w *world, _, key string) {
			if err := w.blob.Delete(context.Background(), key); err != nil {
				t.Fatal(err)
			}
		}, rebuild},
		{"bytes truncated", func(t *testing.T, w *world, _, key string) {
			b, _ := w.object(t, key)
			w.putObject(t, key, b[:3])
		}, rebuild},
		// Same size, other bytes: only the sha256 check sees it.
		{"bytes corrupted, size kept", func(t *testing.T, w *world, _, key string) {
			b, _ := w.object(t, key)
			b[len(b)-1] ^= 0xff
			w.putObject(t, key, b)
		}, rebuild},
		// The store knows no digest: the size is all there is to check.
		{"store reports no sha256", func(t *testing.T, w *world, _, _ string) {
			w.blob.mu.Lock()
			w.blob.hideSHA = true
			w.blob.mu.Unlock()
		}, reuse},
		{"store reports no sha256, bytes truncated", func(t *testing.T, w *world, _, key string) {
			b, _ := w.object(t, key)
			w.putObject(t, key, b[:len(b)-1])
			w.blob.mu.Lock()
			w.blob.hideSHA = true
			w.blob.mu.Unlock()
		}, rebuild},
		// An id whose row records another fingerprint: a collision of the
		// truncated id, never reused and never built over.
		{"row of another fingerprint", func(t *testing.T, w *world, id, _ string) {
			w.setArtifact(t, id, func(a *core.Artifact) { a.Fingerprint = strings.Repeat("e", 64) })
		}, conflict},
	}
	for _, path := range []string{"under the lock", "while another build holds the lock"} {
		for _, tc := range cases {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				w := newWorld()
				r := newReplica(t, w, data.ExecutorConfig{})
				first := buildOnce(t, w, r, "job-1", fromImage("tpl-a"))
				if first.Err != nil || first.Reused {
					t.Fatalf("first build: %+v", first)
				}
				key := core.ArtifactObjectKey(first.ArtifactID)
				good, _ := w.object(t, key)
				tc.break_(t, w, first.ArtifactID, key)
				before, _ := w.artifact(first.ArtifactID)

				var second data.Outcome
				if path == "under the lock" {
					second = buildOnce(t, w, r, "job-2", fromImage("tpl-b"))
				} else {
					second = buildWhileLocked(t, w, r, "job-2", fromImage("tpl-b"), first.Result.Fingerprint)
				}

				builds := len(r.builder.BuildCalls())
				after, _ := w.artifact(first.ArtifactID)
				switch tc.want {
				case reuse:
					if second.Err != nil || !second.Reused || second.ArtifactID != first.ArtifactID || builds != 1 {
						t.Fatalf("second build: %+v after %d builds, want a reuse", second, builds)
					}
					if after != before {
						t.Fatalf("reuse changed the row: %+v -> %+v", before, after)
					}
				case rebuild:
					if second.Err != nil || second.Reused || builds != 2 {
						t.Fatalf("second build: %+v after %d builds, want a fresh build", second, builds)
					}
					if got, _ := w.object(t, key); after.Status != core.ArtifactReady || string(got) != string(good) || after.Ext4SizeBytes != int64(len(good)) {
						t.Fatalf("row %+v, bytes %q", after, got)
					}
				case conflict:
					if !errors.Is(second.Err, core.ErrConflict) || second.Reused || builds != 1 {
						t.Fatalf("second build: %+v after %d builds, want a conflict", second, builds)
					}
					if after != before {
						t.Fatalf("the refused build changed the row: %+v -> %+v", before, after)
					}
				}
			})
		}
	}
}

// buildWhileLocked runs job jobID while the test holds the fingerprint
// lock, releasing it once the build has polled it twice (so it checked the
// stored artifact at least once while waiting), or as soon as the build
// finished without it.
func buildWhileLocked(t *testing.T, w *world, r *replica, jobID string, req *core.FromImageRequest, fp string) data.Outcome {
	t.Helper()
	ctx := context.Background()
	lk, err := w.locker.TryLock(ctx, data.LockPrefix+fp)
	if err != nil {
		t.Fatal(err)
	}
	base := w.locker.contention()
	w.addJob(t, jobID, req)
	if err := r.exec.Submit(ctx, buildReq(jobID, req)); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for w.locker.contention() < base+2 {
		select {
		case o := <-r.done:
			lk.Unlock(ctx)
			return o
		case <-deadline:
			t.Fatal("the build never polled the held lock")
		case <-time.After(time.Millisecond):
		}
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return r.wait(t)
}

func TestArtifactBeingDeletedIsNotBuiltOver(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{})
	first := buildOnce(t, w, r, "job-1", fromImage("tpl-a"))
	w.setArtifact(t, first.ArtifactID, func(a *core.Artifact) { a.Status = core.ArtifactCleanupPending })

	second := buildOnce(t, w, r, "job-2", fromImage("tpl-b"))
	if !errors.Is(second.Err, core.ErrConflict) {
		t.Fatalf("outcome %+v, want a conflict", second)
	}
	msg := deref(lastReport(w, "job-2").Update.ErrorMessage)
	if !strings.Contains(msg, "being deleted") {
		t.Fatalf("error message %q", msg)
	}
	if a, _ := w.artifact(first.ArtifactID); a.Status != core.ArtifactCleanupPending {
		t.Fatalf("row moved to %s", a.Status)
	}
}

// Two template centers share the database, the bucket and the lock table.
// Both get a job for the same spec: one builds, the other waits on the
// fingerprint lock and reuses the winner's READY artifact.
func TestTwoReplicasBuildASpecOnce(t *testing.T) {
	w := newWorld()
	a := newReplica(t, w, data.ExecutorConfig{})
	b := newReplica(t, w, data.ExecutorConfig{})
	w.addJob(t, "job-a", fromImage("tpl-a"))
	w.addJob(t, "job-b", fromImage("tpl-b"))

	building := make(chan struct{})
	for _, r := range []*replica{a, b} {
		r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
			close(building) // a second build would panic here
			// Hold the build until the other replica has found the lock taken.
			eventually(t, "the other replica to wait on the lock", func() bool { return w.locker.contention() > 0 })
			return writeImage(spec, tree)
		}
	}
	ctx := context.Background()
	if err := a.exec.Submit(ctx, buildReq("job-a", fromImage("tpl-a"))); err != nil {
		t.Fatal(err)
	}
	if err := b.exec.Submit(ctx, buildReq("job-b", fromImage("tpl-b"))); err != nil {
		t.Fatal(err)
	}
	oa, ob := a.wait(t), b.wait(t)
	if oa.Err != nil || ob.Err != nil {
		t.Fatalf("outcomes %+v / %+v", oa, ob)
	}
	if oa.Reused == ob.Reused || oa.ArtifactID != ob.ArtifactID {
		t.Fatalf("want exactly one build and one reuse of the same artifact: %+v / %+v", oa, ob)
	}
	if n := len(a.builder.BuildCalls()) + len(b.builder.BuildCalls()); n != 1 {
		t.Fatalf("%d builds, want 1", n)
	}
	row, _ := w.artifact(oa.ArtifactID)
	for _, id := range []string{"job-a", "job-b"} {
		if j := w.job(id); j.Status != core.JobBuilt || j.ArtifactID != row.ArtifactID {
			t.Fatalf("%s = %+v", id, j)
		}
		if got := lastReport(w, id).Artifact; got == nil || *got != row {
			t.Fatalf("%s reported artifact %+v, want %+v", id, got, row)
		}
	}
}

func TestHeartbeatKeepsTheJobFresh(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{HeartbeatEvery: time.Millisecond})
	pulling := func() int {
		n := 0
		for _, x := range w.reportsOf("job-a") {
			if x.err == nil && x.r.Update.Status == core.JobRunning && x.r.Update.Phase == core.PhasePulling {
				n++
			}
		}
		return n
	}
	var before, after time.Time
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, _ func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		// A long pull that emits no event: only heartbeats report.
		before = w.job("job-a").UpdatedAt
		n := pulling()
		eventually(t, "three heartbeats during the pull", func() bool { return pulling() >= n+3 })
		after = w.job("job-a").UpdatedAt
		return nil, nil
	})
	if o := buildOnce(t, w, r, "job-a", fromImage("tpl-a")); o.Err != nil {
		t.Fatal(o.Err)
	}
	if !after.After(before) {
		t.Fatalf("updated_at did not move during the pull: %v -> %v", before, after)
	}
	for _, x := range w.reportsOf("job-a") {
		if x.err != nil {
			t.Fatalf("report refused: %+v: %v", x.r.Update, x.err)
		}
	}
}

func TestShutdownCancelsRunningBuilds(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{})
	w.addJob(t, "job-a", fromImage("tpl-a"))
	inBuild := make(chan struct{})
	r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
		close(inBuild)
		<-ctx.Done()
		return ports.BuildResult{}, ctx.Err()
	}
	if err := r.exec.Submit(context.Background(), buildReq("job-a", fromImage("tpl-a"))); err != nil {
		t.Fatal(err)
	}
	<-inBuild
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.exec.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if r.exec.Running() != 0 {
		t.Fatal("builds still running after Shutdown returned")
	}
	j := w.job("job-a")
	if j.Status != core.JobFailed || j.ErrorMessage != "template center shutting down" || j.Phase != core.PhaseBuildingExt4 {
		t.Fatalf("job = %+v", j)
	}
	aid, _ := expectedArtifactID(t, fromImage("tpl-a"))
	if a, _ := w.artifact(aid); a.Status != core.ArtifactFailed {
		t.Fatalf("artifact = %+v", a)
	}
	w.addJob(t, "job-b", fromImage("tpl-b"))
	if err := r.exec.Submit(context.Background(), buildReq("job-b", fromImage("tpl-b"))); !errors.Is(err, data.ErrShuttingDown) || !errors.Is(err, core.ErrBusy) {
		t.Fatalf("submit after shutdown: %v", err)
	}
}

// A Shutdown whose budget is already spent (the HTTP drain used it up)
// still lets the cancelled build record its end: row FAILED, job FAILED,
// reported on a live context, lock released. Only a build that outlasts
// ShutdownGrace too is abandoned.
func TestShutdownWithSpentBudgetStillFailsTheBuild(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  time.Duration // <0: cancelled before the call
		hang    bool          // the build ignores its cancellation
		wantErr bool
	}{
		{name: "budget spent before the call", budget: -1},
		{name: "budget ends while the build unwinds", budget: time.Millisecond},
		{name: "build outlasts the grace", budget: -1, hang: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			r := newReplica(t, w, data.ExecutorConfig{ShutdownGrace: 5 * time.Second})
			if tc.hang {
				r.exec.Config.ShutdownGrace = 50 * time.Millisecond
			}
			var (
				mu        sync.Mutex
				failedCtx []error // ctx.Err() of each FAILED report
			)
			r.exec.Reporter = &portsmock.StatusReporterMock{ReportFunc: func(ctx context.Context, jobID string, rep ports.StatusReport) error {
				if rep.Update.Status == core.JobFailed {
					mu.Lock()
					failedCtx = append(failedCtx, ctx.Err())
					mu.Unlock()
				}
				return w.reporter.Report(ctx, jobID, rep)
			}}
			w.addJob(t, "job-a", fromImage("tpl-a"))
			inBuild, release := make(chan struct{}), make(chan struct{})
			defer close(release)
			r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
				close(inBuild)
				if tc.hang {
					<-release
				}
				<-ctx.Done()
				time.Sleep(20 * time.Millisecond) // unwinding takes a moment
				return ports.BuildResult{}, ctx.Err()
			}
			if err := r.exec.Submit(context.Background(), buildReq("job-a", fromImage("tpl-a"))); err != nil {
				t.Fatal(err)
			}
			<-inBuild
			ctx, cancel := context.WithTimeout(context.Background(), tc.budget)
			defer cancel()
			if tc.budget < 0 {
				cancel()
			}
			err := r.exec.Shutdown(ctx)
			if tc.wantErr {
				if !errors.Is(err, ctx.Err()) {
					t.Fatalf("Shutdown = %v, want the context's error once the grace ran out", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Shutdown = %v", err)
			}
			aid, _ := expectedArtifactID(t, fromImage("tpl-a"))
			if a, _ := w.artifact(aid); a.Status != core.ArtifactFailed {
				t.Errorf("artifact is %s, want FAILED", a.Status)
			}
			if j := w.job("job-a"); j.Status != core.JobFailed || j.ErrorMessage != "template center shutting down" {
				t.Errorf("job is %s %q, want FAILED", j.Status, j.ErrorMessage)
			}
			mu.Lock()
			got := slices.Clone(failedCtx)
			mu.Unlock()
			if len(got) != 1 || got[0] != nil {
				t.Errorf("FAILED reports sent on contexts %v, want one live one", got)
			}
			if held := w.locker.heldNames(); len(held) != 0 {
				t.Errorf("locks still held: %v", held)
			}
		})
	}
}

func TestLiveProgressIsThrottledAndDeletedAfterTheTerminalReport(t *testing.T) {
	w := newWorld()
	// A publish interval no test run reaches: only phase changes publish.
	r := newReplica(t, w, data.ExecutorConfig{PublishEvery: time.Hour})
	published := func() []ports.LiveProgress {
		var out []ports.LiveProgress
		for _, c := range w.progress.PublishCalls() {
			out = append(out, c.P)
		}
		return out
	}
	const events = 200
	r.source.StreamLayersFunc = portsmock.Streamed(func(ctx context.Context, _ ports.ImageRequest, _ *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
		for i := 1; i <= events; i++ {
			progress(ports.PullProgress{TotalBytes: events, DownloadedBytes: int64(i), TotalLayers: 1})
		}
		return nil, nil
	})
	r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
		eventually(t, "BUILDING_EXT4 published", func() bool {
			for _, p := range published() {
				if p.Phase == core.PhaseBuildingExt4 {
					return true
				}
			}
			return false
		})
		return writeImage(spec, tree)
	}
	if o := buildOnce(t, w, r, "job-a", fromImage("tpl-a")); o.Err != nil {
		t.Fatal(o.Err)
	}
	pubs := published()
	if len(pubs) == 0 || len(pubs) > 6 {
		t.Fatalf("%d publishes for %d pull events and 4 phases: %+v", len(pubs), events, pubs)
	}
	var sawPull bool
	for i, p := range pubs {
		if i > 0 && p.Phase == pubs[i-1].Phase && p.Progress == pubs[i-1].Progress {
			t.Fatalf("duplicate publish: %+v", pubs)
		}
		if p.Phase == core.PhaseBuildingExt4 {
			sawPull = p.Pull.DownloadedBytes == events
		}
	}
	if !sawPull {
		t.Fatalf("the BUILDING_EXT4 publish lacks the final pull counters: %+v", pubs)
	}
	w.mu.Lock()
	ev := append([]string(nil), w.events...)
	w.mu.Unlock()
	if ev[len(ev)-1] != "delete job-a" || ev[len(ev)-2] != "report BUILT" {
		t.Fatalf("events end with %v, want the BUILT report then the progress delete", ev[max(0, len(ev)-3):])
	}
	if n := len(w.progress.DeleteCalls()); n != 1 {
		t.Fatalf("%d deletes", n)
	}
}

// A panicking adapter must not take the process down or wedge the job.
func TestPanicInThePipelineFailsTheJob(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{})
	// The builder runs on the build goroutine, inside the flattener's
	// call, where the executor recovers it.
	r.builder.BuildFunc = func(context.Context, ports.BuildSpec, ports.Tree) (ports.BuildResult, error) {
		panic("builder bug")
	}
	o := buildOnce(t, w, r, "job-a", fromImage("tpl-a"))
	if o.Err == nil || !strings.Contains(o.Err.Error(), "builder bug") {
		t.Fatalf("outcome %+v", o)
	}
	if j := w.job("job-a"); j.Status != core.JobFailed {
		t.Fatalf("job = %+v", j)
	}
	aid, _ := expectedArtifactID(t, fromImage("tpl-a"))
	if a, _ := w.artifact(aid); a.Status != core.ArtifactFailed {
		t.Fatalf("artifact = %+v", a)
	}
	if len(w.locker.heldNames()) != 0 {
		t.Fatal("lock leaked after a panic")
	}
}

// droppableLocker hands out locks the test can take away from their holder,
// as a dead database session does; notice decides whether Lost() closes.
type droppableLocker struct {
	ports.Locker
	mu    sync.Mutex
	locks []*droppableLock
}

type droppableLock struct {
	ports.Lock
	lost chan struct{}
	once sync.Once
}

func (k *droppableLock) Lost() <-chan struct{} { return k.lost }

func (l *droppableLocker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	k, err := l.Locker.TryLock(ctx, name)
	if err != nil {
		return nil, err
	}
	lk := &droppableLock{Lock: k, lost: make(chan struct{})}
	l.mu.Lock()
	l.locks = append(l.locks, lk)
	l.mu.Unlock()
	return lk, nil
}

// drop frees the first lock handed out for another holder.
func (l *droppableLocker) drop(notice bool) {
	l.mu.Lock()
	k := l.locks[0]
	l.mu.Unlock()
	k.once.Do(func() {
		_ = k.Lock.Unlock(context.Background())
		if notice {
			close(k.lost)
		}
	})
}

// A build whose fingerprint lock is lost mid-build (replica A) must not
// overwrite the row or bytes of the build that took the lock after it (B),
// whichever finishes first; when the loss goes unnoticed, the row's claim
// still fences A's writes off.
func TestLostLockBuildDoesNotOverwriteTheNewerBuild(t *testing.T) {
	for _, tc := range []struct {
		name         string
		notice       bool // the lock's Lost() closes
		staleFirst   bool // A finishes before B
		staleFails   bool // A's build fails instead of finishing
		wantLockLost bool
	}{
		{name: "noticed, stale build finishes first", notice: true, staleFirst: true, wantLockLost: true},
		{name: "noticed, newer build finishes first", notice: true, wantLockLost: true},
		{name: "noticed, stale build fails first", notice: true, staleFirst: true, staleFails: true, wantLockLost: true},
		{name: "unnoticed, stale build finishes first", staleFirst: true},
		{name: "unnoticed, stale build fails first", staleFirst: true, staleFails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			a := newReplica(t, w, data.ExecutorConfig{})
			b := newReplica(t, w, data.ExecutorConfig{})
			locks := &droppableLocker{Locker: w.locker}
			a.exec.Locker = locks
			w.addJob(t, "job-a", fromImage("tpl-a"))
			w.addJob(t, "job-b", fromImage("tpl-b"))

			aIn, aGo := make(chan struct{}), make(chan struct{})
			a.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
				close(aIn)
				<-aGo // ignores ctx: a builder may notice the cancellation late
				if tc.staleFails {
					return ports.BuildResult{}, errors.New("mkfs failed")
				}
				return writeImage(spec, tree)
			}
			bIn, bGo := make(chan struct{}), make(chan struct{})
			b.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
				close(bIn)
				<-bGo
				e, err := tree.Entry(0)
				if err != nil {
					return ports.BuildResult{}, err
				}
				img := append([]byte("ext4-of-B:"), e.Header.Name...) // builds are not reproducible
				return ports.BuildResult{SizeBytes: int64(len(img))}, os.WriteFile(spec.OutPath, img, 0o644)
			}
			if err := a.exec.Submit(context.Background(), buildReq("job-a", fromImage("tpl-a"))); err != nil {
				t.Fatal(err)
			}
			<-aIn
			locks.drop(tc.notice)
			if err := b.exec.Submit(context.Background(), buildReq("job-b", fromImage("tpl-b"))); err != nil {
				t.Fatal(err)
			}
			<-bIn // B holds the lock and claimed the row
			aid, _ := expectedArtifactID(t, fromImage("tpl-a"))
			claimed, _ := w.artifact(aid)

			var oa, ob data.Outcome
			if tc.staleFirst {
				close(aGo)
				oa = a.wait(t)
				if row, _ := w.artifact(aid); row.Status != core.ArtifactBuilding || row.BuildOwnerToken != claimed.BuildOwnerToken {
					t.Fatalf("after the stale build ended the row is %s (owner %q), want B's BUILDING claim %q", row.Status, row.BuildOwnerToken, claimed.BuildOwnerToken)
				}
				close(bGo)
				ob = b.wait(t)
			} else {
				close(bGo)
				ob = b.wait(t)
				close(aGo)
				oa = a.wait(t)
			}
			if oa.Err == nil {
				t.Errorf("the stale build succeeded")
			} else if tc.wantLockLost && !errors.Is(oa.Err, data.ErrLockLost) {
				t.Errorf("stale build failed with %v, want ErrLockLost", oa.Err)
			}
			if ob.Err != nil {
				t.Fatalf("newer build: %v", ob.Err)
			}
			row, _ := w.artifact(aid)
			obj, ok := w.object(t, core.ObjectKeyOf(&row))
			sum := sha256.Sum256(obj)
			if row.Status != core.ArtifactReady || !ok || row.Ext4SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("row %s sha %s; stored %v sha %x", row.Status, row.Ext4SHA256, ok, sum)
			}
			if !bytes.HasPrefix(obj, []byte("ext4-of-B:")) {
				t.Fatalf("stored bytes %q are not the newer build's", obj)
			}
		})
	}
}

// A build whose fingerprint lock is lost while no other build takes it
// over (a dropped database session) settles the row it still owns: FAILED
// at once, naming the lost lock, and reported so with the job, rather than
// left BUILDING with no build at work until the reconciler's abandoned-row
// sweep (RunningStaleAfter) fails it. The next build of the spec claims it
// as usual. A row a newer build has claimed is left alone
// (TestLostLockBuildDoesNotOverwriteTheNewerBuild).
func TestLostLockBuildSettlesTheRowItStillOwns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails bool // the builder fails instead of finishing
	}{
		{name: "the build fails", fails: true},
		{name: "the build finishes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			r := newReplica(t, w, data.ExecutorConfig{})
			locks := &droppableLocker{Locker: w.locker}
			r.exec.Locker = locks
			req := fromImage("tpl-a")
			w.addJob(t, "job-a", req)
			in, release := make(chan struct{}), make(chan struct{})
			r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
				close(in)
				<-release // ignores ctx: a builder may notice the cancellation late
				if tc.fails {
					return ports.BuildResult{}, errors.New("mkfs failed")
				}
				return writeImage(spec, tree)
			}
			if err := r.exec.Submit(context.Background(), buildReq("job-a", req)); err != nil {
				t.Fatal(err)
			}
			<-in // the build holds the lock and claimed the row
			aid, _ := expectedArtifactID(t, req)
			claimed, _ := w.artifact(aid)
			locks.drop(true)
			close(release)
			o := r.wait(t)
			if !errors.Is(o.Err, data.ErrLockLost) {
				t.Fatalf("build ended with %v, want ErrLockLost", o.Err)
			}
			row, _ := w.artifact(aid)
			if row.Status != core.ArtifactFailed || !strings.Contains(row.LastError, "lock lost") || row.BuildOwnerToken != claimed.BuildOwnerToken {
				t.Fatalf("after the build ended the row is %s (last error %q, owner %q); want FAILED by its own claim %q, naming the lost lock",
					row.Status, row.LastError, row.BuildOwnerToken, claimed.BuildOwnerToken)
			}
			if last := lastReport(w, "job-a").Update; last.Status != core.JobFailed || last.ArtifactStatus != string(core.ArtifactFailed) {
				t.Fatalf("terminal report %s with artifact status %q, want FAILED with FAILED", last.Status, last.ArtifactStatus)
			}

			// The next build of the spec claims the row and finishes it.
			r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
				return writeImage(spec, tree)
			}
			if next := buildOnce(t, w, r, "job-b", fromImage("tpl-b")); next.Err != nil || next.Reused {
				t.Fatalf("next build: %+v", next)
			}
			if row, _ := w.artifact(aid); row.Status != core.ArtifactReady {
				t.Fatalf("after the next build the row is %s, want READY", row.Status)
			}
		})
	}
}
