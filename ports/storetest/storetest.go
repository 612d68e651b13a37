package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness makes stores for one subtest.
type Harness interface {
	// MakeStore returns a fresh, migrated, empty store. The suite may Close
	// it before the harness's Close, which must cope with that.
	MakeStore(ctx context.Context) (ports.Store, error)
	// Close releases what the harness opened, the stores it made included.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds each subtest, so a lost wakeup fails instead of hangs.
const testTimeout = 2 * time.Minute

// fnPause is how long the fns of the concurrent update tests take, long
// enough that a store without compare-and-set or row locks loses updates.
const fnPause = time.Millisecond

type test struct {
	name string
	fn   func(t *testing.T, e *env)
}

// env is what a subtest works with.
type env struct {
	ctx context.Context
	s   ports.Store
}

// RunConformanceTests runs every check against stores made by the harnesses
// newHarness returns, one fresh harness and store per subtest.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	var all []test
	all = append(all, jobTests...)
	all = append(all, activeKeyTests...)
	all = append(all, templateTests...)
	all = append(all, artifactTests...)
	all = append(all, placementTests...)
	all = append(all, nodeTests...)
	all = append(all, txTests...)
	all = append(all, copyTests...)
	all = append(all, nameTests...)
	all = append(all, policyTests...)
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			s, err := h.MakeStore(ctx)
			if err != nil {
				t.Fatalf("MakeStore: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, s: s})
		})
	}
}

// IDs is a ports.IDs for tests, backed by crypto/rand.
type IDs struct{}

// NewJobID returns a UUIDv4.
func (IDs) NewJobID() string {
	b := randomBytes(16)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// NewHex returns 32 random lowercase hex characters.
func (IDs) NewHex() string { return hex.EncodeToString(randomBytes(16)) }

// NewToken returns a random token.
func (IDs) NewToken() string { return hex.EncodeToString(randomBytes(24)) }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}

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
