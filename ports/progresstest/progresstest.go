package progresstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness makes ProgressSinks for one adapter.
type Harness interface {
	// MakeSink returns a sink. All sinks of one harness share one backend:
	// they stand for replicas of the app reading each other's progress.
	MakeSink(ctx context.Context) (ports.ProgressSink, error)
	// Close releases what the harness opened.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// ContextAware is an optional Harness capability: sinks that do I/O honour
// a cancelled context and fail; in-process sinks may ignore the context.
type ContextAware interface {
	// HonoursContext reports whether Publish, Get and Delete fail when
	// their context is already cancelled.
	HonoursContext() bool
}

// testTimeout bounds each subtest so a hung backend fails instead of hanging.
const testTimeout = 30 * time.Second

type env struct {
	ctx    context.Context
	h      Harness
	prefix string
}

// job returns a job id unique to this run and subtest, so runs against a
// shared server never see each other's keys.
func (e *env) job(suffix string) string { return e.prefix + suffix }

func (e *env) sink(t *testing.T) ports.ProgressSink {
	t.Helper()
	s, err := e.h.MakeSink(e.ctx)
	if err != nil {
		t.Fatalf("MakeSink: %v", err)
	}
	return s
}

// RunConformanceTests runs the suite against the adapter newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"GetMissing", testGetMissing},
		{"PublishGetRoundTrip", testRoundTrip},
		{"LatestWins", testLatestWins},
		{"JobsAreIndependent", testIndependentJobs},
		{"DeleteIsIdempotent", testDelete},
		{"UnusualJobIDs", testUnusualIDs},
		{"ConcurrentPublishers", testConcurrentPublishers},
		{"ReplicasShareProgress", testReplicas},
		{"CancelledContext", testCancelledContext},
	}
	run := randomHex(4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			tc.fn(t, &env{ctx: ctx, h: h, prefix: "pt-" + run + "-" + strings.ToLower(tc.name) + "-"})
		})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func mustPublish(t *testing.T, ctx context.Context, s ports.ProgressSink, job string, p ports.LiveProgress) {
	t.Helper()
	if err := s.Publish(ctx, job, p); err != nil {
		t.Fatalf("Publish(%q, %+v): %v", job, p, err)
	}
}

func wantProgress(t *testing.T, ctx context.Context, s ports.ProgressSink, job string, want ports.LiveProgress) {
	t.Helper()
	got, ok, err := s.Get(ctx, job)
	if err != nil || !ok || got != want {
		t.Fatalf("Get(%q) = %+v, ok %v, err %v; want %+v, ok true", job, got, ok, err, want)
	}
}

func wantNone(t *testing.T, ctx context.Context, s ports.ProgressSink, job string) {
	t.Helper()
	got, ok, err := s.Get(ctx, job)
	if err != nil || ok {
		t.Fatalf("Get(%q) = %+v, ok %v, err %v; want nothing and no error", job, got, ok, err)
	}
}

// full sets every field, with values that would not survive a careless
// encoding (beyond 32 bits, beyond float64 precision).
var full = ports.LiveProgress{
	Phase:    core.PhasePulling,
	Progress: 42,
	Pull: core.PullProgress{
		TotalBytes:      1<<53 + 1,
		DownloadedBytes: 1 << 40,
		TotalLayers:     7,
		CompletedLayers: 2,
		SpeedBPS:        123_456_789,
	},
}

func testGetMissing(t *testing.T, e *env) {
	wantNone(t, e.ctx, e.sink(t), e.job("never-published"))
}

func testRoundTrip(t *testing.T, e *env) {
	s := e.sink(t)
	for _, tc := range []struct {
		name string
		p    ports.LiveProgress
	}{
		{"every field", full},
		// A published zero value is still progress (ok is true).
		{"zero value", ports.LiveProgress{}},
		{"phase only", ports.LiveProgress{Phase: core.PhaseUploading}},
		{"complete", ports.LiveProgress{Phase: core.PhaseReady, Progress: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := e.job(strings.ReplaceAll(tc.name, " ", "-"))
			mustPublish(t, e.ctx, s, job, tc.p)
			wantProgress(t, e.ctx, s, job, tc.p)
		})
	}
}

func testLatestWins(t *testing.T, e *env) {
	s := e.sink(t)
	job := e.job("j")
	var last ports.LiveProgress
	for i := 1; i <= 5; i++ {
		last = ports.LiveProgress{Phase: core.PhaseUnpacking, Progress: i * 10, Pull: core.PullProgress{CompletedLayers: i}}
		mustPublish(t, e.ctx, s, job, last)
	}
	wantProgress(t, e.ctx, s, job, last)
	// A later publish replaces every field, not only the non-zero ones.
	mustPublish(t, e.ctx, s, job, ports.LiveProgress{Phase: core.PhaseUploading})
	wantProgress(t, e.ctx, s, job, ports.LiveProgress{Phase: core.PhaseUploading})
}

func testIndependentJobs(t *testing.T, e *env) {
	s := e.sink(t)
	a, b := e.job("a"), e.job("b")
	pa := ports.LiveProgress{Phase: core.PhasePulling, Progress: 1}
	pb := ports.LiveProgress{Phase: core.PhaseUploading, Progress: 2}
	mustPublish(t, e.ctx, s, a, pa)
	mustPublish(t, e.ctx, s, b, pb)
	wantProgress(t, e.ctx, s, a, pa)
	wantProgress(t, e.ctx, s, b, pb)
	// Ids that are prefixes of each other stay apart too.
	mustPublish(t, e.ctx, s, a+"x", pb)
	wantProgress(t, e.ctx, s, a, pa)
}

func testDelete(t *testing.T, e *env) {
	s := e.sink(t)
	gone, kept := e.job("gone"), e.job("kept")
	mustPublish(t, e.ctx, s, gone, full)
	mustPublish(t, e.ctx, s, kept, full)
	for i := range 2 {
		if err := s.Delete(e.ctx, gone); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
		wantNone(t, e.ctx, s, gone)
	}
	if err := s.Delete(e.ctx, e.job("never-published")); err != nil {
		t.Fatalf("Delete of a job never published: %v", err)
	}
	wantProgress(t, e.ctx, s, kept, full)
	// A deleted job can be published again.
	mustPublish(t, e.ctx, s, gone, ports.LiveProgress{Progress: 3})
	wantProgress(t, e.ctx, s, gone, ports.LiveProgress{Progress: 3})
}

func testUnusualIDs(t *testing.T, e *env) {
	s := e.sink(t)
	for i, id := range []string{
		"with:colons:like:redis:keys",
		"with/slashes/and spaces",
		"unicode-模板-é",
		"*glob?[chars]",
		strings.Repeat("long", 100),
	} {
		t.Run(fmt.Sprintf("%.16q", id), func(t *testing.T) {
			job := e.job(id)
			p := ports.LiveProgress{Phase: core.PhasePulling, Progress: i}
			mustPublish(t, e.ctx, s, job, p)
			wantProgress(t, e.ctx, s, job, p)
			if err := s.Delete(e.ctx, job); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			wantNone(t, e.ctx, s, job)
		})
	}
}

func testConcurrentPublishers(t *testing.T, e *env) {
	s := e.sink(t)
	const jobs, rounds = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, jobs*rounds)
	for i := range jobs {
		wg.Go(func() {
			for r := 1; r <= rounds; r++ {
				if err := s.Publish(e.ctx, e.job(fmt.Sprint(i)), ports.LiveProgress{Progress: i*100 + r}); err != nil {
					errs <- err
				}
			}
		})
	}
	// Readers run alongside; they must never fail.
	for i := range jobs {
		wg.Go(func() {
			if _, _, err := s.Get(e.ctx, e.job(fmt.Sprint(i))); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range jobs {
		wantProgress(t, e.ctx, s, e.job(fmt.Sprint(i)), ports.LiveProgress{Progress: i*100 + rounds})
	}
}

func testReplicas(t *testing.T, e *env) {
	a, b := e.sink(t), e.sink(t)
	job := e.job("shared")
	mustPublish(t, e.ctx, a, job, full)
	wantProgress(t, e.ctx, b, job, full)
	next := ports.LiveProgress{Phase: core.PhaseUploading, Progress: 90}
	mustPublish(t, e.ctx, b, job, next)
	wantProgress(t, e.ctx, a, job, next)
	if err := b.Delete(e.ctx, job); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantNone(t, e.ctx, a, job)
}

func testCancelledContext(t *testing.T, e *env) {
	if ca, ok := e.h.(ContextAware); !ok || !ca.HonoursContext() {
		t.Skip("the sink does no I/O and may ignore its context")
	}
	s := e.sink(t)
	job := e.job("j")
	mustPublish(t, e.ctx, s, job, full)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	perr := s.Publish(ctx, job, ports.LiveProgress{Progress: 1})
	_, _, gerr := s.Get(ctx, job)
	derr := s.Delete(ctx, job)
	for _, c := range []struct {
		what string
		err  error
	}{{"Publish", perr}, {"Get", gerr}, {"Delete", derr}} {
		if !errors.Is(c.err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want an error wrapping context.Canceled", c.what, c.err)
		}
	}
	// Nothing the cancelled calls asked for reached the backend.
	wantProgress(t, e.ctx, s, job, full)
}
