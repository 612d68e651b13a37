package nodedir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Defaults of Options.
const (
	DefaultInterval      = 10 * time.Second
	DefaultRetryInterval = time.Second
	DefaultTimeout       = 2 * time.Second
)

// recheckAfter is how old an unhealthy node's last probe must be before
// HealthyNodes probes it again on the spot; it keeps a burst of callers
// from probing a dead node over and over.
const recheckAfter = 250 * time.Millisecond

// Options configures a Directory. The zero value is usable.
type Options struct {
	// Interval is how often a healthy node is probed (default
	// DefaultInterval).
	Interval time.Duration
	// RetryInterval is how often an unhealthy node is probed (default
	// DefaultRetryInterval, never more than Interval), so a node agent that
	// starts after the master is used within about a second.
	RetryInterval time.Duration
	// Timeout bounds one health check (default DefaultTimeout).
	Timeout time.Duration
	// Service is the health service name asked for; "" is the whole server.
	Service string
	// DialOptions are added to every connection. Without transport
	// credentials among them (Secure false) connections are insecure: node
	// agents sit on the internal network, as for adapters/cubelet.
	DialOptions []grpc.DialOption
	Secure      bool
	// Logger receives health transitions (default slog.Default()).
	Logger *slog.Logger
}

// Status is one node as last probed.
type Status struct {
	ports.Node
	// LastProbe is when the last probe finished; zero before the first.
	LastProbe time.Time
	// LastSeen is when a probe last found it healthy; zero if none has.
	LastSeen time.Time
	// LastError is why the node is unhealthy; "" when healthy.
	LastError string
}

// Directory implements ports.NodeDirectory. Its methods are safe for
// concurrent use.
type Directory struct {
	opts Options
	log  *slog.Logger
	src  Source   // nil: the list given to New never changes
	ids  []string // sorted; replaced only under probeMu and mu
	byID map[string]*member

	probeMu sync.Mutex // one probe round (or list refresh) at a time

	mu      sync.Mutex // guards the fields below and every member's state
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

type member struct {
	node      ports.Node // Healthy is the current state
	lastProbe time.Time
	lastSeen  time.Time // the last probe that found it healthy
	lastErr   string
	conn      *grpc.ClientConn // touched only under probeMu
	// down is closed while the node is unhealthy or no longer listed; a
	// node that turns healthy gets a fresh, open one (Down).
	down chan struct{}
}

// closedChan is the Down channel of a node that is down now.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newMember(n ports.Node) *member {
	n.Healthy = false
	return &member{node: n, lastErr: "not probed yet", down: closedChan}
}

// leave closes m's Down channel (called under mu).
func (m *member) leave() {
	select {
	case <-m.down:
	default:
		close(m.down)
	}
}

var _ ports.NodeDirectory = (*Directory)(nil)

// New returns a Directory over nodes (as Parse returns them). Every node
// starts unhealthy; call Start (or ProbeNow) to probe. Ids must be unique
// and every node needs an address.
func New(nodes []ports.Node, opts Options) (*Directory, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	opts.RetryInterval = min(opts.RetryInterval, opts.Interval)
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	d := &Directory{opts: opts, log: log.With("component", "nodedir"), byID: map[string]*member{}}
	for i, n := range nodes {
		switch {
		case n.ID == "":
			return nil, &core.FieldError{Field: fmt.Sprintf("nodes[%d].id", i), Reason: "is required"}
		case n.Addr == "":
			return nil, &core.FieldError{Field: fmt.Sprintf("nodes[%d].addr", i), Reason: fmt.Sprintf("node %s has no agent address", n.ID)}
		case d.byID[n.ID] != nil:
			return nil, &core.FieldError{Field: fmt.Sprintf("nodes[%d].id", i), Reason: fmt.Sprintf("%q is listed twice", n.ID)}
		}
		if n.InstanceType == "" {
			n.InstanceType = core.DefaultInstanceType
		}
		d.byID[n.ID] = newMember(n)
		d.ids = append(d.ids, n.ID)
	}
	slices.Sort(d.ids)
	return d, nil
}

// NewWithSource returns a Directory whose node list comes from src. The
// list is empty until the first Refresh (Start and ProbeNow refresh), and
// is asked for again before every probe round of the loop.
func NewWithSource(src Source, opts Options) (*Directory, error) {
	if src == nil {
		return nil, errors.New("nodedir: NewWithSource needs a source")
	}
	d, err := New(nil, opts)
	if err != nil {
		return nil, err
	}
	d.src = src
	return d, nil
}

// Refresh reads the node list from the source and applies it: new nodes
// join unhealthy until probed, nodes whose address changed are probed
// afresh, nodes no longer listed leave. When the source fails the list
// stays as it was and the error is returned (and logged). Without a source
// it does nothing.
func (d *Directory) Refresh(ctx context.Context) error {
	if d.src == nil {
		return nil
	}
	nodes, err := d.src.Nodes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("node list not refreshed; keeping the current one", "err", err)
		}
		return err
	}
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("nodedir: directory closed")
	}
	byID := make(map[string]*member, len(nodes))
	ids := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n.ID == "" || n.Addr == "" || byID[n.ID] != nil {
			d.log.Warn("node source gave an unusable entry; skipped", "node", n.ID, "addr", n.Addr)
			continue
		}
		if n.InstanceType == "" {
			n.InstanceType = core.DefaultInstanceType
		}
		old := d.byID[n.ID]
		if old != nil && old.node.Addr == n.Addr {
			old.node.IP, old.node.InstanceType = n.IP, n.InstanceType
			byID[n.ID] = old
		} else {
			byID[n.ID] = newMember(n)
			d.log.Info("node listed", "node", n.ID, "addr", n.Addr)
		}
		ids = append(ids, n.ID)
	}
	for id, m := range d.byID {
		if byID[id] == m {
			continue
		}
		if m.conn != nil { // probeMu is held: conns are ours to close
			_ = m.conn.Close()
			m.conn = nil
		}
		m.leave()
		if byID[id] == nil {
			d.log.Info("node no longer listed", "node", id, "addr", m.node.Addr)
		}
	}
	slices.Sort(ids)
	d.ids, d.byID = ids, byID
	return nil
}

// Start probes every node once, synchronously, then keeps probing until ctx
// ends or Close is called: unhealthy nodes every RetryInterval, healthy ones
// every Interval. It may be called once.
func (d *Directory) Start(ctx context.Context) error {
	d.mu.Lock()
	if d.started || d.closed {
		d.mu.Unlock()
		return errors.New("nodedir: Start called twice or after Close")
	}
	d.started = true
	lctx, cancel := context.WithCancel(ctx)
	d.cancel, d.done = cancel, make(chan struct{})
	d.mu.Unlock()

	d.ProbeNow(lctx)
	go func() {
		defer close(d.done)
		t := time.NewTicker(d.opts.RetryInterval)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				_ = d.Refresh(lctx) // on failure the current list is kept
				d.probe(lctx, d.due)
			}
		}
	}()
	return nil
}

// ProbeNow refreshes the node list (see Refresh), then probes every node
// in parallel and records the outcomes. A probe cut short by ctx leaves that
// node's state as it was.
func (d *Directory) ProbeNow(ctx context.Context) {
	_ = d.Refresh(ctx)
	d.probe(ctx, func(*member, time.Time) bool { return true })
}

// due picks the nodes the loop probes on a tick: the unhealthy ones, and
// the healthy ones last probed at least Interval ago (a little slack, so a
// tick that comes a hair early still counts).
func (d *Directory) due(m *member, now time.Time) bool {
	return !m.node.Healthy || now.Sub(m.lastProbe) >= d.opts.Interval-d.opts.RetryInterval/2
}

// probe probes the nodes pick selects (called under d.mu) in parallel.
func (d *Directory) probe(ctx context.Context, pick func(m *member, now time.Time) bool) {
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	now := time.Now()
	var todo []*member
	d.mu.Lock()
	for _, id := range d.ids {
		if m := d.byID[id]; pick(m, now) {
			todo = append(todo, m)
		}
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range todo {
		wg.Go(func() {
			err := d.check(ctx, m)
			if ctx.Err() != nil {
				return
			}
			d.record(m, err)
		})
	}
	wg.Wait()
}

// check asks one node's health service. Runs under probeMu, which guards
// m.conn.
func (d *Directory) check(ctx context.Context, m *member) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return errors.New("directory closed")
	}
	if m.conn == nil {
		opts := d.opts.DialOptions
		if !d.opts.Secure {
			opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
		}
		cc, err := grpc.NewClient(m.node.Addr, opts...)
		if err != nil {
			return fmt.Errorf("dial %s: %w", m.node.Addr, err)
		}
		m.conn = cc
	}
	cctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(m.conn).Check(cctx, &healthpb.HealthCheckRequest{Service: d.opts.Service})
	switch {
	case status.Code(err) == codes.Unimplemented:
		// The agent answers gRPC but has no health service.
		return nil
	case err != nil:
		if c := status.Code(err); c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled {
			// Unreachable: start the next probe on a fresh connection
			// rather than waiting out gRPC's reconnect backoff (up to
			// minutes) once the node is back.
			_ = m.conn.Close()
			m.conn = nil
		}
		return fmt.Errorf("health check %s: %w", m.node.Addr, err)
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return fmt.Errorf("health check %s: %s", m.node.Addr, resp.GetStatus())
	}
	return nil
}

// record stores a probe's outcome and logs transitions.
func (d *Directory) record(m *member, err error) {
	d.mu.Lock()
	was, first := m.node.Healthy, m.lastProbe.IsZero()
	m.node.Healthy = err == nil
	m.lastProbe = time.Now()
	m.lastErr = ""
	if err == nil {
		m.lastSeen = m.lastProbe
	}
	if err != nil {
		m.lastErr = err.Error()
	}
	now := m.node.Healthy
	switch {
	case now && !was:
		m.down = make(chan struct{})
	case !now:
		m.leave()
	}
	d.mu.Unlock()
	switch {
	case now && (!was || first):
		d.log.Info("node healthy", "node", m.node.ID, "addr", m.node.Addr)
	case !now && (was || first):
		d.log.Warn("node unhealthy", "node", m.node.ID, "addr", m.node.Addr, "err", err)
	}
}

// HealthyNodes returns the healthy nodes of the instance type ("" means
// core.DefaultInstanceType), sorted by id. Unhealthy nodes of that type
// not probed within the last recheckAfter are probed again first (bounded
// by Timeout): distribution must not skip a node agent that came up
// between two probe rounds. Healthy nodes are trusted until the next round;
// one that died since fails its RPC with a clear error.
func (d *Directory) HealthyNodes(ctx context.Context, instanceType string) ([]ports.Node, error) {
	if instanceType == "" {
		instanceType = core.DefaultInstanceType
	}
	d.probe(ctx, func(m *member, now time.Time) bool {
		return !m.node.Healthy && m.node.InstanceType == instanceType && now.Sub(m.lastProbe) >= recheckAfter
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []ports.Node
	for _, id := range d.ids {
		n := d.byID[id].node
		if n.Healthy && n.InstanceType == instanceType {
			out = append(out, n)
		}
	}
	return out, nil
}

// Nodes returns every listed node of the instance type ("" means
// core.DefaultInstanceType) with its health as last probed, sorted by id.
func (d *Directory) Nodes(_ context.Context, instanceType string) ([]ports.Node, error) {
	if instanceType == "" {
		instanceType = core.DefaultInstanceType
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []ports.Node
	for _, id := range d.ids {
		if n := d.byID[id].node; n.InstanceType == instanceType {
			out = append(out, n)
		}
	}
	return out, nil
}

// Down returns a channel closed when the node fails a health probe or
// leaves the list; it is closed already for a node that is unhealthy now
// or not listed.
func (d *Directory) Down(nodeID string) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m := d.byID[strings.TrimSpace(nodeID)]; m != nil {
		return m.down
	}
	return closedChan
}

// Get returns the node with its current health, healthy or not (cleanup
// must reach nodes that are down as soon as they are back), or an error
// wrapping core.ErrNotFound for an id the configuration does not list.
func (d *Directory) Get(_ context.Context, nodeID string) (ports.Node, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.byID[strings.TrimSpace(nodeID)]
	if m == nil {
		return ports.Node{}, fmt.Errorf("node %s: %w", nodeID, core.ErrNotFound)
	}
	return m.node, nil
}

// Statuses returns every node with its last probe, sorted by id.
func (d *Directory) Statuses() []Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Status, 0, len(d.ids))
	for _, id := range d.ids {
		m := d.byID[id]
		out = append(out, Status{Node: m.node, LastProbe: m.lastProbe, LastSeen: m.lastSeen, LastError: m.lastErr})
	}
	return out
}

// Close stops probing, waits for the probe loop and closes the connections.
func (d *Directory) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	d.mu.Lock()
	for _, id := range d.ids {
		d.byID[id].leave()
	}
	d.mu.Unlock()
	var errs []error
	for _, id := range d.ids {
		if m := d.byID[id]; m.conn != nil {
			if err := m.conn.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", m.node.Addr, err))
			}
			m.conn = nil
		}
	}
	return errors.Join(errs...)
}
