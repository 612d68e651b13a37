package nodedirtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Health is the state the harness puts a node agent in.
type Health int

const (
	// Serving: the agent runs and reports itself healthy.
	Serving Health = iota
	// NotServing: the agent runs but reports itself unhealthy.
	NotServing
	// Down: nothing listens at the node's address.
	Down
)

func (h Health) String() string {
	switch h {
	case Serving:
		return "serving"
	case NotServing:
		return "not serving"
	case Down:
		return "down"
	}
	return fmt.Sprintf("Health(%d)", int(h))
}

// NodeSpec is a node the suite asks the harness for.
type NodeSpec struct {
	ID           string
	InstanceType string // "" means core.DefaultInstanceType
	Health       Health
}

// Harness runs node agents and makes directories that list them.
type Harness interface {
	// AddNode starts (or, for Down, reserves an address for) an agent for
	// spec and lists it in the directories made afterwards. The suite adds
	// every node before it calls MakeDirectory.
	AddNode(ctx context.Context, spec NodeSpec) error
	// SetHealth puts a node's agent in h: Down stops it, Serving or
	// NotServing (re)starts it at the node's address.
	SetHealth(ctx context.Context, id string, h Health) error
	// MakeDirectory returns a directory over the nodes added so far.
	MakeDirectory(ctx context.Context) (ports.NodeDirectory, error)
	// Close stops the agents and directories.
	Close()
}

// Disabler is an optional Harness capability: taking a node out of the
// directory without touching its agent (a disabled row in the node table).
type Disabler interface {
	// SetDisabled disables or re-enables a node.
	SetDisabled(ctx context.Context, id string, disabled bool) error
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds each subtest; every wait for a directory to notice a
// change ends with it.
const testTimeout = 60 * time.Second

// pollEvery is how often the suite looks again while waiting. It is not an
// assertion: a slow directory only makes the wait longer.
const pollEvery = 10 * time.Millisecond

type env struct {
	ctx context.Context
	h   Harness
	run string
}

// id returns a node id unique to this run, so directories sharing a
// backend never see another subtest's nodes.
func (e *env) id(name string) string { return name + "-" + e.run }

func (e *env) add(t *testing.T, specs ...NodeSpec) {
	t.Helper()
	for _, s := range specs {
		s.ID = e.id(s.ID)
		if err := e.h.AddNode(e.ctx, s); err != nil {
			t.Fatalf("AddNode(%+v): %v", s, err)
		}
	}
}

func (e *env) set(t *testing.T, name string, h Health) {
	t.Helper()
	if err := e.h.SetHealth(e.ctx, e.id(name), h); err != nil {
		t.Fatalf("SetHealth(%s, %v): %v", name, h, err)
	}
}

func (e *env) directory(t *testing.T) ports.NodeDirectory {
	t.Helper()
	d, err := e.h.MakeDirectory(e.ctx)
	if err != nil {
		t.Fatalf("MakeDirectory: %v", err)
	}
	return d
}

// RunConformanceTests runs the suite against the adapter newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"FiltersByInstanceTypeAndHealth", testFilters},
		{"EmptyInstanceTypeIsDefault", testDefaultType},
		{"Get", testGet},
		{"NodeGoingDownLeavesAndReturns", testGoingDown},
		{"NotServingLeavesAndReturns", testNotServing},
		{"NodeDownAtStartJoinsLater", testLateNode},
		{"DisabledNodes", testDisabled},
		{"ResultsAreCopies", testCopies},
		{"ConcurrentCallers", testConcurrent},
		{"CancelledContext", testCancelled},
		{"NodesListsTheUnhealthyToo", testNodesAll},
		{"DownClosesWhenAProbeFails", testDown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			tc.fn(t, &env{ctx: ctx, h: h, run: randomHex(4)})
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

// healthy returns the ids HealthyNodes gives for instanceType (without the
// run suffix), checking every node it returns.
func (e *env) healthy(t *testing.T, d ports.NodeDirectory, instanceType string) []string {
	t.Helper()
	nodes, err := d.HealthyNodes(e.ctx, instanceType)
	if err != nil {
		t.Fatalf("HealthyNodes(%q): %v", instanceType, err)
	}
	want := instanceType
	if want == "" {
		want = core.DefaultInstanceType
	}
	ids := []string{}
	for _, n := range nodes {
		switch {
		case !n.Healthy:
			t.Fatalf("HealthyNodes(%q) returned %s marked unhealthy", instanceType, n.ID)
		case n.InstanceType != want:
			t.Fatalf("HealthyNodes(%q) returned %s of instance type %q", instanceType, n.ID, n.InstanceType)
		case n.Addr == "":
			t.Fatalf("HealthyNodes(%q) returned %s without an address", instanceType, n.ID)
		case slices.Contains(ids, strings.TrimSuffix(n.ID, "-"+e.run)):
			t.Fatalf("HealthyNodes(%q) returned %s twice", instanceType, n.ID)
		}
		ids = append(ids, strings.TrimSuffix(n.ID, "-"+e.run))
	}
	slices.Sort(ids)
	return ids
}

// eventuallyHealthy waits until HealthyNodes(instanceType) is exactly want.
func (e *env) eventuallyHealthy(t *testing.T, d ports.NodeDirectory, instanceType string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	slices.Sort(want)
	var got []string
	for {
		if got = e.healthy(t, d, instanceType); slices.Equal(got, want) {
			return
		}
		select {
		case <-e.ctx.Done():
			t.Fatalf("HealthyNodes(%q) = %v, want %v (waited until the subtest timed out)", instanceType, got, want)
		case <-time.After(pollEvery):
		}
	}
}

// eventually waits until cond holds, failing with what when the subtest
// times out.
func (e *env) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-e.ctx.Done():
			t.Fatalf("gave up waiting: %s", what)
		case <-time.After(pollEvery):
		}
	}
}

func testFilters(t *testing.T, e *env) {
	e.add(t,
		NodeSpec{ID: "std-a", Health: Serving},
		NodeSpec{ID: "std-b", InstanceType: core.DefaultInstanceType, Health: Serving},
		NodeSpec{ID: "std-sick", Health: NotServing},
		NodeSpec{ID: "std-down", Health: Down},
		NodeSpec{ID: "gpu-a", InstanceType: "gpu", Health: Serving},
		NodeSpec{ID: "gpu-down", InstanceType: "gpu", Health: Down},
	)
	d := e.directory(t)
	e.eventuallyHealthy(t, d, core.DefaultInstanceType, "std-a", "std-b")
	e.eventuallyHealthy(t, d, "gpu", "gpu-a")
	if got := e.healthy(t, d, "no-such-type"); len(got) != 0 {
		t.Fatalf("HealthyNodes of an unknown instance type = %v, want none", got)
	}
	// The unhealthy nodes stay out once the healthy ones are in.
	if got := e.healthy(t, d, core.DefaultInstanceType); !slices.Equal(got, []string{"std-a", "std-b"}) {
		t.Fatalf("HealthyNodes = %v after settling", got)
	}
}

func testDefaultType(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "std", Health: Serving}, NodeSpec{ID: "gpu", InstanceType: "gpu", Health: Serving})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "std")
	e.eventuallyHealthy(t, d, core.DefaultInstanceType, "std")
}

func testGet(t *testing.T, e *env) {
	e.add(t,
		NodeSpec{ID: "up", InstanceType: "gpu", Health: Serving},
		NodeSpec{ID: "sick", Health: NotServing},
		NodeSpec{ID: "down", Health: Down},
	)
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "gpu", "up")
	for _, tc := range []struct {
		name, typ string
		healthy   bool
	}{
		{"up", "gpu", true},
		{"sick", core.DefaultInstanceType, false},
		{"down", core.DefaultInstanceType, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := d.Get(e.ctx, e.id(tc.name))
			if err != nil {
				t.Fatalf("Get(%s): %v; want the node whatever its health", tc.name, err)
			}
			if n.ID != e.id(tc.name) || n.InstanceType != tc.typ || n.Addr == "" || n.Healthy != tc.healthy {
				t.Fatalf("Get(%s) = %+v; want id %s, instance type %s, an address, healthy %v",
					tc.name, n, e.id(tc.name), tc.typ, tc.healthy)
			}
		})
	}
	for _, id := range []string{e.id("never-added"), "", e.id("UP")} {
		if n, err := d.Get(e.ctx, id); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Get(%q) = %+v, %v; want an error wrapping core.ErrNotFound", id, n, err)
		}
	}
}

func testGoingDown(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "a", Health: Serving}, NodeSpec{ID: "b", Health: Serving})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "a", "b")
	e.set(t, "a", Down)
	e.eventuallyHealthy(t, d, "", "b")
	e.eventually(t, "Get(a) reports the node unhealthy", func() bool {
		n, err := d.Get(e.ctx, e.id("a"))
		return err == nil && !n.Healthy
	})
	e.set(t, "a", Serving)
	e.eventuallyHealthy(t, d, "", "a", "b")
	// Both down, then both back.
	e.set(t, "a", Down)
	e.set(t, "b", Down)
	e.eventuallyHealthy(t, d, "")
	e.set(t, "b", Serving)
	e.set(t, "a", Serving)
	e.eventuallyHealthy(t, d, "", "a", "b")
}

func testNotServing(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "a", Health: Serving}, NodeSpec{ID: "b", Health: Serving})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "a", "b")
	e.set(t, "b", NotServing)
	e.eventuallyHealthy(t, d, "", "a")
	e.set(t, "b", Serving)
	e.eventuallyHealthy(t, d, "", "a", "b")
}

func testLateNode(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "early", Health: Serving}, NodeSpec{ID: "late", Health: Down})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "early")
	e.set(t, "late", Serving)
	e.eventuallyHealthy(t, d, "", "early", "late")
}

func testDisabled(t *testing.T, e *env) {
	dis, ok := e.h.(Disabler)
	if !ok {
		t.Skip("the harness cannot disable nodes")
	}
	e.add(t, NodeSpec{ID: "a", Health: Serving}, NodeSpec{ID: "b", Health: Serving})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "a", "b")
	if err := dis.SetDisabled(e.ctx, e.id("a"), true); err != nil {
		t.Fatalf("SetDisabled(a, true): %v", err)
	}
	e.eventuallyHealthy(t, d, "", "b")
	e.eventually(t, "Get(a) of the disabled node wraps core.ErrNotFound", func() bool {
		_, err := d.Get(e.ctx, e.id("a"))
		return errors.Is(err, core.ErrNotFound)
	})
	if err := dis.SetDisabled(e.ctx, e.id("a"), false); err != nil {
		t.Fatalf("SetDisabled(a, false): %v", err)
	}
	e.eventuallyHealthy(t, d, "", "a", "b")
	if _, err := d.Get(e.ctx, e.id("a")); err != nil {
		t.Fatalf("Get(a) after re-enabling: %v", err)
	}
}

func testCopies(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "a", Health: Serving})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "a")
	nodes, err := d.HealthyNodes(e.ctx, "")
	if err != nil || len(nodes) != 1 {
		t.Fatalf("HealthyNodes = %v, %v", nodes, err)
	}
	want := nodes[0]
	nodes[0].Addr, nodes[0].Healthy, nodes[0].InstanceType = "tampered:1", false, "tampered"
	n, err := d.Get(e.ctx, e.id("a"))
	if err != nil || n != want {
		t.Fatalf("Get after the caller edited a HealthyNodes result = %+v, %v; want %+v", n, err, want)
	}
	n.Addr = "tampered:2"
	again, err := d.HealthyNodes(e.ctx, "")
	if err != nil || len(again) != 1 || again[0] != want {
		t.Fatalf("HealthyNodes after the caller edited a Get result = %+v, %v; want [%+v]", again, err, want)
	}
}

func testConcurrent(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "steady", Health: Serving}, NodeSpec{ID: "flappy", Health: Serving})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "flappy", "steady")
	const callers, rounds = 6, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds)
	for range callers {
		wg.Go(func() {
			for range rounds {
				if _, err := d.HealthyNodes(e.ctx, ""); err != nil {
					errs <- fmt.Errorf("calling HealthyNodes: %w", err)
				}
				if _, err := d.Get(e.ctx, e.id("steady")); err != nil {
					errs <- fmt.Errorf("calling Get: %w", err)
				}
			}
		})
	}
	// Health changes while the callers run.
	for _, h := range []Health{NotServing, Serving, Down, Serving} {
		e.set(t, "flappy", h)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.eventuallyHealthy(t, d, "", "flappy", "steady")
}

func testCancelled(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "a", Health: Serving}, NodeSpec{ID: "down", Health: Down})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "a")
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	// A directory may answer from what it knows or fail with the context's
	// error; it must not hang (the subtest timeout would catch that).
	if nodes, err := d.HealthyNodes(ctx, ""); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("HealthyNodes with a cancelled context: %v, want success or an error wrapping context.Canceled", err)
	} else if err == nil {
		for _, n := range nodes {
			if !n.Healthy {
				t.Errorf("HealthyNodes with a cancelled context returned unhealthy %s", n.ID)
			}
		}
	}
	if _, err := d.Get(ctx, e.id("a")); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: %v, want success or an error wrapping context.Canceled", err)
	}
	// The cancelled calls changed nothing.
	e.eventuallyHealthy(t, d, "", "a")
}

func testNodesAll(t *testing.T, e *env) {
	e.add(t,
		NodeSpec{ID: "a", Health: Serving},
		NodeSpec{ID: "b", Health: Down},
		NodeSpec{ID: "c", Health: NotServing},
		NodeSpec{ID: "g", InstanceType: "gpu", Health: Serving},
	)
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "a")
	nodes, err := d.Nodes(e.ctx, "")
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	var got []string
	for _, n := range nodes {
		got = append(got, fmt.Sprintf("%s:%v", strings.TrimSuffix(n.ID, "-"+e.run), n.Healthy))
		if n.Addr == "" || n.InstanceType != core.DefaultInstanceType {
			t.Errorf("Nodes returned %+v; want an address and the default instance type", n)
		}
	}
	if want := []string{"a:true", "b:false", "c:false"}; !slices.Equal(got, want) {
		t.Fatalf("Nodes(\"\") = %v, want %v (every listed node of the type, by id, with its health)", got, want)
	}
}

func testDown(t *testing.T, e *env) {
	e.add(t, NodeSpec{ID: "a", Health: Serving}, NodeSpec{ID: "b", Health: Down})
	d := e.directory(t)
	e.eventuallyHealthy(t, d, "", "a")
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if !closed(d.Down(e.id("b"))) || !closed(d.Down(e.id("never-added"))) {
		t.Fatal("Down of a node that is down now, or not listed, is open; want it closed")
	}
	up := d.Down(e.id("a"))
	if closed(up) {
		t.Fatal("Down of a healthy node is closed")
	}
	e.set(t, "a", Down)
	select {
	case <-up:
	case <-e.ctx.Done():
		t.Fatal("Down of a node that stopped answering its health check never closed")
	}
	e.set(t, "a", Serving)
	e.eventuallyHealthy(t, d, "", "a")
	if closed(d.Down(e.id("a"))) {
		t.Fatal("Down of a node back in health is still closed")
	}
}
