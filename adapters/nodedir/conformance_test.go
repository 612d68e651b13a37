package nodedir

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/nodedirtest"
)

// confAgent is one node agent of the harness: a real gRPC server with the
// health service on a loopback address that survives restarts.
type confAgent struct {
	addr   string
	srv    *grpc.Server // nil while down
	health *health.Server
}

func (a *confAgent) start() error {
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		return fmt.Errorf("restart agent at %s: %w", a.addr, err)
	}
	a.srv, a.health = grpc.NewServer(), health.NewServer()
	healthpb.RegisterHealthServer(a.srv, a.health)
	go a.srv.Serve(ln)
	return nil
}

func (a *confAgent) stop() {
	if a.srv != nil {
		a.srv.Stop()
		a.srv = nil
	}
}

// confHarness lists half of its nodes in the configuration and adds the
// other half through node table rows, so both paths of StoreSource run;
// disabling writes a disabled row.
type confHarness struct {
	mu     sync.Mutex
	static []ports.Node
	rows   map[string]ports.NodeRecord // the rows that add nodes
	table  *memNodes
	agents map[string]*confAgent
	dirs   []*Directory
}

func newConfHarness(context.Context, *testing.T) (nodedirtest.Harness, error) {
	return &confHarness{
		rows:   map[string]ports.NodeRecord{},
		table:  &memNodes{rows: map[string]ports.NodeRecord{}},
		agents: map[string]*confAgent{},
	}, nil
}

func (h *confHarness) AddNode(ctx context.Context, spec nodedirtest.NodeSpec) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	a := &confAgent{addr: ln.Addr().String()}
	_ = ln.Close() // reserve the port, then serve on it (or leave it dead)
	if spec.Health != nodedirtest.Down {
		if err := a.start(); err != nil {
			return err
		}
		a.health.SetServingStatus("", servingStatus(spec.Health))
	}
	h.agents[spec.ID] = a
	if len(h.agents)%2 == 1 {
		typ := spec.InstanceType
		if typ == "" {
			typ = core.DefaultInstanceType
		}
		h.static = append(h.static, ports.Node{ID: spec.ID, IP: "127.0.0.1", Addr: a.addr, InstanceType: typ})
		return nil
	}
	row := ports.NodeRecord{NodeID: spec.ID, GRPCAddr: a.addr, InstanceType: spec.InstanceType}
	h.rows[spec.ID] = row
	return h.table.Upsert(ctx, row)
}

func servingStatus(hl nodedirtest.Health) healthpb.HealthCheckResponse_ServingStatus {
	if hl == nodedirtest.Serving {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

func (h *confHarness) SetHealth(_ context.Context, id string, hl nodedirtest.Health) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.agents[id]
	if a == nil {
		return fmt.Errorf("no node %s", id)
	}
	if hl == nodedirtest.Down {
		a.stop()
		return nil
	}
	if a.srv == nil {
		if err := a.start(); err != nil {
			return err
		}
	}
	a.health.SetServingStatus("", servingStatus(hl))
	return nil
}

func (h *confHarness) SetDisabled(ctx context.Context, id string, disabled bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	row, added := h.rows[id]
	switch {
	case disabled:
		if !added {
			row = ports.NodeRecord{NodeID: id}
		}
		row.Disabled = true
		return h.table.Upsert(ctx, row)
	case added:
		return h.table.Upsert(ctx, row) // the row as added, enabled
	default:
		return h.table.Delete(ctx, id) // a configured node: drop the row
	}
}

func (h *confHarness) MakeDirectory(context.Context) (ports.NodeDirectory, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	src := &StoreSource{Static: append([]ports.Node(nil), h.static...), Repo: h.table, Logger: quiet()}
	d, err := NewWithSource(src, Options{Interval: 200 * time.Millisecond, RetryInterval: 20 * time.Millisecond,
		Timeout: 2 * time.Second, Logger: quiet()})
	if err != nil {
		return nil, err
	}
	// The probe loop outlives the call; Close stops it.
	if err := d.Start(context.Background()); err != nil {
		return nil, err
	}
	h.dirs = append(h.dirs, d)
	return d, nil
}

func (h *confHarness) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.dirs {
		_ = d.Close()
	}
	for _, a := range h.agents {
		a.stop()
	}
}

func TestConformance(t *testing.T) {
	nodedirtest.RunConformanceTests(t, newConfHarness)
}
