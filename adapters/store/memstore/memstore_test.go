package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// clock is a ports.Clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func newJob(id, tpl string) *core.Job {
	return &core.Job{JobID: id, TemplateID: tpl, AttemptNo: 1, Status: core.JobPending,
		ActiveKey: core.ActiveKeyFromImage(tpl), RedoScope: []string{"n1"}}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUpdatedAtMovesForwardWhateverTheClock: every Update moves updated_at
// strictly forward even when the clock stands still or goes back, and the
// store keeps UTC microseconds like the SQL store.
func TestUpdatedAtMovesForwardWhateverTheClock(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.FixedZone("X", 3600))
	cases := []struct {
		name string
		tick func(c *clock, i int)
	}{
		{"stuck", func(*clock, int) {}},
		{"backwards", func(c *clock, i int) { c.set(start.Add(-time.Duration(i) * time.Hour)) }},
		{"forwards", func(c *clock, i int) { c.set(start.Add(time.Duration(i) * time.Nanosecond)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			clk := &clock{t: start}
			s := memstore.New(memstore.WithClock(clk))
			j := newJob("job-1", "tpl-1")
			must(t, s.Jobs().Create(ctx, j))
			if want := start.UTC().Truncate(time.Microsecond); !j.CreatedAt.Equal(want) || j.CreatedAt.Location() != time.UTC {
				t.Fatalf("CreatedAt %v, want %v in UTC", j.CreatedAt, want)
			}
			d := &core.Definition{TemplateID: "tpl-1"}
			must(t, s.Templates().CreateDefinition(ctx, d))
			a := &core.Artifact{ArtifactID: "rfs-1", Fingerprint: "fp-1", Status: core.ArtifactPending}
			must(t, s.Artifacts().Create(ctx, a))

			updates := []struct {
				name string
				last time.Time
				do   func() (time.Time, error)
			}{
				{"job", j.UpdatedAt, func() (time.Time, error) {
					x, err := s.Jobs().Update(ctx, j.JobID, func(*core.Job) error { return nil })
					if err != nil {
						return time.Time{}, err
					}
					return x.UpdatedAt, nil
				}},
				{"definition", d.UpdatedAt, func() (time.Time, error) {
					x, err := s.Templates().UpdateDefinition(ctx, d.TemplateID, func(*core.Definition) error { return nil })
					if err != nil {
						return time.Time{}, err
					}
					return x.UpdatedAt, nil
				}},
				{"artifact", a.UpdatedAt, func() (time.Time, error) {
					x, err := s.Artifacts().Update(ctx, a.ArtifactID, func(*core.Artifact) error { return nil })
					if err != nil {
						return time.Time{}, err
					}
					return x.UpdatedAt, nil
				}},
			}
			for i := 1; i <= 5; i++ {
				c.tick(clk, i)
				for k := range updates {
					u := &updates[k]
					got, err := u.do()
					must(t, err)
					if !got.After(u.last) {
						t.Fatalf("%s update %d: UpdatedAt %v is not after %v", u.name, i, got, u.last)
					}
					u.last = got
				}
			}
			stored, err := s.Jobs().Get(ctx, j.JobID)
			must(t, err)
			if !stored.UpdatedAt.Equal(updates[0].last) {
				t.Fatalf("stored UpdatedAt %v, last returned %v", stored.UpdatedAt, updates[0].last)
			}
		})
	}
}

// TestUpdateFnMayWrite: outside a transaction an Update's fn runs with no
// lock held, so it may even write the store (and run a Tx) without
// deadlocking.
func TestUpdateFnMayWrite(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	must(t, s.Jobs().Create(ctx, newJob("job-1", "tpl-1")))
	must(t, s.Artifacts().Create(ctx, &core.Artifact{ArtifactID: "rfs-1", Fingerprint: "fp-1", Status: core.ArtifactPending}))
	_, err := s.Jobs().Update(ctx, "job-1", func(j *core.Job) error {
		if _, err := s.Artifacts().Update(ctx, "rfs-1", func(a *core.Artifact) error {
			a.LastError = "from a job fn"
			return s.Nodes().Upsert(ctx, ports.NodeRecord{NodeID: "n1"})
		}); err != nil {
			return err
		}
		j.ErrorMessage = "done"
		return s.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
			return r.Placements().Add(ctx, core.Placement{ArtifactID: "rfs-1", NodeID: "n1"})
		})
	})
	must(t, err)
	a, err := s.Artifacts().Get(ctx, "rfs-1")
	must(t, err)
	ns, err := s.Nodes().List(ctx)
	must(t, err)
	ps, err := s.Placements().List(ctx, "rfs-1")
	must(t, err)
	if a.LastError != "from a job fn" || len(ns) != 1 || len(ps) != 1 {
		t.Fatalf("writes from inside the fn are missing: %q, %d nodes, %d placements", a.LastError, len(ns), len(ps))
	}
}

// TestOwnTransaction: from inside fn, the store itself may be read (it shows
// committed data), but a write or Tx on it with fn's ctx would wait for the
// transaction forever, so it fails at once. The Repos of a transaction are
// dead once fn returned.
func TestOwnTransaction(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	must(t, s.Jobs().Create(ctx, newJob("job-0", "tpl-0")))
	var kept ports.Repos
	err := s.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		kept = r
		must(t, r.Jobs().Create(ctx, newJob("job-1", "tpl-1")))
		if _, err := s.Jobs().Get(ctx, "job-1"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("outer Get inside the tx = %v, want core.ErrNotFound", err)
		}
		if err := s.Jobs().Create(ctx, newJob("job-2", "tpl-2")); err == nil {
			t.Error("an outer Create inside the tx succeeded")
		}
		if _, err := s.Jobs().Update(ctx, "job-0", func(*core.Job) error { return nil }); err == nil || errors.Is(err, core.ErrNotFound) {
			t.Errorf("an outer Update inside the tx = %v, want the own-transaction error", err)
		}
		if err := s.Tx(ctx, func(context.Context, ports.Repos) error { return nil }); err == nil {
			t.Error("a nested Tx succeeded")
		}
		return nil
	})
	must(t, err)
	if _, err := s.Jobs().Get(ctx, "job-1"); err != nil {
		t.Fatalf("the tx's job after commit: %v", err)
	}
	if _, err := s.Jobs().Get(ctx, "job-2"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("the refused outer Create wrote a job: %v", err)
	}
	if _, err := kept.Jobs().Get(ctx, "job-1"); err == nil {
		t.Fatal("the Repos of a finished tx still work")
	}
}

// TestTxExcludesWriters: while a transaction runs, reads go on (and see
// committed data) and other writes wait for it; a waiting write gives up
// when its ctx ends.
func TestTxExcludesWriters(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	inside, release := make(chan struct{}), make(chan struct{})
	txDone := make(chan error)
	go func() {
		txDone <- s.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
			if err := r.Jobs().Create(ctx, newJob("job-tx", "tpl-tx")); err != nil {
				return err
			}
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside

	if _, err := s.Jobs().Get(ctx, "job-tx"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get during the tx = %v, want core.ErrNotFound", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Jobs().Create(short, newJob("job-x", "tpl-x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write waiting for the tx = %v, want its ctx's deadline", err)
	}
	written := make(chan error)
	go func() { written <- s.Jobs().Create(ctx, newJob("job-w", "tpl-tx")) }()
	select {
	case err := <-written:
		t.Fatalf("a write finished while the tx ran: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	must(t, <-txDone)
	// The waiting write ran after the commit, and so saw the tx's key.
	if err := <-written; !errors.Is(err, core.ErrConflict) {
		t.Fatalf("write after the tx = %v, want core.ErrConflict on the tx's active key", err)
	}
}

// TestCloseDuringTx: a transaction that ends after Close does not commit.
func TestCloseDuringTx(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	err := s.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		must(t, r.Jobs().Create(ctx, newJob("job-1", "tpl-1")))
		return s.Close()
	})
	if !errors.Is(err, core.ErrStoreNotInitialized) {
		t.Fatalf("Tx across Close = %v, want core.ErrStoreNotInitialized", err)
	}
	must(t, s.Close())
}

// TestWritesAreChecked: rows the SQL store would refuse, or could not read
// back, are refused when written, and nothing is stored.
func TestWritesAreChecked(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	must(t, s.Jobs().Create(ctx, newJob("job-ok", "tpl-ok")))
	must(t, s.Artifacts().Create(ctx, &core.Artifact{ArtifactID: "rfs-ok", Fingerprint: "fp-ok", Status: core.ArtifactReady}))
	cases := []struct {
		name  string
		write func() error
	}{
		{"job without id", func() error { return s.Jobs().Create(ctx, newJob("", "tpl-1")) }},
		{"job without template", func() error { return s.Jobs().Create(ctx, newJob("job-1", "")) }},
		{"job with unknown status", func() error {
			j := newJob("job-1", "tpl-1")
			j.Status = "ZOMBIE"
			return s.Jobs().Create(ctx, j)
		}},
		{"job with unknown phase", func() error {
			j := newJob("job-1", "tpl-1")
			j.Phase = "DANCING"
			return s.Jobs().Create(ctx, j)
		}},
		{"job updated to unknown status", func() error {
			_, err := s.Jobs().Update(ctx, "job-ok", func(j *core.Job) error { j.Status = "ZOMBIE"; return nil })
			return err
		}},
		{"job updated to unknown operation", func() error {
			_, err := s.Jobs().Update(ctx, "job-ok", func(j *core.Job) error { j.Operation = "TELEPORT"; return nil })
			return err
		}},
		{"nil job", func() error { return s.Jobs().Create(ctx, nil) }},
		{"artifact with unknown status", func() error {
			return s.Artifacts().Create(ctx, &core.Artifact{ArtifactID: "rfs-1", Fingerprint: "fp-1", Status: "NOPE"})
		}},
		{"artifact without fingerprint", func() error {
			return s.Artifacts().Create(ctx, &core.Artifact{ArtifactID: "rfs-1", Status: core.ArtifactPending})
		}},
		{"artifact updated without fingerprint", func() error {
			_, err := s.Artifacts().Update(ctx, "rfs-ok", func(a *core.Artifact) error { a.Fingerprint = ""; return nil })
			return err
		}},
		{"definition without id", func() error { return s.Templates().CreateDefinition(ctx, &core.Definition{}) }},
		{"replica without node", func() error { return s.Templates().UpsertReplica(ctx, &core.Replica{TemplateID: "tpl-1"}) }},
		{"placement without node", func() error { return s.Placements().Add(ctx, core.Placement{ArtifactID: "rfs-1"}) }},
		{"node with a blank id", func() error { return s.Nodes().Upsert(ctx, ports.NodeRecord{NodeID: "  "}) }},
	}
	for _, c := range cases {
		if err := c.write(); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping core.ErrInvalidArgument", c.name, err)
		}
	}
	if list, _ := s.Jobs().ListByTemplate(ctx, "tpl-1"); len(list) != 0 {
		t.Errorf("refused jobs were stored: %d", len(list))
	}
	if j, _ := s.Jobs().Get(ctx, "job-ok"); j.Status != core.JobPending || j.Operation != "" {
		t.Errorf("a refused update was stored: %s %q", j.Status, j.Operation)
	}
	if a, _ := s.Artifacts().Get(ctx, "rfs-ok"); a.Fingerprint != "fp-ok" {
		t.Errorf("a refused artifact update was stored: %+v", a)
	}
}

// TestCancelledContext: calls with a finished ctx fail with its error.
func TestCancelledContext(t *testing.T) {
	s := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Jobs().Get(ctx, "job-1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get = %v", err)
	}
	if err := s.Jobs().Create(ctx, newJob("job-1", "tpl-1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v", err)
	}
	if err := s.Tx(ctx, func(context.Context, ports.Repos) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Tx = %v", err)
	}
}
