package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// resolveNodes picks the healthy nodes of the instance type the scope
// names (core.NamesNode; empty: all). Unknown entries are an error listing
// them sorted; no node at all is core.ErrNoTemplateNodes.
func (s *Service) resolveNodes(ctx context.Context, instanceType string, scope core.NodeScope) ([]ports.Node, error) {
	if instanceType == "" {
		instanceType = core.DefaultInstanceType
	}
	nodes, err := s.Nodes.HealthyNodes(ctx, instanceType)
	if err != nil {
		return nil, fmt.Errorf("list healthy %s nodes: %w", instanceType, err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("instance type %s: %w", instanceType, core.ErrNoTemplateNodes)
	}
	if len(scope) == 0 {
		return sortNodes(nodes), nil
	}
	var out []ports.Node
	var missing []string
	seen := map[string]bool{}
	for _, want := range scope {
		found := false
		for _, n := range nodes {
			if core.NamesNode(want, n.ID, n.IP) {
				found = true
				if !seen[n.ID] {
					seen[n.ID] = true
					out = append(out, n)
				}
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		missing = slices.Compact(missing)
		return nil, fmt.Errorf("target nodes are not healthy or not found: %s: %w", strings.Join(missing, ","), core.ErrNoTemplateNodes)
	}
	return sortNodes(out), nil
}

func sortNodes(ns []ports.Node) []ports.Node {
	out := slices.Clone(ns)
	slices.SortFunc(out, func(a, b ports.Node) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// resolveTargets is resolveNodes for a resume: a node of the scope the
// directory knows but does not list as healthy (down before the build, or
// gone down since the job was submitted) is returned in down instead of
// being skipped or failing the job, so the other nodes still get the
// template, the down node's replica is recorded FAILED (it counts as
// expected, and gets the template when it is back), and the job says so.
// With no scope, the scope is every listed node of the instance type.
// Unknown entries and no healthy node at all fail as in resolveNodes.
func (s *Service) resolveTargets(ctx context.Context, instanceType string, scope core.NodeScope) (healthy, down []ports.Node, err error) {
	healthy, err = s.resolveNodes(ctx, instanceType, scope)
	if instanceType == "" {
		instanceType = core.DefaultInstanceType
	}
	if len(scope) == 0 {
		if err != nil && !errors.Is(err, core.ErrNoTemplateNodes) {
			return nil, nil, err
		}
		all, lerr := s.Nodes.Nodes(ctx, instanceType)
		if lerr != nil {
			return nil, nil, fmt.Errorf("list %s nodes: %w", instanceType, lerr)
		}
		for _, n := range all {
			if !slices.ContainsFunc(healthy, func(h ports.Node) bool { return h.ID == n.ID }) {
				down = append(down, n)
			}
		}
		if len(healthy) == 0 && len(down) > 0 {
			return nil, nil, fmt.Errorf("no %s node is healthy (down: %s): %w", instanceType, nodeIDs(down), core.ErrNoTemplateNodes)
		}
		return healthy, sortNodes(down), err
	}
	if err == nil {
		return healthy, nil, nil
	}
	up, herr := s.Nodes.HealthyNodes(ctx, instanceType)
	if herr != nil {
		return nil, nil, fmt.Errorf("list healthy %s nodes: %w", instanceType, herr)
	}
	seen := map[string]bool{}
	var missing []string
	for _, want := range scope {
		if i := slices.IndexFunc(up, func(n ports.Node) bool { return core.NamesNode(want, n.ID, n.IP) }); i >= 0 {
			if !seen[up[i].ID] {
				seen[up[i].ID] = true
				healthy = append(healthy, up[i])
			}
			continue
		}
		n, gerr := s.Nodes.Get(ctx, want)
		switch {
		case gerr == nil:
			if !seen[n.ID] {
				seen[n.ID] = true
				down = append(down, n)
			}
		case isNotFound(gerr):
			missing = append(missing, want)
		default:
			return nil, nil, fmt.Errorf("node %s: %w", want, gerr)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		missing = slices.Compact(missing)
		return nil, nil, fmt.Errorf("target nodes are not healthy or not found: %s: %w", strings.Join(missing, ","), core.ErrNoTemplateNodes)
	}
	if len(healthy) == 0 {
		return nil, nil, fmt.Errorf("no target node is healthy (down: %s): %w", nodeIDs(down), core.ErrNoTemplateNodes)
	}
	return sortNodes(healthy), sortNodes(down), nil
}

func nodeIDs(ns []ports.Node) string {
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	return strings.Join(ids, ",")
}
