package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness gives one subtest its store.
type Harness interface {
	// Store returns a fresh, migrated, empty store. The harness releases it
	// when the test ends (t.Cleanup); the suite may Close it earlier.
	Store() ports.Store
}

// testTimeout bounds each subtest, so a lost wakeup fails instead of hangs.
const testTimeout = 2 * time.Minute

type test struct {
	name string
	fn   func(t *testing.T, e *env)
}

// env is what a subtest works with.
type env struct {
	ctx context.Context
	s   ports.Store
}

// RunConformanceTests runs every check against stores made by newHarness,
// one fresh store per subtest.
func RunConformanceTests(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	var all []test
	all = append(all, jobTests...)
	all = append(all, templateTests...)
	all = append(all, artifactTests...)
	all = append(all, placementTests...)
	all = append(all, nodeTests...)
	all = append(all, txTests...)
	all = append(all, submitTests...)
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h := newHarness(t)
			tc.fn(t, &env{ctx: ctx, s: h.Store()})
		})
	}
}

// IDs is a ports.IDs for tests, backed by random UUIDs.
type IDs struct{}

// NewJobID returns a UUIDv4.
func (IDs) NewJobID() string { return uuid.NewString() }

// NewHex returns 32 random lowercase hex characters.
func (IDs) NewHex() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// NewToken returns a random token.
func (IDs) NewToken() string { return uuid.NewString() }

var ids IDs

// uniq returns prefix plus a short random suffix.
func uniq(prefix string) string { return prefix + ids.NewHex()[:12] }

func mustErrIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func ptr[T any](v T) *T { return &v }

// newJob returns an active PENDING job of templateID with every field set.
func newJob(templateID string, attempt int) *core.Job {
	return &core.Job{
		JobID:             ids.NewJobID(),
		TemplateID:        templateID,
		AttemptNo:         attempt,
		RetryOfJobID:      "",
		Operation:         core.OpCreate,
		RedoMode:          core.RedoAll,
		RedoScope:         []string{"node-a", "node-b"},
		ResumePhase:       core.PhaseDistributing,
		ArtifactID:        "rfs-0123456789abcdef01234567",
		Fingerprint:       strings.Repeat("ab", 32),
		SourceImageRef:    "registry.example/team/app:1.0",
		SourceImageDigest: "sha256:" + strings.Repeat("cd", 32),
		WritableLayerSize: "20Gi",
		InstanceType:      core.DefaultInstanceType,
		NetworkType:       core.DefaultNetworkType,
		Status:            core.JobPending,
		Phase:             core.PhasePulling,
		Progress:          5,
		ErrorMessage:      "",
		ExpectedNodeCount: 3,
		ReadyNodeCount:    1,
		FailedNodeCount:   0,
		TemplateStatus:    string(core.TemplatePending),
		ArtifactStatus:    string(core.ArtifactPending),
		RequestJSON:       `{"source_image_ref":"registry.example/team/app:1.0","template_id":"` + templateID + `"}`,
		ResultJSON:        `{"ok":true}`,
		ActiveKey:         core.ActiveKeyFromImage(templateID),
		Pull:              core.PullProgress{TotalBytes: 1 << 30, DownloadedBytes: 1 << 20, TotalLayers: 7, CompletedLayers: 2, SpeedBPS: 12345},
	}
}

// sameJob compares everything but the timestamps, which the store sets.
func sameJob(t *testing.T, what string, want, got *core.Job) {
	t.Helper()
	w, g := want.Clone(), got.Clone()
	w.CreatedAt, w.UpdatedAt, g.CreatedAt, g.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if len(w.RedoScope) == 0 {
		w.RedoScope = nil
	}
	if len(g.RedoScope) == 0 {
		g.RedoScope = nil
	}
	if !reflect.DeepEqual(*w, *g) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func createJob(t *testing.T, e *env, j *core.Job) *core.Job {
	t.Helper()
	must(t, e.s.Jobs().Create(e.ctx, j), "create job "+j.JobID)
	return j
}

// waitPast blocks until the wall clock is strictly after ts, so rows written
// afterwards have a later updated_at than ts. It waits for the clock; it
// asserts nothing about durations.
func waitPast(ts time.Time) {
	for !time.Now().After(ts.Add(time.Microsecond)) {
		time.Sleep(100 * time.Microsecond)
	}
}
