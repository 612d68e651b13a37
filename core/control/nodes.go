package control

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// resolveNodes picks the healthy nodes of the instance type that match the
// scope (node ids or IPs; empty: all). Unknown entries are an error listing
// them sorted; no node at all is core.ErrNoTemplateNodes.
func (s *Service) resolveNodes(ctx context.Context, instanceType string, scope []string) ([]ports.Node, error) {
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
			if n.ID == want || (n.IP != "" && n.IP == want) {
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
