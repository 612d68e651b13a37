package nodedir

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// agent is a real gRPC server on loopback, optionally with the health
// service.
type agent struct {
	t      *testing.T
	addr   string
	srv    *grpc.Server
	health *health.Server
}

func startAgent(t *testing.T, addr string, withHealth bool) *agent {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{t: t, addr: ln.Addr().String(), srv: grpc.NewServer()}
	if withHealth {
		a.health = health.NewServer()
		healthpb.RegisterHealthServer(a.srv, a.health)
	}
	go a.srv.Serve(ln)
	t.Cleanup(a.srv.Stop)
	return a
}

func (a *agent) serving(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	a.health.SetServingStatus("", st)
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func healthyIDs(t *testing.T, d *Directory, instanceType string) []string {
	t.Helper()
	ns, err := d.HealthyNodes(t.Context(), instanceType)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, n := range ns {
		if !n.Healthy {
			t.Fatalf("HealthyNodes returned %s marked unhealthy", n.ID)
		}
		ids = append(ids, n.ID)
	}
	return ids
}

// probedHealthy is the ids the recorded state calls healthy, without the
// on-the-spot probe HealthyNodes does.
func probedHealthy(d *Directory) []string {
	ids := []string{}
	for _, s := range d.Statuses() {
		if s.Healthy {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

func wantHealthy(t *testing.T, d *Directory, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := healthyIDs(t, d, ""); !slices.Equal(got, want) {
		t.Fatalf("healthy nodes = %v, want %v (statuses %+v)", got, want, d.Statuses())
	}
}

// TestHealthTransitions walks nodes through healthy, NOT_SERVING,
// unreachable (server stopped) and back, with explicit probes.
func TestHealthTransitions(t *testing.T) {
	a := startAgent(t, "", true)
	b := startAgent(t, "", true)
	b.serving(false)
	dead := deadAddr(t)
	nodes := []ports.Node{
		{ID: "node-b", IP: "127.0.0.1", Addr: b.addr},
		{ID: "node-a", IP: "127.0.0.1", Addr: a.addr},
		{ID: "node-c", IP: "127.0.0.1", Addr: dead},
	}
	d, err := New(nodes, Options{Interval: time.Hour, Timeout: 2 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	// Before any probe nothing is healthy, but every node can be looked up.
	if got := probedHealthy(d); len(got) != 0 {
		t.Fatalf("healthy before any probe: %v", got)
	}
	n, err := d.Get(t.Context(), "node-a")
	if err != nil || n.Healthy || n.Addr != a.addr || n.InstanceType != core.DefaultInstanceType {
		t.Fatalf("Get before probing = %+v, %v", n, err)
	}

	// Start probes synchronously.
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantHealthy(t, d, "node-a")
	if err := d.Start(t.Context()); err == nil {
		t.Fatal("second Start succeeded")
	}

	// Healthy -> NOT_SERVING and back.
	a.serving(false)
	b.serving(true)
	d.ProbeNow(t.Context())
	wantHealthy(t, d, "node-b")

	// Get still returns an unhealthy node: cleanup must reach it.
	n, err = d.Get(t.Context(), "node-a")
	if err != nil || n.Healthy {
		t.Fatalf("Get(unhealthy node-a) = %+v, %v; want the node, unhealthy", n, err)
	}

	// Healthy -> unreachable -> healthy again on the same address.
	b.srv.Stop()
	d.ProbeNow(t.Context())
	wantHealthy(t, d)
	for _, s := range d.Statuses() {
		if s.Healthy || s.LastError == "" || s.LastProbe.IsZero() {
			t.Fatalf("status after outage = %+v, want unhealthy with a reason", s)
		}
	}
	b2 := startAgent(t, b.addr, true)
	_ = b2
	d.ProbeNow(t.Context())
	wantHealthy(t, d, "node-b")

	// The node that never listened becomes healthy once an agent appears.
	startAgent(t, dead, true)
	a.serving(true)
	d.ProbeNow(t.Context())
	wantHealthy(t, d, "node-a", "node-b", "node-c")
}

func TestBackgroundLoopProbes(t *testing.T) {
	a := startAgent(t, "", true)
	d, err := New([]ports.Node{{ID: "n1", Addr: a.addr}}, Options{Interval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantHealthy(t, d, "n1")
	a.serving(false)
	deadline := time.Now().Add(10 * time.Second)
	for len(probedHealthy(d)) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the probe loop never noticed NOT_SERVING")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A node agent that starts after the master is picked up at the retry
// cadence, not after a full (here: hour-long) healthy interval.
func TestLoopRetriesUnhealthyNodesSoon(t *testing.T) {
	addr := deadAddr(t)
	d, err := New([]ports.Node{{ID: "late", Addr: addr}}, Options{Interval: time.Hour, RetryInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := probedHealthy(d); len(got) != 0 {
		t.Fatalf("healthy while down: %v", got)
	}
	startAgent(t, addr, true)
	deadline := time.Now().Add(10 * time.Second)
	for len(probedHealthy(d)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the late node was never probed again: %+v", d.Statuses())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// HealthyNodes probes unhealthy nodes of the asked type on the spot, so
// distribution never waits for the next round to see an agent that is up.
func TestHealthyNodesRechecksUnhealthyNodes(t *testing.T) {
	addr := deadAddr(t)
	other := deadAddr(t)
	nodes, err := Parse("late=" + addr + ",gpu=" + other + "@gpu")
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(nodes, Options{Interval: time.Hour, RetryInterval: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	startAgent(t, addr, true)
	startAgent(t, other, true)
	time.Sleep(recheckAfter) // let the start-up probe age past recheckAfter
	wantHealthy(t, d, "late")
	if got := probedHealthy(d); len(got) != 1 || got[0] != "late" {
		t.Fatalf("recorded healthy = %v; want only the cubebox node re-checked", got)
	}
}

func TestInstanceTypesAndLookups(t *testing.T) {
	a := startAgent(t, "", true)
	b := startAgent(t, "", true)
	nodes, err := Parse("std=" + a.addr + ",gpu=" + b.addr + "@gpu")
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(nodes, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.ProbeNow(t.Context())
	if got := healthyIDs(t, d, "cubebox"); !slices.Equal(got, []string{"std"}) {
		t.Fatalf("cubebox nodes = %v", got)
	}
	if got := healthyIDs(t, d, "gpu"); !slices.Equal(got, []string{"gpu"}) {
		t.Fatalf("gpu nodes = %v", got)
	}
	if got := healthyIDs(t, d, "none"); len(got) != 0 {
		t.Fatalf("nodes of an unknown type = %v", got)
	}
	if _, err := d.Get(t.Context(), "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get(unknown) err = %v, want core.ErrNotFound", err)
	}
}

// An agent that answers gRPC but serves no health service (an upstream
// Cubelet may not) counts as healthy: it is reachable.
func TestAgentWithoutHealthServiceIsHealthy(t *testing.T) {
	a := startAgent(t, "", false)
	d, err := New([]ports.Node{{ID: "plain", Addr: a.addr}}, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.ProbeNow(t.Context())
	wantHealthy(t, d, "plain")
}

func TestNewRejectsBadNodes(t *testing.T) {
	cases := map[string][]ports.Node{
		"no id":        {{Addr: "127.0.0.1:1"}},
		"no addr":      {{ID: "a"}},
		"duplicate id": {{ID: "a", Addr: "127.0.0.1:1"}, {ID: "a", Addr: "127.0.0.1:2"}},
	}
	for name, nodes := range cases {
		if _, err := New(nodes, Options{}); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid argument", name, err)
		}
	}
}
