// Package progresstest is the conformance suite for ports.ProgressSink.
package progresstest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// RunConformanceTests checks a sink; newSink returns an empty sink per test
// (job ids are unique per test, so a shared backend is fine).
func RunConformanceTests(t *testing.T, newSink func(t *testing.T) ports.ProgressSink) {
	ctx := context.Background()
	t.Run("GetMissing", func(t *testing.T) {
		s := newSink(t)
		if _, ok, err := s.Get(ctx, jobID(t, "missing")); err != nil || ok {
			t.Fatalf("Get of unknown job = ok %v, err %v", ok, err)
		}
	})
	t.Run("PublishGetRoundTrip", func(t *testing.T) {
		s := newSink(t)
		id := jobID(t, "a")
		want := ports.LiveProgress{Phase: core.PhasePulling, Progress: 12, Pull: core.PullProgress{TotalBytes: 1 << 40, DownloadedBytes: 3, TotalLayers: 7, CompletedLayers: 2, SpeedBPS: 99}}
		if err := s.Publish(ctx, id, want); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.Get(ctx, id)
		if err != nil || !ok || got != want {
			t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, want)
		}
	})
	t.Run("LatestWins", func(t *testing.T) {
		s := newSink(t)
		id := jobID(t, "b")
		for i := 1; i <= 3; i++ {
			if err := s.Publish(ctx, id, ports.LiveProgress{Phase: core.PhaseUnpacking, Progress: i}); err != nil {
				t.Fatal(err)
			}
		}
		if got, _, _ := s.Get(ctx, id); got.Progress != 3 {
			t.Fatalf("progress %d, want 3", got.Progress)
		}
	})
	t.Run("JobsAreIndependentAndDeleteIsIdempotent", func(t *testing.T) {
		s := newSink(t)
		a, b := jobID(t, "x"), jobID(t, "y")
		s.Publish(ctx, a, ports.LiveProgress{Progress: 1})
		s.Publish(ctx, b, ports.LiveProgress{Progress: 2})
		if err := s.Delete(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, a); err != nil {
			t.Fatalf("second Delete: %v", err)
		}
		if _, ok, _ := s.Get(ctx, a); ok {
			t.Fatal("deleted job still has progress")
		}
		if got, ok, _ := s.Get(ctx, b); !ok || got.Progress != 2 {
			t.Fatalf("other job lost: %+v %v", got, ok)
		}
	})
	t.Run("ConcurrentPublishers", func(t *testing.T) {
		s := newSink(t)
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if err := s.Publish(ctx, jobID(t, fmt.Sprint(i)), ports.LiveProgress{Progress: i}); err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		for i := 0; i < 16; i++ {
			if got, ok, _ := s.Get(ctx, jobID(t, fmt.Sprint(i))); !ok || got.Progress != i {
				t.Fatalf("job %d: %+v %v", i, got, ok)
			}
		}
	})
}

func jobID(t *testing.T, s string) string { return t.Name() + "/" + s }
