package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Invariant I1 as the store enforces it: the unique, nullable active key
// (and the other unique job keys) decide races between concurrent writers.
var activeKeyTests = []test{
	{"I1/ConcurrentCreatesOneWins", testConcurrentCreates},
	{"I1/ReleasedKeyRace", testReleasedKeyRace},
	{"I1/RetryAfterFailure", testRetryAfterFailure},
	{"I1/TxCheckThenCreate", testTxCheckThenCreate},
}

// Submitters is how many goroutines race in the I1 tests.
const Submitters = 32

// race runs fn(0), ..., fn(n-1) in n goroutines released together and
// returns their errors.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// oneWinner returns the index of the only nil error; every other error must
// wrap core.ErrConflict.
func oneWinner(t *testing.T, what string, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("%s: contenders %d and %d both won", what, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, core.ErrConflict):
			t.Fatalf("%s: contender %d: %v, want an error wrapping core.ErrConflict", what, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: no contender won", what)
	}
	return winner
}

func testConcurrentCreates(t *testing.T, e *env) {
	cases := []struct {
		name string
		// job returns contender i's job; all of them collide on one key.
		job func(tpl, jobID string, i int) *core.Job
	}{
		{"same active key", func(tpl, _ string, i int) *core.Job { return newJob(tpl, i+1) }},
		{"same template and attempt", func(tpl, _ string, _ int) *core.Job {
			j := newJob(tpl, 1)
			j.ActiveKey = ""
			return j
		}},
		{"same job id", func(_, jobID string, _ int) *core.Job {
			j := newJob(uniq("tpl-i1-"), 1)
			j.JobID = jobID
			return j
		}},
	}
	for _, c := range cases {
		tpl, jobID := uniq("tpl-i1-"), ids.NewJobID()
		jobs := make([]*core.Job, Submitters)
		for i := range jobs {
			jobs[i] = c.job(tpl, jobID, i)
		}
		errs := race(Submitters, func(i int) error { return e.s.Jobs().Create(e.ctx, jobs[i]) })
		w := jobs[oneWinner(t, c.name, errs)]

		got, err := e.s.Jobs().Get(e.ctx, w.JobID)
		must(t, err, c.name+": Get of the winner")
		sameJob(t, c.name+": the winner's row", w, got)
		if w.ActiveKey != "" {
			active, err := e.s.Jobs().GetActive(e.ctx, w.ActiveKey)
			must(t, err, c.name+": GetActive")
			if active.JobID != w.JobID {
				t.Fatalf("%s: GetActive = %s, want the winner %s", c.name, active.JobID, w.JobID)
			}
		}
		// The losers wrote nothing.
		for _, j := range jobs {
			if j == w {
				continue
			}
			if j.JobID != w.JobID {
				_, err := e.s.Jobs().Get(e.ctx, j.JobID)
				mustErrIs(t, err, core.ErrNotFound, c.name+": Get of a loser")
			}
			list, err := e.s.Jobs().ListByTemplate(e.ctx, j.TemplateID)
			must(t, err, c.name+": ListByTemplate")
			want := 0
			if j.TemplateID == w.TemplateID {
				want = 1
			}
			if len(list) != want {
				t.Fatalf("%s: template %s has %d jobs, want %d", c.name, j.TemplateID, len(list), want)
			}
		}
	}
}

var errLost = errors.New("another successor took the key")

// successors is how many jobs wait for a released key. Fewer than
// Submitters, and they pause between tries: InnoDB resolves crowds of
// duplicate-key inserts against the releasing UPDATE with deadlocks, and
// the test is about who gets the key, not about deadlock retries.
const successors = 8

// testReleasedKeyRace fails the holder of a key while many successors try
// to take it: exactly one gets it, never before the holder is terminal, and
// no reader ever sees the key on a terminal job.
func testReleasedKeyRace(t *testing.T, e *env) {
	tpl := uniq("tpl-i1-")
	holder := createJob(t, e, newJob(tpl, 1))
	key := holder.ActiveKey

	watch, stopWatch := context.WithCancel(e.ctx)
	watched := make(chan error, 1)
	go func() {
		for watch.Err() == nil {
			j, err := e.s.Jobs().GetActive(watch, key)
			switch {
			case watch.Err() != nil, errors.Is(err, core.ErrNotFound):
			case err != nil:
				watched <- fmt.Errorf("GetActive: %w", err)
				return
			case j.Status.Terminal() || j.ActiveKey != key:
				watched <- fmt.Errorf("GetActive returned job %s in status %s with key %q", j.JobID, j.Status, j.ActiveKey)
				return
			}
		}
		watched <- nil
	}()

	next := make([]*core.Job, successors)
	for i := range next {
		next[i] = newJob(tpl, i+2)
	}
	errs := race(successors+1, func(i int) error {
		if i == successors {
			_, err := apply(e, holder.JobID, core.Fail(core.PhasePulling, "cancelled"))
			return err
		}
		for e.ctx.Err() == nil {
			err := e.s.Jobs().Create(e.ctx, next[i])
			if err == nil {
				h, err := e.s.Jobs().Get(e.ctx, holder.JobID)
				if err != nil {
					return err
				}
				if !h.Status.Terminal() {
					return fmt.Errorf("successor created while the holder is still %s", h.Status)
				}
				return nil
			}
			if !errors.Is(err, core.ErrConflict) {
				return err
			}
			// Keep trying while the holder has the key; give up once a
			// successor has it.
			cur, err := e.s.Jobs().GetActive(e.ctx, key)
			switch {
			case errors.Is(err, core.ErrNotFound):
			case err != nil:
				return err
			case cur.JobID != holder.JobID:
				return errLost
			}
			time.Sleep(time.Duration(rand.N(500)) * time.Microsecond)
		}
		return e.ctx.Err()
	})
	stopWatch()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	must(t, errs[successors], "fail the holder")
	winner := -1
	for i, err := range errs[:successors] {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("successors %d and %d both took the key", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, errLost):
			t.Fatalf("successor %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no successor took the released key")
	}
	w := next[winner]
	active, err := e.s.Jobs().GetActive(e.ctx, key)
	must(t, err, "GetActive")
	if active.JobID != w.JobID {
		t.Fatalf("GetActive = %s, want the successor %s", active.JobID, w.JobID)
	}
	list, err := e.s.Jobs().ListByTemplate(e.ctx, tpl)
	must(t, err, "ListByTemplate")
	if len(list) != 2 || list[0].JobID != holder.JobID || list[1].JobID != w.JobID {
		t.Fatalf("the template has %d jobs, want the holder and the one successor", len(list))
	}
	if list[0].Status != core.JobFailed || list[0].ActiveKey != "" {
		t.Fatalf("holder is %s with key %q, want FAILED without key", list[0].Status, list[0].ActiveKey)
	}
}

// testRetryAfterFailure walks the store side of a retry: the active job is
// found by its key with every field intact, a second job cannot take the
// key, and once the first fails the next attempt takes it and is Latest.
func testRetryAfterFailure(t *testing.T, e *env) {
	tpl := uniq("tpl-i1-")
	first := createJob(t, e, newJob(tpl, 1))
	active, err := e.s.Jobs().GetActive(e.ctx, first.ActiveKey)
	must(t, err, "GetActive")
	sameJob(t, "the active job found by its key", first, active)

	second := newJob(tpl, 2)
	second.RetryOfJobID = first.JobID
	second.RequestJSON = `{"different":true}`
	mustErrIs(t, e.s.Jobs().Create(e.ctx, second), core.ErrConflict, "a second job while the first is active")

	_, err = apply(e, first.JobID, core.Fail(core.PhasePulling, "manifest unknown"))
	must(t, err, "fail the first job")
	latest, err := e.s.Jobs().Latest(e.ctx, tpl)
	must(t, err, "Latest")
	if latest.JobID != first.JobID || latest.Status != core.JobFailed || latest.ActiveKey != "" {
		t.Fatalf("Latest = %s (%s, key %q), want the failed first job", latest.JobID, latest.Status, latest.ActiveKey)
	}

	second.AttemptNo = latest.AttemptNo + 1
	createJob(t, e, second)
	latest, err = e.s.Jobs().Latest(e.ctx, tpl)
	must(t, err, "Latest")
	sameJob(t, "Latest after the retry", second, latest)
	active, err = e.s.Jobs().GetActive(e.ctx, second.ActiveKey)
	must(t, err, "GetActive")
	if active.JobID != second.JobID {
		t.Fatalf("GetActive = %s, want the retry %s", active.JobID, second.JobID)
	}
}

// testTxCheckThenCreate races transactions that look for the active job
// and create one (with a marker row) when there is none: one creates, every
// other one either sees the winner or fails with core.ErrConflict, and the
// markers of the failed ones are rolled back.
func testTxCheckThenCreate(t *testing.T, e *env) {
	tpl := uniq("tpl-i1-")
	key := core.ActiveKeyFromImage(tpl)
	jobs := make([]*core.Job, Submitters)
	for i := range jobs {
		jobs[i] = newJob(tpl, i+1)
	}
	created := make([]bool, Submitters)
	errs := race(Submitters, func(i int) error {
		return e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
			created[i] = false
			if _, err := r.Jobs().GetActive(ctx, key); err == nil || !errors.Is(err, core.ErrNotFound) {
				return err
			}
			if err := r.Nodes().Upsert(ctx, ports.NodeRecord{NodeID: jobs[i].JobID, GRPCAddr: "h:1"}); err != nil {
				return err
			}
			if err := r.Jobs().Create(ctx, jobs[i]); err != nil {
				return err
			}
			created[i] = true
			return nil
		})
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && created[i] && winner >= 0:
			t.Fatalf("transactions %d and %d both created a job", winner, i)
		case err == nil && created[i]:
			winner = i
		case err != nil && !errors.Is(err, core.ErrConflict):
			t.Fatalf("transaction %d: %v, want success or an error wrapping core.ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no transaction created the job")
	}
	w := jobs[winner]
	list, err := e.s.Jobs().ListByTemplate(e.ctx, tpl)
	must(t, err, "ListByTemplate")
	if len(list) != 1 || list[0].JobID != w.JobID {
		t.Fatalf("the template has %d jobs, want only %s", len(list), w.JobID)
	}
	nodes, err := e.s.Nodes().List(e.ctx)
	must(t, err, "Nodes().List")
	if len(nodes) != 1 || nodes[0].NodeID != w.JobID {
		t.Fatalf("marker rows %+v, want only the winner's %s", nodes, w.JobID)
	}
}
