package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

var nameTests = []test{
	{"Name/OneNamespace", testNamesOneNamespace},
	{"Name/ClaimIsIdempotent", testNamesClaimIdempotent},
	{"Name/ByteForByte", testNamesByteForByte},
	{"Name/Release", testNamesRelease},
	{"Name/ConcurrentClaimsOneWinner", testNamesConcurrentClaims},
	{"Name/TxRollback", testNamesTxRollback},
	{"Name/RejectsEmpty", testNamesRejectEmpty},
	{"Name/MoveAlias", testNamesMove},
	{"Name/ConcurrentMovesOneHolder", testNamesConcurrentMoves},
	{"Job/RegistryAuthRoundTrip", testJobRegistryAuth},
	{"Job/FenceRoundTrip", testJobFence},
	{"Job/OwnerAndPhaseDurationsRoundTrip", testJobOwnerAndDurations},
	{"Job/RequestIDPerOperation", testJobRequestID},
	{"Store/NowStampsRows", testStoreNowStampsRows},
}

func wantTaken(t *testing.T, err error, holder string, kind core.NameKind, what string) {
	t.Helper()
	var nt *core.NameTakenError
	if !errors.As(err, &nt) || !errors.Is(err, core.ErrConflict) {
		t.Fatalf("%s: got %v, want a *core.NameTakenError wrapping ErrConflict", what, err)
	}
	if nt.Holder != holder || nt.HolderKind != kind {
		t.Fatalf("%s: names holder %s (%s), want %s (%s)", what, nt.Holder, nt.HolderKind, holder, kind)
	}
}

func testNamesOneNamespace(t *testing.T, e *env) {
	n := e.s.Names()
	a, b := uniq("tpl-a-"), uniq("tpl-b-")
	must(t, n.Claim(e.ctx, a, a, core.NameID), "claim id a")
	must(t, n.Claim(e.ctx, "web-"+a, a, core.NameAlias), "claim alias of a")
	// A new template cannot take a's alias as its id, nor a's id as its
	// alias, nor a's alias as its alias.
	wantTaken(t, n.Claim(e.ctx, "web-"+a, b, core.NameID), a, core.NameAlias, "id equal to another's alias")
	wantTaken(t, n.Claim(e.ctx, a, b, core.NameAlias), a, core.NameID, "alias equal to another's id")
	wantTaken(t, n.Claim(e.ctx, "web-"+a, b, core.NameAlias), a, core.NameAlias, "alias equal to another's alias")
	// Nor may a template hold one name as both kinds.
	wantTaken(t, n.Claim(e.ctx, a, a, core.NameAlias), a, core.NameID, "own id as alias")
	holder, kind, err := n.Holder(e.ctx, "web-"+a)
	if err != nil || holder != a || kind != core.NameAlias {
		t.Fatalf("Holder = %s, %s, %v", holder, kind, err)
	}
	if _, _, err := n.Holder(e.ctx, uniq("nobody-")); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Holder of a free name: %v", err)
	}
}

func testNamesClaimIdempotent(t *testing.T, e *env) {
	n := e.s.Names()
	a := uniq("tpl-")
	for range 3 {
		must(t, n.Claim(e.ctx, a, a, core.NameID), "claim again")
	}
	if c, err := n.Release(e.ctx, a, ""); err != nil || c != 1 {
		t.Fatalf("Release = %d, %v; want the one name", c, err)
	}
}

func testNamesByteForByte(t *testing.T, e *env) {
	n := e.s.Names()
	a, b := uniq("tpl-"), uniq("tpl-")
	lower := "web-" + a
	must(t, n.Claim(e.ctx, lower, a, core.NameAlias), "claim lower")
	upper := "WEB-" + a
	must(t, n.Claim(e.ctx, upper, b, core.NameAlias), "a name differing in case is another name")
	if h, _, err := n.Holder(e.ctx, upper); err != nil || h != b {
		t.Fatalf("Holder(%s) = %s, %v", upper, h, err)
	}
}

func testNamesRelease(t *testing.T, e *env) {
	n := e.s.Names()
	a, b := uniq("tpl-a-"), uniq("tpl-b-")
	must(t, n.Claim(e.ctx, a, a, core.NameID), "id")
	must(t, n.Claim(e.ctx, "x-"+a, a, core.NameAlias), "alias")
	must(t, n.Claim(e.ctx, b, b, core.NameID), "other id")
	if c, err := n.Release(e.ctx, a, core.NameAlias); err != nil || c != 1 {
		t.Fatalf("Release alias = %d, %v", c, err)
	}
	if _, _, err := n.Holder(e.ctx, "x-"+a); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("released alias still held: %v", err)
	}
	must(t, n.Claim(e.ctx, "x-"+a, b, core.NameAlias), "a released name is free")
	if c, err := n.Release(e.ctx, a, ""); err != nil || c != 1 {
		t.Fatalf("Release all = %d, %v", c, err)
	}
	if h, _, err := n.Holder(e.ctx, b); err != nil || h != b {
		t.Fatal("another template's name was released")
	}
}

func testNamesConcurrentClaims(t *testing.T, e *env) {
	n := e.s.Names()
	name := uniq("contended-")
	const claimants = 16
	var wg sync.WaitGroup
	errs := make([]error, claimants)
	tids := make([]string, claimants)
	for i := range claimants {
		tids[i] = uniq("tpl-")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.Claim(e.ctx, name, tids[i], core.NameAlias)
		}()
	}
	wg.Wait()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
		case !errors.Is(err, core.ErrConflict):
			t.Fatalf("claimant %d: %v, want nil or a conflict", i, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d claimants hold %s, want exactly one", winners, name)
	}
}

func testNamesTxRollback(t *testing.T, e *env) {
	a := uniq("tpl-")
	boom := errors.New("boom")
	err := e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		if err := r.Names().Claim(ctx, a, a, core.NameID); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v", err)
	}
	if _, _, err := e.s.Names().Holder(e.ctx, a); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a rolled back claim is visible: %v", err)
	}
}

func testNamesRejectEmpty(t *testing.T, e *env) {
	n := e.s.Names()
	for what, err := range map[string]error{
		"empty name":     n.Claim(e.ctx, "", "tpl-x", core.NameID),
		"empty template": n.Claim(e.ctx, uniq("n-"), "", core.NameID),
		"unknown kind":   n.Claim(e.ctx, uniq("n-"), "tpl-x", "nickname"),
	} {
		if !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
		}
	}
}

func testNamesMove(t *testing.T, e *env) {
	n := e.s.Names()
	a, b := uniq("tpl-a-"), uniq("tpl-b-")
	alias := "web-" + a
	must(t, n.Claim(e.ctx, a, a, core.NameID), "claim id a")
	must(t, n.Claim(e.ctx, b, b, core.NameID), "claim id b")
	must(t, n.Claim(e.ctx, alias, a, core.NameAlias), "claim a's alias")
	holderIs := func(want, wantPrev string) {
		t.Helper()
		h, k, err := n.Holder(e.ctx, alias)
		if err != nil || h != want || k != core.NameAlias {
			t.Fatalf("Holder = %s %s %v, want %s as alias", h, k, err, want)
		}
		if p, err := n.Previous(e.ctx, alias); err != nil || p != wantPrev {
			t.Fatalf("Previous = %q %v, want %q", p, err, wantPrev)
		}
	}
	holderIs(a, "")

	from, err := n.Move(e.ctx, alias, b)
	must(t, err, "move to b")
	if from != a {
		t.Fatalf("Move from %q, want %s", from, a)
	}
	holderIs(b, a)
	// Moving to the holder changes nothing, and keeps the record.
	if from, err := n.Move(e.ctx, alias, b); err != nil || from != "" {
		t.Fatalf("Move to the holder = %q, %v", from, err)
	}
	holderIs(b, a)
	// Rolled back: the record names the template it came from again.
	if from, err := n.Move(e.ctx, alias, a); err != nil || from != b {
		t.Fatalf("Move back = %q, %v", from, err)
	}
	holderIs(a, b)

	// An id never moves, whoever asks.
	_, err = n.Move(e.ctx, b, a)
	wantTaken(t, err, b, core.NameID, "move another's id")
	_, err = n.Move(e.ctx, a, a)
	wantTaken(t, err, a, core.NameID, "move own id as alias")
	if h, k, _ := n.Holder(e.ctx, b); h != b || k != core.NameID {
		t.Fatalf("an id changed holder: %s %s", h, k)
	}
	// A free name is claimed.
	free := "free-" + a
	if from, err := n.Move(e.ctx, free, b); err != nil || from != "" {
		t.Fatalf("Move of a free name = %q, %v", from, err)
	}
	if h, k, _ := n.Holder(e.ctx, free); h != b || k != core.NameAlias {
		t.Fatalf("free name holder %s %s", h, k)
	}
	if _, err := n.Previous(e.ctx, uniq("nobody-")); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Previous of a free name: %v", err)
	}
	// A move in a transaction that fails is not seen.
	boom := errors.New("boom")
	err = e.s.Tx(e.ctx, func(ctx context.Context, r ports.Repos) error {
		if _, err := r.Names().Move(ctx, alias, b); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v", err)
	}
	holderIs(a, b)
	for what, err := range map[string]error{
		"empty alias":    func() error { _, err := n.Move(e.ctx, "", a); return err }(),
		"empty template": func() error { _, err := n.Move(e.ctx, alias, ""); return err }(),
	} {
		if !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
		}
	}
}

// testNamesConcurrentMoves: moves of one alias to several templates at
// once leave it with exactly one of them, recorded as moved from another.
func testNamesConcurrentMoves(t *testing.T, e *env) {
	n := e.s.Names()
	base := uniq("tpl-")
	alias := "web-" + base
	must(t, n.Claim(e.ctx, alias, base, core.NameAlias), "claim the alias")
	const movers = 6
	var wg sync.WaitGroup
	errs := make([]error, movers)
	for i := range movers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = n.Move(e.ctx, alias, fmt.Sprintf("%s-%d", base, i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, core.ErrConflict) {
			t.Fatalf("mover %d: %v, want success or ErrConflict", i, err)
		}
	}
	h, k, err := n.Holder(e.ctx, alias)
	if err != nil || k != core.NameAlias || h == base {
		t.Fatalf("after the moves: %s %s %v", h, k, err)
	}
	if p, err := n.Previous(e.ctx, alias); err != nil || p == "" || p == h {
		t.Fatalf("Previous = %q %v (holder %s)", p, err, h)
	}
}

func testJobRegistryAuth(t *testing.T, e *env) {
	j := newJob(uniq("tpl-"), 1)
	j.RegistryAuth, j.RequestID = "sealed:opaque-bytes", "req-"+uniq("")
	must(t, e.s.Jobs().Create(e.ctx, j), "create")
	got, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "get")
	if got.RegistryAuth != j.RegistryAuth || got.RequestID != j.RequestID {
		t.Fatalf("registry auth %q, request id %q; want %q, %q", got.RegistryAuth, got.RequestID, j.RegistryAuth, j.RequestID)
	}
	got, err = e.s.Jobs().Update(e.ctx, j.JobID, func(x *core.Job) error { x.RegistryAuth = ""; return nil })
	must(t, err, "update")
	if got.RegistryAuth != "" {
		t.Fatal("registry auth not cleared")
	}
}

func testJobFence(t *testing.T, e *env) {
	j := newJob(uniq("tpl-"), 1)
	must(t, e.s.Jobs().Create(e.ctx, j), "create")
	got, err := e.s.Jobs().Update(e.ctx, j.JobID, func(x *core.Job) error { x.Fence++; return nil })
	must(t, err, "update")
	again, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "get")
	if got.Fence != 1 || again.Fence != 1 {
		t.Fatalf("fence after one claim: update %d, get %d; want 1", got.Fence, again.Fence)
	}
}

// testJobOwnerAndDurations: the build owner and the phase durations
// are kept as written (durations to the millisecond).
func testJobOwnerAndDurations(t *testing.T, e *env) {
	j := newJob(uniq("tpl-"), 1)
	must(t, e.s.Jobs().Create(e.ctx, j), "create")
	want := core.PhaseDurations{core.PhasePulling: 1234 * time.Millisecond, core.PhaseBuildingExt4: 2 * time.Second}
	_, err := e.s.Jobs().Update(e.ctx, j.JobID, func(x *core.Job) error {
		x.BuildOwner = "tc-host-1-abc"
		x.PhaseDurations = want
		return nil
	})
	must(t, err, "update")
	got, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "get")
	if got.BuildOwner != "tc-host-1-abc" || !maps.Equal(got.PhaseDurations, want) {
		t.Fatalf("after the update: owner %q, durations %v; want tc-host-1-abc, %v", got.BuildOwner, got.PhaseDurations, want)
	}
}

// testJobRequestID: (request id, operation) names one job. A repeat gets
// core.DistinctRequestID, an empty one the job id; another operation may
// share the request id.
func testJobRequestID(t *testing.T, e *env) {
	rid := "req-" + uniq("")
	first := newJob(uniq("tpl-"), 1)
	first.RequestID = rid
	must(t, e.s.Jobs().Create(e.ctx, first), "create first")
	again := newJob(uniq("tpl-"), 1)
	again.RequestID = rid
	must(t, e.s.Jobs().Create(e.ctx, again), "create a repeat")
	other := newJob(uniq("tpl-"), 1)
	other.RequestID, other.Operation = rid, core.OpRedo
	must(t, e.s.Jobs().Create(e.ctx, other), "create another operation")
	empty := newJob(uniq("tpl-"), 1)
	must(t, e.s.Jobs().Create(e.ctx, empty), "create without a request id")
	for _, c := range []struct {
		j    *core.Job
		want string
	}{{first, rid}, {again, core.DistinctRequestID(rid, again.JobID)}, {other, rid}, {empty, empty.JobID}} {
		got, err := e.s.Jobs().Get(e.ctx, c.j.JobID)
		must(t, err, "get")
		if got.RequestID != c.want || c.j.RequestID != c.want {
			t.Errorf("job %s: stored request id %q, returned %q; want %q", c.j.JobID, got.RequestID, c.j.RequestID, c.want)
		}
	}
}

func testStoreNowStampsRows(t *testing.T, e *env) {
	before, err := e.s.Now(e.ctx)
	must(t, err, "Now")
	j := newJob(uniq("tpl-"), 1)
	must(t, e.s.Jobs().Create(e.ctx, j), "create")
	after, err := e.s.Now(e.ctx)
	must(t, err, "Now")
	got, err := e.s.Jobs().Get(e.ctx, j.JobID)
	must(t, err, "get")
	// Stamped with the store's clock, which the rows and Now share (a
	// microsecond of slack for the strictly increasing stamps).
	if got.UpdatedAt.Before(before.Add(-time.Microsecond)) || got.UpdatedAt.After(after.Add(time.Microsecond)) {
		t.Fatalf("updated_at %v outside the store's clock readings [%v, %v]", got.UpdatedAt, before, after)
	}
}
