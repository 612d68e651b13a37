package control_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// migrateFakes plays the master's local disk and the data plane's store.
type migrateFakes struct {
	mu       sync.Mutex
	local    map[string][]byte // artifact id -> legacy local bytes
	store    map[string][]byte // object key -> stored bytes
	uploads  int
	removed  []string
	inStore  bool  // what ArtifactExists answers
	upErr    error // UploadArtifact error
	probeErr error
}

// withMigrate wires the migrate hooks of e's service to f.
func (e *env) withMigrate(f *migrateFakes) {
	e.disp.UploadArtifactFunc = f.UploadArtifact
	legacy := &portsmock.LegacyArtifactsMock{}
	e.svc.Legacy = legacy
	legacy.OpenFunc = func(_ context.Context, a *core.Artifact) (io.ReadCloser, int64, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		b, ok := f.local[a.ArtifactID]
		if !ok {
			return nil, 0, fmt.Errorf("local %s: %w", a.ArtifactID, core.ErrNotFound)
		}
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
	legacy.RemoveFunc = func(_ context.Context, a *core.Artifact) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.removed = append(f.removed, a.ArtifactID)
		delete(f.local, a.ArtifactID)
		return nil
	}
	e.disp.ArtifactExistsFunc = func(context.Context, *core.Artifact) (bool, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.inStore, f.probeErr
	}
}

// UploadArtifact verifies size and sha256 like the data plane does.
func (f *migrateFakes) UploadArtifact(_ context.Context, aid string, body io.Reader, info ports.ObjectInfo) (ports.StoredObject, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uploads++
	if f.upErr != nil {
		return ports.StoredObject{}, f.upErr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return ports.StoredObject{}, err
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != info.Size || hex.EncodeToString(sum[:]) != info.SHA256 {
		return ports.StoredObject{}, fmt.Errorf("upload of %s: got %d bytes sha256 %x, declared %d %s", aid, len(b), sum, info.Size, info.SHA256)
	}
	key := aid + "/" + aid + ".ext4"
	f.store[key] = b
	f.inStore = true
	return ports.StoredObject{ObjectKey: key, StorageBackend: "s3"}, nil
}

var legacyBytes = bytes.Repeat([]byte("ext4-bytes;"), 1000)

// legacyTemplate makes a READY template whose artifact lives only on the
// master's disk (no object key), and returns its artifact id.
func (e *env) legacyTemplate(tid, fp string, f *migrateFakes, withSHA bool) string {
	e.t.Helper()
	f.mu.Lock()
	f.inStore = true // the bytes were there when it was built
	f.mu.Unlock()
	e.ready(tid, fp)
	aid := aidOf(fp)
	sum := sha256.Sum256(legacyBytes)
	if _, err := e.store.Artifacts().Update(e.ctx, aid, func(a *core.Artifact) error {
		a.ObjectKey, a.StorageBackend = "", "local"
		a.Ext4SizeBytes, a.Ext4SHA256 = int64(len(legacyBytes)), hex.EncodeToString(sum[:])
		if !withSHA {
			a.Ext4SizeBytes, a.Ext4SHA256 = 0, ""
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	f.mu.Lock()
	f.local[aid] = bytes.Clone(legacyBytes)
	f.inStore = false
	f.mu.Unlock()
	return aid
}

func newMigrateFakes() *migrateFakes {
	return &migrateFakes{local: map[string][]byte{}, store: map[string][]byte{}}
}

// migrate submits and waits for the background run.
func (e *env) migrate(tid string) *core.Job {
	e.t.Helper()
	job, err := e.svc.Migrate(e.ctx, control.MigrateRequest{RequestID: "req-m", TemplateID: tid})
	if err != nil {
		e.t.Fatalf("Migrate(%s): %v", tid, err)
	}
	e.wait()
	got, err := e.svc.GetMigrateJob(e.ctx, job.JobID)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func TestMigrateLegacyArtifact(t *testing.T) {
	for _, withSHA := range []bool{true, false} {
		t.Run(fmt.Sprintf("row_has_sha=%v", withSHA), func(t *testing.T) {
			e := newEnv(t, "node-1")
			f := newMigrateFakes()
			e.withMigrate(f)
			aid := e.legacyTemplate("tpl-m", fpA, f, withSHA)
			before := e.job(mustLatest(t, e, "tpl-m").JobID)

			job := e.migrate("tpl-m")
			eq(t, "status", job.Status, core.JobReady)
			eq(t, "phase", job.Phase, core.PhaseReady)
			eq(t, "progress", job.Progress, 100)
			eq(t, "operation", job.Operation, core.OpMigrate)
			eq(t, "attempt", job.AttemptNo, before.AttemptNo+1)
			eq(t, "artifact", job.ArtifactID, aid)
			eq(t, "active key", job.ActiveKey, "")
			// A migrated template keeps the request redo starts from.
			eq(t, "request_json", job.RequestJSON, before.RequestJSON)

			a := e.artifact(aid)
			eq(t, "object key", a.ObjectKey, aid+"/"+aid+".ext4")
			eq(t, "backend", a.StorageBackend, "s3")
			sum := sha256.Sum256(legacyBytes)
			eq(t, "sha256", a.Ext4SHA256, hex.EncodeToString(sum[:]))
			eq(t, "size", a.Ext4SizeBytes, int64(len(legacyBytes)))
			if !bytes.Equal(f.store[a.ObjectKey], legacyBytes) {
				t.Error("store does not hold the local bytes")
			}
			eqSlice(t, "removed", f.removed, []string{aid})
			eq(t, "uploads", f.uploads, 1)

			// Again: already migrated, nothing uploaded, leftover removal retried.
			again := e.migrate("tpl-m")
			eq(t, "second status", again.Status, core.JobReady)
			eq(t, "second attempt", again.AttemptNo, job.AttemptNo+1)
			eq(t, "uploads after second", f.uploads, 1)
			if !strings.Contains(again.ResultJSON, "already_migrated") {
				t.Errorf("second result_json = %s", again.ResultJSON)
			}
			eqSlice(t, "removed after second", f.removed, []string{aid, aid})
		})
	}
}

func TestMigrateFailures(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(f *migrateFakes, aid string, e *env)
		wantErr   string
		wantKey   string // object key left on the row
		noUploads bool
	}{
		{
			name:      "local gone, no object",
			setup:     func(f *migrateFakes, aid string, _ *env) { delete(f.local, aid) },
			wantErr:   "use redo",
			noUploads: true,
		},
		{
			name: "object key set but object missing, local gone",
			setup: func(f *migrateFakes, aid string, e *env) {
				delete(f.local, aid)
				if _, err := e.store.Artifacts().Update(e.ctx, aid, func(a *core.Artifact) error {
					a.ObjectKey = aid + "/" + aid + ".ext4"
					return nil
				}); err != nil {
					e.t.Fatal(err)
				}
			},
			wantErr:   "use redo",
			wantKey:   "keep",
			noUploads: true,
		},
		{
			name:    "upload refused",
			setup:   func(f *migrateFakes, _ string, _ *env) { f.upErr = errors.New("sha256 mismatch") },
			wantErr: "sha256 mismatch",
		},
		{
			name:      "store probe fails",
			setup:     func(f *migrateFakes, aid string, e *env) { f.probeErr = errors.New("probe down"); setKey(e, aid) },
			wantErr:   "probe down",
			wantKey:   "keep",
			noUploads: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			f := newMigrateFakes()
			e.withMigrate(f)
			aid := e.legacyTemplate("tpl-f", fpA, f, true)
			tc.setup(f, aid, e)
			job := e.migrate("tpl-f")
			eq(t, "status", job.Status, core.JobFailed)
			eq(t, "phase", job.Phase, core.PhaseMigrating)
			if !strings.Contains(job.ErrorMessage, tc.wantErr) {
				t.Errorf("error = %q, want it to contain %q", job.ErrorMessage, tc.wantErr)
			}
			a := e.artifact(aid)
			if tc.wantKey == "" && a.ObjectKey != "" {
				t.Errorf("object key = %q after a failed migrate", a.ObjectKey)
			}
			if tc.wantKey != "" && a.ObjectKey == "" {
				t.Error("failed migrate cleared the object key")
			}
			if tc.noUploads && f.uploads != 0 {
				t.Errorf("uploads = %d", f.uploads)
			}
			if len(f.removed) != 0 {
				t.Errorf("local copy removed after a failure: %v", f.removed)
			}
		})
	}
}

func setKey(e *env, aid string) {
	if _, err := e.store.Artifacts().Update(e.ctx, aid, func(a *core.Artifact) error {
		a.ObjectKey = aid + "/" + aid + ".ext4"
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

func mustLatest(t *testing.T, e *env, tid string) *core.Job {
	t.Helper()
	j, err := e.store.Jobs().Latest(e.ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestMigrateSubmitChecks(t *testing.T) {
	e := newEnv(t, "node-1")
	f := newMigrateFakes()
	e.withMigrate(f)

	_, err := e.svc.Migrate(e.ctx, control.MigrateRequest{TemplateID: "tpl-none"})
	wantErrIs(t, err, core.ErrNotFound)
	_, err = e.svc.Migrate(e.ctx, control.MigrateRequest{TemplateID: ""})
	if err == nil {
		t.Fatal("empty template id accepted")
	}

	aid := e.legacyTemplate("tpl-s", fpA, f, true)
	if _, err := e.store.Templates().UpdateDefinition(e.ctx, "tpl-s", func(d *core.Definition) error {
		d.Status = core.TemplateFailed
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Migrate(e.ctx, control.MigrateRequest{TemplateID: "tpl-s"})
	wantErrIs(t, err, core.ErrTemplateNotReady)
	if _, err := e.store.Templates().UpdateDefinition(e.ctx, "tpl-s", func(d *core.Definition) error {
		d.Status = core.TemplatePartiallyReady
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// An active from-image job blocks migrate.
	latest := mustLatest(t, e, "tpl-s")
	busy := &core.Job{JobID: "job-busy", TemplateID: "tpl-s", AttemptNo: latest.AttemptNo + 1, Operation: core.OpRedo,
		Status: core.JobRunning, Phase: core.PhaseDistributing, ActiveKey: core.ActiveKeyFromImage("tpl-s")}
	if err := e.store.Jobs().Create(e.ctx, busy); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Migrate(e.ctx, control.MigrateRequest{TemplateID: "tpl-s"})
	var aerr *core.ActiveJobError
	if !errors.As(err, &aerr) || aerr.JobID != "job-busy" {
		t.Fatalf("error = %v, want an ActiveJobError naming job-busy", err)
	}
	if _, err := e.store.Jobs().Update(e.ctx, "job-busy", func(j *core.Job) error {
		return j.Apply(core.Fail(core.PhaseDistributing, "stop"))
	}); err != nil {
		t.Fatal(err)
	}

	// While a migrate is active (held on the artifact lock), a resubmit gets
	// the same job.
	lock, err := e.locker.Lock(e.ctx, "tc_resume_"+aid)
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.svc.Migrate(e.ctx, control.MigrateRequest{TemplateID: "tpl-s"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.svc.Migrate(e.ctx, control.MigrateRequest{TemplateID: "tpl-s"})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "resubmit job", second.JobID, first.JobID)
	eq(t, "active key", first.ActiveKey, core.ActiveKeyMigrate("tpl-s"))
	eq(t, "pending status", first.Status, core.JobPending)
	if err := lock.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wait()
	eq(t, "migrated", e.job(first.JobID).Status, core.JobReady)

	// GetMigrateJob refuses other jobs.
	_, err = e.svc.GetMigrateJob(e.ctx, latest.JobID)
	wantErrIs(t, err, core.ErrNotFound)
}

func TestMigrateWhenTheDataPlaneTakesNoUploads(t *testing.T) {
	e := newEnv(t, "node-1")
	f := newMigrateFakes()
	e.withMigrate(f)
	e.legacyTemplate("tpl-u", fpA, f, true)
	e.disp.UploadArtifactFunc = func(context.Context, string, io.Reader, ports.ObjectInfo) (ports.StoredObject, error) {
		return ports.StoredObject{}, fmt.Errorf("no uploads here: %w", core.ErrUnsupported)
	}
	job := e.migrate("tpl-u")
	eq(t, "status", job.Status, core.JobFailed)
	if !strings.Contains(job.ErrorMessage, "no uploads here") {
		t.Errorf("error message %q does not say why", job.ErrorMessage)
	}
	if a, _ := e.store.Artifacts().Get(e.ctx, aidOf(fpA)); a.ObjectKey != "" {
		t.Errorf("a failed upload recorded object key %q", a.ObjectKey)
	}
}

func TestSweepMigrations(t *testing.T) {
	e := newEnv(t, "node-1")
	f := newMigrateFakes()
	e.withMigrate(f)
	aid := e.legacyTemplate("tpl-w", fpA, f, true)
	latest := mustLatest(t, e, "tpl-w")
	stuck := &core.Job{JobID: "job-stuck", TemplateID: "tpl-w", AttemptNo: latest.AttemptNo + 1, Operation: core.OpMigrate,
		ArtifactID: aid, Status: core.JobRunning, Phase: core.PhaseMigrating, ActiveKey: core.ActiveKeyMigrate("tpl-w")}
	if err := e.store.Jobs().Create(e.ctx, stuck); err != nil {
		t.Fatal(err)
	}

	// Fresh: left alone.
	n, err := e.svc.SweepMigrations(e.ctx, control.DefaultMigrateStaleAfter)
	if err != nil || n != 0 {
		t.Fatalf("fresh sweep = %d, %v", n, err)
	}
	e.clock.Advance(11 * time.Minute)

	// Stale but its artifact lock is held (a migrate at work): left alone.
	lock, err := e.locker.Lock(e.ctx, "tc_resume_"+aid)
	if err != nil {
		t.Fatal(err)
	}
	if n, err = e.svc.SweepMigrations(e.ctx, control.DefaultMigrateStaleAfter); err != nil || n != 0 {
		t.Fatalf("locked sweep = %d, %v", n, err)
	}
	if err := lock.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}

	if n, err = e.svc.SweepMigrations(e.ctx, control.DefaultMigrateStaleAfter); err != nil || n != 1 {
		t.Fatalf("stale sweep = %d, %v", n, err)
	}
	j := e.job("job-stuck")
	eq(t, "status", j.Status, core.JobFailed)
	eq(t, "active key", j.ActiveKey, "")
	if !strings.Contains(j.ErrorMessage, "no progress") {
		t.Errorf("error = %q", j.ErrorMessage)
	}
	// The template can be migrated again.
	eq(t, "next migrate", e.migrate("tpl-w").Status, core.JobReady)
}

// The migrate failure says "use redo": redo must still work from a failed
// migrate job, and rebuild because the bytes are gone.
func TestRedoAfterFailedMigrate(t *testing.T) {
	e := newEnv(t, "node-1")
	f := newMigrateFakes()
	e.withMigrate(f)
	aid := e.legacyTemplate("tpl-r", fpA, f, true)
	delete(f.local, aid)
	if j := e.migrate("tpl-r"); j.Status != core.JobFailed {
		t.Fatalf("migrate = %s", j.Status)
	}
	redo, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-r"})
	if err != nil {
		t.Fatalf("redo after a failed migrate: %v", err)
	}
	eq(t, "redo resume phase", redo.ResumePhase, core.PhaseBuildingExt4)
	eq(t, "redo source", redo.SourceImageRef, "registry.local/app:1")
	eq(t, "builds submitted", len(e.disp.SubmitBuildCalls()), 2)
}
