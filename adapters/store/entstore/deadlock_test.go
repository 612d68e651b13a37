package entstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestTxRetriesDeadlock makes two transactions lock two artifacts in
// opposite order. The database aborts one of them as a deadlock victim; Tx
// runs it again and both commit. SQLite is left out: its transactions run
// one at a time and cannot deadlock.
func TestTxRetriesDeadlock(t *testing.T) {
	for _, d := range []string{"mysql", "postgres"} {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := openFresh(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ids := []string{"rfs-deadlock-a", "rfs-deadlock-b"}
			for i, id := range ids {
				a := &core.Artifact{ArtifactID: id, Fingerprint: fmt.Sprintf("fp-%d", i), Status: core.ArtifactReady}
				if err := s.Artifacts().Create(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
			var attempts atomic.Int32
			var holding sync.WaitGroup // both hold their first row lock
			holding.Add(2)
			run := func(first, second string) error {
				firstAttempt := true
				return s.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
					attempts.Add(1)
					inc := func(x *core.Artifact) error { x.Ext4SizeBytes++; return nil }
					if _, err := r.Artifacts().Update(ctx, first, inc); err != nil {
						return err
					}
					if firstAttempt {
						firstAttempt = false
						holding.Done()
						holding.Wait()
					}
					_, err := r.Artifacts().Update(ctx, second, inc)
					return err
				})
			}
			errs := make(chan error, 2)
			go func() { errs <- run(ids[0], ids[1]) }()
			go func() { errs <- run(ids[1], ids[0]) }()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatalf("Tx after a deadlock: %v", err)
				}
			}
			if n := attempts.Load(); n < 3 {
				t.Fatalf("%d transaction attempts, want at least 3 (a deadlock victim runs again)", n)
			}
			for _, id := range ids {
				a, err := s.Artifacts().Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if a.Ext4SizeBytes != 2 {
					t.Fatalf("artifact %s size %d, want 2: both transactions committed once", id, a.Ext4SizeBytes)
				}
			}
			t.Logf("%d attempts for 2 transactions", attempts.Load())
		})
	}
}
