package control_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

const testHex = "00112233445566778899aabbccddeeff"

// submitStore is the memory store (the store contract's real semantics)
// with a few seams: it counts Create and GetActive calls and every repo
// access, can stage an insert race before a Create, and can inject
// errors into reads.
type submitStore struct {
	*memstore.Store
	// beforeCreate, if set, runs at the start of every Create; a non-nil
	// result is returned instead of inserting (to stage insert races).
	beforeCreate func(n int, job *core.Job) error
	getDefErr    error // GetDefinition fails with it
	getErr       error // Jobs().Get fails with it
	// update, if set, replaces Jobs().Update.
	update func(ctx context.Context, id string, fn func(*core.Job) error) (*core.Job, error)

	ids *portsmock.IDsMock

	mu                          sync.Mutex
	nextJob, creates, getActive int
	touched                     int // Jobs() and Templates() calls
}

func newSubmitStore() *submitStore {
	f := &submitStore{Store: memstore.New()}
	f.ids = &portsmock.IDsMock{
		NewHexFunc: func() string { return testHex },
		NewJobIDFunc: func() string {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.nextJob++
			return fmt.Sprintf("job-%d", f.nextJob)
		},
	}
	return f
}

func (f *submitStore) Jobs() ports.JobRepository {
	f.mu.Lock()
	f.touched++
	f.mu.Unlock()
	return submitJobs{JobRepository: f.Store.Jobs(), f: f}
}

func (f *submitStore) Templates() ports.TemplateRepository {
	f.mu.Lock()
	f.touched++
	f.mu.Unlock()
	return submitTemplates{TemplateRepository: f.Store.Templates(), f: f}
}

// Tx hands fn repositories with the same seams.
func (f *submitStore) Tx(ctx context.Context, fn func(ctx context.Context, r ports.Repos) error) error {
	return f.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error { return fn(ctx, submitRepos{Repos: r, f: f}) })
}

type submitRepos struct {
	ports.Repos
	f *submitStore
}

func (r submitRepos) Jobs() ports.JobRepository {
	return submitJobs{JobRepository: r.Repos.Jobs(), f: r.f}
}

func (r submitRepos) Templates() ports.TemplateRepository {
	return submitTemplates{TemplateRepository: r.Repos.Templates(), f: r.f}
}

type submitJobs struct {
	ports.JobRepository
	f *submitStore
}

func (r submitJobs) Create(ctx context.Context, job *core.Job) error {
	r.f.mu.Lock()
	r.f.creates++
	n, hook := r.f.creates, r.f.beforeCreate
	r.f.mu.Unlock()
	if hook != nil {
		if err := hook(n, job); err != nil {
			return err
		}
	}
	return r.JobRepository.Create(ctx, job)
}

func (r submitJobs) GetActive(ctx context.Context, key string) (*core.Job, error) {
	r.f.mu.Lock()
	r.f.getActive++
	r.f.mu.Unlock()
	return r.JobRepository.GetActive(ctx, key)
}

func (r submitJobs) Get(ctx context.Context, id string) (*core.Job, error) {
	if r.f.getErr != nil {
		return nil, r.f.getErr
	}
	return r.JobRepository.Get(ctx, id)
}

func (r submitJobs) Update(ctx context.Context, id string, fn func(*core.Job) error) (*core.Job, error) {
	if r.f.update != nil {
		return r.f.update(ctx, id, fn)
	}
	return r.JobRepository.Update(ctx, id, fn)
}

type submitTemplates struct {
	ports.TemplateRepository
	f *submitStore
}

func (r submitTemplates) GetDefinition(ctx context.Context, id string) (*core.Definition, error) {
	if r.f.getDefErr != nil {
		return nil, r.f.getDefErr
	}
	return r.TemplateRepository.GetDefinition(ctx, id)
}

// putJob stores a seed row directly (not counted), filling the fields
// every stored job has.
func (f *submitStore) putJob(t *testing.T, j *core.Job) {
	t.Helper()
	if j.Operation == "" {
		j.Operation = core.OpCreate
	}
	if j.Phase == "" {
		j.Phase = core.PhasePulling
	}
	if err := f.Store.Jobs().Create(context.Background(), j); err != nil {
		t.Fatalf("seed job %s: %v", j.JobID, err)
	}
}

func (f *submitStore) putDef(t *testing.T, d *core.Definition) {
	t.Helper()
	if d.InstanceType == "" {
		d.InstanceType = core.DefaultInstanceType
	}
	if err := f.Store.Templates().CreateDefinition(context.Background(), d); err != nil {
		t.Fatalf("seed definition %s: %v", d.TemplateID, err)
	}
}

func (f *submitStore) job(t *testing.T, id string) *core.Job {
	t.Helper()
	j, err := f.Store.Jobs().Get(context.Background(), id)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return j
}

func (f *submitStore) service() *control.Service {
	return &control.Service{Store: f, Locker: memlock.New(), IDs: f.ids}
}

func submitRequest(tid string) *core.FromImageRequest {
	return &core.FromImageRequest{
		RequestID:         "req-1",
		SourceImageRef:    "docker.io/library/nginx:1.27",
		RegistryPassword:  "pw",
		TemplateID:        tid,
		WritableLayerSize: "20Gi",
		ExposedPorts:      []int32{9000, 8080},
	}
}

// canonical is the request JSON the service stores for r.
func canonical(t *testing.T, r *core.FromImageRequest) string {
	t.Helper()
	c := *r
	n, err := core.NormalizeFromImageRequest(&c, func() string { return testHex })
	if err != nil {
		t.Fatal(err)
	}
	s, err := core.CanonicalRequestJSON(n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSubmitCreatesFirstAttempt(t *testing.T) {
	f := newSubmitStore()
	res, err := f.service().SubmitFromImage(context.Background(), submitRequest(""))
	if err != nil {
		t.Fatal(err)
	}
	j := res.Job
	if !res.Created {
		t.Error("Created = false for a new job")
	}
	wantTID := "tpl-" + testHex[:24]
	if j.JobID != "job-1" || j.TemplateID != wantTID || j.AttemptNo != 1 || j.RetryOfJobID != "" ||
		j.Status != core.JobPending || j.Phase != core.PhasePulling || j.Operation != core.OpCreate ||
		j.ActiveKey != core.ActiveKeyFromImage(wantTID) || j.InstanceType != core.DefaultInstanceType ||
		j.NetworkType != core.DefaultNetworkType || j.WritableLayerSize != "20Gi" {
		t.Errorf("unexpected job: %+v", j)
	}
	if j.RequestJSON != canonical(t, submitRequest("")) {
		t.Errorf("RequestJSON = %s", j.RequestJSON)
	}
	f.job(t, j.JobID)
}

func TestSubmitAgainstExistingDefinition(t *testing.T) {
	for _, st := range []core.TemplateStatus{core.TemplatePending, core.TemplateReady, core.TemplatePartiallyReady} {
		t.Run(string(st), func(t *testing.T) {
			f := newSubmitStore()
			f.putDef(t, &core.Definition{TemplateID: "tpl-a", Status: st})
			_, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
			if !errors.Is(err, core.ErrDuplicateTemplate) {
				t.Fatalf("got %v, want ErrDuplicateTemplate", err)
			}
			if f.creates != 0 {
				t.Error("a job was created for an existing template")
			}
		})
	}
	t.Run("FAILED may be rebuilt", func(t *testing.T) {
		f := newSubmitStore()
		f.putDef(t, &core.Definition{TemplateID: "tpl-a", Status: core.TemplateFailed})
		res, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
		if err != nil || !res.Created {
			t.Fatalf("got %+v, %v; want a new job", res, err)
		}
	})
	t.Run("store error", func(t *testing.T) {
		f := newSubmitStore()
		boom := errors.New("db down")
		f.getDefErr = boom
		if _, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a")); !errors.Is(err, boom) {
			t.Fatalf("got %v, want the store error", err)
		}
	})
}

func TestSubmitWithActiveJob(t *testing.T) {
	for _, st := range []core.JobStatus{core.JobPending, core.JobRunning} {
		t.Run(string(st)+" same request", func(t *testing.T) {
			f := newSubmitStore()
			active := &core.Job{JobID: "job-old", TemplateID: "tpl-a", AttemptNo: 1, Status: st,
				ActiveKey: core.ActiveKeyFromImage("tpl-a"), RequestJSON: canonical(t, submitRequest("tpl-a"))}
			f.putJob(t, active)
			// Same request up to the fields the idempotency key ignores.
			again := submitRequest("tpl-a")
			again.RequestID, again.RegistryPassword, again.Wait = "req-2", "other", true
			again.ExposedPorts = []int32{8080, 9000, 9000}
			res, err := f.service().SubmitFromImage(context.Background(), again)
			if err != nil {
				t.Fatal(err)
			}
			if res.Created || res.Job.JobID != "job-old" {
				t.Errorf("got job %s Created=%v, want the active job-old, Created=false", res.Job.JobID, res.Created)
			}
			if f.creates != 0 {
				t.Error("a second job was created")
			}
		})
		t.Run(string(st)+" different request", func(t *testing.T) {
			f := newSubmitStore()
			f.putJob(t, &core.Job{JobID: "job-old", TemplateID: "tpl-a", AttemptNo: 1, Status: st,
				ActiveKey: core.ActiveKeyFromImage("tpl-a"), RequestJSON: canonical(t, submitRequest("tpl-a"))})
			other := submitRequest("tpl-a")
			other.WritableLayerSize = "40Gi"
			_, err := f.service().SubmitFromImage(context.Background(), other)
			var ae *core.ActiveJobError
			if !errors.As(err, &ae) || ae.JobID != "job-old" || ae.TemplateID != "tpl-a" || ae.Status != st {
				t.Fatalf("got %v, want *core.ActiveJobError naming job-old", err)
			}
			if !errors.Is(err, core.ErrAttemptInProgress) {
				t.Error("ActiveJobError does not wrap ErrAttemptInProgress")
			}
			if f.creates != 0 {
				t.Error("a second job was created")
			}
		})
	}
}

// While the resume pipeline of a job runs, its definition already exists
// (PENDING); an identical resubmit must still get the running job back.
func TestSubmitDuringResumeReturnsRunningJob(t *testing.T) {
	f := newSubmitStore()
	f.putDef(t, &core.Definition{TemplateID: "tpl-a", Status: core.TemplatePending})
	f.putJob(t, &core.Job{JobID: "job-old", TemplateID: "tpl-a", AttemptNo: 1, Status: core.JobRunning, Phase: core.PhaseDistributing,
		ActiveKey: core.ActiveKeyFromImage("tpl-a"), RequestJSON: canonical(t, submitRequest("tpl-a"))})
	res, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
	if err != nil || res.Created || res.Job.JobID != "job-old" {
		t.Fatalf("got %+v, %v; want the running job-old", res, err)
	}
}

func TestSubmitRetryFollowsLatestAttempt(t *testing.T) {
	f := newSubmitStore()
	f.putDef(t, &core.Definition{TemplateID: "tpl-a", Status: core.TemplateFailed})
	for i, st := range []core.JobStatus{core.JobFailed, core.JobFailed, core.JobReady} {
		id := fmt.Sprintf("job-old-%d", i+1)
		f.putJob(t, &core.Job{JobID: id, TemplateID: "tpl-a", AttemptNo: i + 1, Status: st})
	}
	f.putJob(t, &core.Job{JobID: "job-other", TemplateID: "tpl-b", AttemptNo: 7, Status: core.JobFailed})
	res, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.AttemptNo != 4 || res.Job.RetryOfJobID != "job-old-3" || !res.Created {
		t.Errorf("attempt %d retry_of %q Created=%v, want 4, job-old-3, true", res.Job.AttemptNo, res.Job.RetryOfJobID, res.Created)
	}
}

func TestSubmitLosesInsertRace(t *testing.T) {
	winner := func(t *testing.T, r *core.FromImageRequest) *core.Job {
		return &core.Job{JobID: "job-winner", TemplateID: "tpl-a", AttemptNo: 1, Status: core.JobPending,
			ActiveKey: core.ActiveKeyFromImage("tpl-a"), RequestJSON: canonical(t, r)}
	}
	t.Run("same request returns the winner", func(t *testing.T) {
		f := newSubmitStore()
		f.beforeCreate = func(n int, _ *core.Job) error {
			if n == 1 { // another submitter commits first
				f.putJob(t, winner(t, submitRequest("tpl-a")))
				return fmt.Errorf("duplicate active key: %w", core.ErrConflict)
			}
			return nil
		}
		res, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Created || res.Job.JobID != "job-winner" {
			t.Errorf("got %s Created=%v, want job-winner Created=false", res.Job.JobID, res.Created)
		}
		if f.creates != 1 || f.getActive != 2 {
			t.Errorf("creates=%d GetActive calls=%d, want 1 and 2 (one re-read)", f.creates, f.getActive)
		}
	})
	t.Run("different request names the winner", func(t *testing.T) {
		f := newSubmitStore()
		f.beforeCreate = func(n int, _ *core.Job) error {
			if n == 1 {
				other := submitRequest("tpl-a")
				other.WritableLayerSize = "1Gi"
				f.putJob(t, winner(t, other))
				return fmt.Errorf("duplicate active key: %w", core.ErrConflict)
			}
			return nil
		}
		_, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
		var ae *core.ActiveJobError
		if !errors.As(err, &ae) || ae.JobID != "job-winner" {
			t.Fatalf("got %v, want *core.ActiveJobError naming job-winner", err)
		}
	})
	t.Run("winner already finished", func(t *testing.T) {
		f := newSubmitStore()
		f.beforeCreate = func(n int, _ *core.Job) error {
			if n == 1 { // the winner failed before we re-read: insert again
				w := winner(t, submitRequest("tpl-a"))
				w.Status, w.ActiveKey = core.JobFailed, ""
				f.putJob(t, w)
				return fmt.Errorf("duplicate attempt: %w", core.ErrConflict)
			}
			return nil
		}
		res, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
		if err != nil || !res.Created || res.Job.AttemptNo != 2 || res.Job.RetryOfJobID != "job-winner" {
			t.Fatalf("got %+v, %v; want a new attempt 2 retrying job-winner", res.Job, err)
		}
	})
	t.Run("endless conflicts give up", func(t *testing.T) {
		f := newSubmitStore()
		f.beforeCreate = func(int, *core.Job) error { return fmt.Errorf("dup: %w", core.ErrConflict) }
		_, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a"))
		if !errors.Is(err, core.ErrConflict) {
			t.Fatalf("got %v, want ErrConflict", err)
		}
		if f.creates < 2 || f.creates > 100 {
			t.Errorf("Create called %d times, want a small bounded number of retries", f.creates)
		}
	})
	t.Run("other create errors are not retried", func(t *testing.T) {
		f := newSubmitStore()
		boom := errors.New("disk full")
		f.beforeCreate = func(int, *core.Job) error { return boom }
		if _, err := f.service().SubmitFromImage(context.Background(), submitRequest("tpl-a")); !errors.Is(err, boom) {
			t.Fatalf("got %v, want the create error", err)
		}
		if f.creates != 1 {
			t.Errorf("Create called %d times, want 1", f.creates)
		}
	})
}

func TestSubmitRejectsBadRequest(t *testing.T) {
	f := newSubmitStore()
	r := submitRequest("tpl-a")
	r.WritableLayerSize = ""
	if _, err := f.service().SubmitFromImage(context.Background(), r); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("got %v, want ErrInvalidArgument", err)
	}
	if n := f.touched; n != 0 {
		t.Errorf("store touched %d times for an invalid request", n)
	}
}

func TestReport(t *testing.T) {
	p := func(v int) *int { return &v }
	tests := []struct {
		name        string
		from        *core.Job
		u           core.JobUpdate
		wantApplied bool
		wantErr     error
		wantStatus  core.JobStatus
		wantPhase   core.Phase
	}{
		{"applies", &core.Job{Status: core.JobRunning, Phase: core.PhasePulling}, core.Progress(core.JobRunning, core.PhaseUnpacking, 20),
			true, nil, core.JobRunning, core.PhaseUnpacking},
		{"terminal", &core.Job{Status: core.JobBuilt, Phase: core.PhaseReady, Progress: 100}, core.JobUpdate{Status: core.JobReady, Progress: p(100)},
			true, nil, core.JobReady, core.PhaseReady},
		{"late phase is stale", &core.Job{Status: core.JobRunning, Phase: core.PhaseUploading}, core.Progress(core.JobRunning, core.PhaseBuildingExt4, 40),
			false, nil, core.JobRunning, core.PhaseUploading},
		{"after terminal is stale", &core.Job{Status: core.JobFailed, Phase: core.PhasePulling}, core.Progress(core.JobRunning, core.PhaseUnpacking, 20),
			false, nil, core.JobFailed, core.PhasePulling},
		{"duplicate BUILT after resume started is stale", &core.Job{Status: core.JobRunning, Phase: core.PhaseDistributing}, core.Progress(core.JobBuilt, core.PhaseReady, 100),
			false, nil, core.JobRunning, core.PhaseDistributing},
		{"illegal transition", &core.Job{Status: core.JobPending, Phase: core.PhasePulling}, core.JobUpdate{Status: core.JobReady},
			false, core.ErrInvalidTransition, core.JobPending, core.PhasePulling},
		{"unknown status", &core.Job{Status: core.JobRunning, Phase: core.PhasePulling}, core.JobUpdate{Status: "DONE"},
			false, core.ErrInvalidArgument, core.JobRunning, core.PhasePulling},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newSubmitStore()
			tc.from.JobID, tc.from.TemplateID = "job-1", "tpl-a"
			f.putJob(t, tc.from)
			job, applied, err := f.service().Report(context.Background(), "job-1", tc.u)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("err = %v", err)
			}
			if applied != tc.wantApplied {
				t.Errorf("applied = %v, want %v", applied, tc.wantApplied)
			}
			if tc.wantErr == nil && (job == nil || job.Status != tc.wantStatus || job.Phase != tc.wantPhase) {
				t.Errorf("returned job %+v, want %s/%s", job, tc.wantStatus, tc.wantPhase)
			}
			if st := f.job(t, "job-1"); st.Status != tc.wantStatus || st.Phase != tc.wantPhase {
				t.Errorf("stored job %s/%s, want %s/%s", st.Status, st.Phase, tc.wantStatus, tc.wantPhase)
			}
		})
	}

	t.Run("missing job", func(t *testing.T) {
		f := newSubmitStore()
		_, applied, err := f.service().Report(context.Background(), "nope", core.JobUpdate{})
		if !errors.Is(err, core.ErrNotFound) || applied {
			t.Fatalf("got applied=%v err=%v, want ErrNotFound", applied, err)
		}
	})

	// Update re-runs fn after losing a compare-and-set. Here the first
	// round applies, the write loses to a writer that made the job READY,
	// and the second round finds the report stale: nothing applied, no error.
	t.Run("CAS lost to a terminal writer", func(t *testing.T) {
		f := newSubmitStore()
		f.putJob(t, &core.Job{JobID: "job-1", TemplateID: "tpl-a", Status: core.JobRunning, Phase: core.PhaseDistributing})
		f.update = func(ctx context.Context, id string, fn func(*core.Job) error) (*core.Job, error) {
			raced := false
			return f.Store.Jobs().Update(ctx, id, func(j *core.Job) error {
				if !raced { // a concurrent writer commits while this round runs
					raced = true
					if _, err := f.Store.Jobs().Update(ctx, id, func(w *core.Job) error {
						w.Status, w.Phase = core.JobReady, core.PhaseReady
						return nil
					}); err != nil {
						return err
					}
				}
				return fn(j)
			})
		}
		job, applied, err := f.service().Report(context.Background(), "job-1", core.Progress(core.JobRunning, core.PhaseSnapshotting, 90))
		if err != nil || applied || job == nil || job.Status != core.JobReady {
			t.Fatalf("got %+v applied=%v err=%v, want the READY job, applied=false, no error", job, applied, err)
		}
	})

	// When the row is re-read after a stale report, that read failing is an
	// error, not a silent success.
	t.Run("stale and re-read fails", func(t *testing.T) {
		f := newSubmitStore()
		f.putJob(t, &core.Job{JobID: "job-1", TemplateID: "tpl-a", Status: core.JobReady, Phase: core.PhaseReady})
		boom := errors.New("db down")
		f.getErr = boom
		_, applied, err := f.service().Report(context.Background(), "job-1", core.JobUpdate{})
		if !errors.Is(err, boom) || applied {
			t.Fatalf("got applied=%v err=%v, want the read error", applied, err)
		}
	})
}
