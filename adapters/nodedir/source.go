package nodedir

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Source gives a Directory its node list. A Directory made by
// NewWithSource asks it again before every probe round, so nodes can be
// added, moved or disabled while the master runs.
type Source interface {
	// Nodes returns the current list: unique ids, each with an address.
	Nodes(ctx context.Context) ([]ports.Node, error)
}

// StoreSource merges the configured nodes (CUBE_MASTER_NODES, as Parse
// returns them) with the rows of the node table (see Merge).
type StoreSource struct {
	Static []ports.Node
	Repo   ports.NodeRepository
	Logger *slog.Logger

	mu        sync.Mutex
	lastSkips string // the ignored rows last logged, so a bad row is logged once, not every tick
}

// Nodes reads the node table and merges it into the static list. Rows that
// cannot be used are left out and logged when the set of them changes.
func (s *StoreSource) Nodes(ctx context.Context) ([]ports.Node, error) {
	rows, err := s.Repo.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the node table: %w", err)
	}
	nodes, skipped := Merge(s.Static, rows)
	msgs := make([]string, len(skipped))
	for i, e := range skipped {
		msgs[i] = e.Error()
	}
	key := strings.Join(msgs, "\n")
	s.mu.Lock()
	changed := key != s.lastSkips
	s.lastSkips = key
	s.mu.Unlock()
	if changed && len(skipped) > 0 {
		log := s.Logger
		if log == nil {
			log = slog.Default()
		}
		for _, e := range skipped {
			log.Warn("node table row ignored", "component", "nodedir", "err", e)
		}
	}
	return nodes, nil
}

// Merge applies the node table's rows to the configured nodes:
//
//   - a row whose node id is not configured adds the node (it needs a
//     grpc_addr; node_ip defaults to the address's host, instance_type to
//     core.DefaultInstanceType);
//   - a row for a configured node overrides its address, IP and instance
//     type with the row's non-empty values;
//   - a disabled row removes the node, configured or not.
//
// Rows that break the rules Parse enforces (id and instance type syntax,
// host:port address, an address used by another node) are left out and
// returned as *core.FieldError values naming the row. The result is sorted
// by id.
func Merge(static []ports.Node, rows []ports.NodeRecord) ([]ports.Node, []error) {
	byID := make(map[string]ports.Node, len(static)+len(rows))
	for _, n := range static {
		byID[n.ID] = n
	}
	var skipped []error
	for _, r := range rows {
		bad := func(format string, args ...any) {
			skipped = append(skipped, &core.FieldError{Field: fmt.Sprintf("t_cube_template_node[%s]", r.NodeID),
				Reason: fmt.Sprintf(format, args...)})
		}
		if r.Disabled {
			delete(byID, r.NodeID)
			continue
		}
		if !nameRule.MatchString(r.NodeID) {
			bad("node id must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit")
			continue
		}
		n, known := byID[r.NodeID]
		if !known {
			n = ports.Node{ID: r.NodeID, InstanceType: core.DefaultInstanceType}
			if r.GRPCAddr == "" {
				bad("node is not configured and the row has no grpc_addr")
				continue
			}
		}
		if a := strings.TrimSpace(r.GRPCAddr); a != "" {
			host, err := checkAddr(a)
			if err != nil {
				bad("grpc_addr %q: %v", a, err)
				continue
			}
			n.Addr, n.IP = a, host
		}
		if ip := strings.TrimSpace(r.NodeIP); ip != "" {
			n.IP = ip
		}
		if it := strings.TrimSpace(r.InstanceType); it != "" {
			if !nameRule.MatchString(it) {
				bad("instance type %q must be 1-128 letters, digits, '.', '_' or '-'", it)
				continue
			}
			n.InstanceType = it
		}
		if other := addrOwner(byID, n.Addr, n.ID); other != "" {
			bad("grpc_addr %s is already used by node %s", n.Addr, other)
			continue
		}
		byID[n.ID] = n
	}
	out := make([]ports.Node, 0, len(byID))
	for _, n := range byID {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b ports.Node) int { return strings.Compare(a.ID, b.ID) })
	return out, skipped
}

// addrOwner returns the id of a node other than self that uses addr.
func addrOwner(byID map[string]ports.Node, addr, self string) string {
	for id, n := range byID {
		if id != self && n.Addr == addr {
			return id
		}
	}
	return ""
}

// checkAddr checks a host:port agent address and returns its host.
func checkAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("not host:port: %w", err)
	}
	if host == "" {
		return "", fmt.Errorf("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port must be 1-65535")
	}
	return host, nil
}
