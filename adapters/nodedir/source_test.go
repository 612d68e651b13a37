package nodedir

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

func TestMerge(t *testing.T) {
	static := []ports.Node{
		{ID: "node-a", IP: "10.0.0.1", Addr: "10.0.0.1:7001", InstanceType: "cubebox"},
		{ID: "node-b", IP: "10.0.0.2", Addr: "10.0.0.2:7001", InstanceType: "cubebox"},
	}
	tests := []struct {
		name     string
		rows     []ports.NodeRecord
		want     []ports.Node
		wantSkip []string // substrings, one per skipped row
	}{
		{name: "no rows", want: static},
		{name: "row adds a node, ip and type defaulted",
			rows: []ports.NodeRecord{{NodeID: "node-c", GRPCAddr: "host-c:7001"}},
			want: append(slices.Clone(static), ports.Node{ID: "node-c", IP: "host-c", Addr: "host-c:7001", InstanceType: core.DefaultInstanceType})},
		{name: "row overrides address and ip of a configured node",
			rows: []ports.NodeRecord{{NodeID: "node-b", GRPCAddr: "10.0.0.9:7002", NodeIP: "192.168.0.9"}},
			want: []ports.Node{static[0], {ID: "node-b", IP: "192.168.0.9", Addr: "10.0.0.9:7002", InstanceType: "cubebox"}}},
		{name: "row with only an instance type keeps the address",
			rows: []ports.NodeRecord{{NodeID: "node-a", InstanceType: "gpu"}},
			want: []ports.Node{{ID: "node-a", IP: "10.0.0.1", Addr: "10.0.0.1:7001", InstanceType: "gpu"}, static[1]}},
		{name: "disabled row removes a configured node",
			rows: []ports.NodeRecord{{NodeID: "node-a", GRPCAddr: "10.0.0.1:7001", Disabled: true}},
			want: []ports.Node{static[1]}},
		{name: "disabled unknown row adds nothing",
			rows: []ports.NodeRecord{{NodeID: "node-z", GRPCAddr: "z:1", Disabled: true}},
			want: static},
		{name: "bad rows are skipped and named",
			rows: []ports.NodeRecord{
				{NodeID: "node-c"},
				{NodeID: "-bad", GRPCAddr: "h:1"},
				{NodeID: "node-d", GRPCAddr: "no-port"},
				{NodeID: "node-e", GRPCAddr: "h:70000"},
				{NodeID: "node-f", GRPCAddr: "10.0.0.2:7001"},
				{NodeID: "node-g", GRPCAddr: "g:1", InstanceType: "bad type"},
			},
			want: static,
			wantSkip: []string{"node-c]: node is not configured and the row has no grpc_addr", "-bad]: node id", "node-d]: grpc_addr \"no-port\"",
				"port must be 1-65535", "already used by node node-b", "instance type \"bad type\""}},
		{name: "moving a node frees its old address",
			rows: []ports.NodeRecord{{NodeID: "node-a", GRPCAddr: "10.0.0.1:7009"}, {NodeID: "node-c", GRPCAddr: "10.0.0.1:7001"}},
			want: []ports.Node{{ID: "node-a", IP: "10.0.0.1", Addr: "10.0.0.1:7009", InstanceType: "cubebox"}, static[1],
				{ID: "node-c", IP: "10.0.0.1", Addr: "10.0.0.1:7001", InstanceType: core.DefaultInstanceType}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := Merge(static, tc.rows)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("nodes:\n got %+v\nwant %+v", got, tc.want)
			}
			if len(skipped) != len(tc.wantSkip) {
				t.Fatalf("skipped %v, want %d", skipped, len(tc.wantSkip))
			}
			for i, e := range skipped {
				if !strings.Contains(e.Error(), tc.wantSkip[i]) || !errors.Is(e, core.ErrInvalidArgument) {
					t.Fatalf("skipped[%d] = %v, want one containing %q", i, e, tc.wantSkip[i])
				}
			}
		})
	}
}

// memNodes is an in-memory node table.
type memNodes struct {
	mu   sync.Mutex
	rows map[string]ports.NodeRecord
	err  error
}

func (m *memNodes) List(context.Context) ([]ports.NodeRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	var out []ports.NodeRecord
	for _, r := range m.rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ports.NodeRecord) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

func (m *memNodes) Upsert(_ context.Context, n ports.NodeRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows[n.NodeID] = n
	return nil
}

func (m *memNodes) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, id)
	return nil
}

func (m *memNodes) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

func addrOf(t *testing.T, d *Directory, id string) string {
	t.Helper()
	n, err := d.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return n.Addr
}

// TestDirectoryFollowsNodeTable: table rows add nodes, move them and
// disable them; each refresh (here ProbeNow) applies the table as it is.
func TestDirectoryFollowsNodeTable(t *testing.T) {
	a := startAgent(t, "", true)
	b := startAgent(t, "", true)
	c := startAgent(t, "", true)
	table := &memNodes{rows: map[string]ports.NodeRecord{}}
	src := &StoreSource{Static: []ports.Node{{ID: "node-a", IP: "127.0.0.1", Addr: a.addr}}, Repo: table, Logger: quiet()}
	d, err := NewWithSource(src, Options{Interval: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()

	d.ProbeNow(ctx)
	wantHealthy(t, d, "node-a")

	// A row adds node-b.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(table.Upsert(ctx, ports.NodeRecord{NodeID: "node-b", GRPCAddr: b.addr}))
	d.ProbeNow(ctx)
	wantHealthy(t, d, "node-a", "node-b")

	// A row moves node-a to agent c's address.
	must(table.Upsert(ctx, ports.NodeRecord{NodeID: "node-a", GRPCAddr: c.addr}))
	d.ProbeNow(ctx)
	if got := addrOf(t, d, "node-a"); got != c.addr {
		t.Fatalf("node-a addr %s, want the override %s", got, c.addr)
	}
	wantHealthy(t, d, "node-a", "node-b")
	c.serving(false) // proves node-a is now probed at c, not a
	d.ProbeNow(ctx)
	if got := probedHealthy(d); !slices.Equal(got, []string{"node-b"}) {
		t.Fatalf("healthy after c went NOT_SERVING: %v", got)
	}
	c.serving(true)

	// disabled=true excludes a node, configured or added by the table.
	must(table.Upsert(ctx, ports.NodeRecord{NodeID: "node-b", GRPCAddr: b.addr, Disabled: true}))
	d.ProbeNow(ctx)
	wantHealthy(t, d, "node-a")
	if _, err := d.Get(ctx, "node-b"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("disabled node-b: Get = %v, want ErrNotFound", err)
	}

	// Deleting the override row brings the configured address back.
	must(table.Delete(ctx, "node-a"))
	d.ProbeNow(ctx)
	if got := addrOf(t, d, "node-a"); got != a.addr {
		t.Fatalf("node-a addr %s, want the configured %s", got, a.addr)
	}

	// A failing table keeps the current list.
	table.fail(errors.New("database down"))
	if err := d.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "database down") {
		t.Fatalf("Refresh with a failing table = %v", err)
	}
	d.ProbeNow(ctx)
	wantHealthy(t, d, "node-a")
}

// TestLoopRefreshesNodeTable: the background loop picks up a new row
// without anyone calling ProbeNow.
func TestLoopRefreshesNodeTable(t *testing.T) {
	a := startAgent(t, "", true)
	table := &memNodes{rows: map[string]ports.NodeRecord{}}
	d, err := NewWithSource(&StoreSource{Repo: table, Logger: quiet()},
		Options{Interval: time.Hour, RetryInterval: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := probedHealthy(d); len(got) != 0 {
		t.Fatalf("empty table, healthy %v", got)
	}
	if err := table.Upsert(t.Context(), ports.NodeRecord{NodeID: "late", GRPCAddr: a.addr}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(probedHealthy(d), []string{"late"}) {
		if time.Now().After(deadline) {
			t.Fatalf("the loop never picked up the new row: %+v", d.Statuses())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewWithSourceNeedsSource(t *testing.T) {
	if _, err := NewWithSource(nil, Options{}); err == nil {
		t.Fatal("NewWithSource(nil) succeeded")
	}
}
