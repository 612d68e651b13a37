package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Warmer pre-pulls an artifact onto every healthy node of an instance type,
// so that the first sandbox on a node does not wait for the download. It
// depends only on ports, which is what makes it testable with mocks.
type Warmer struct {
	Nodes ports.NodeDirectory
	Agent ports.NodeAgent
}

// Warm asks each healthy node of instanceType to pull artifactID and returns
// the ids of the nodes that did. A node that fails does not stop the others;
// the error then names every failed node. No healthy node at all is
// core.ErrNoTemplateNodes. Cancelling ctx stops before the next node.
func (w *Warmer) Warm(ctx context.Context, instanceType, artifactID string) (warmed []string, err error) {
	nodes, err := w.Nodes.HealthyNodes(ctx, instanceType)
	if err != nil {
		return nil, fmt.Errorf("list %s nodes: %w", instanceType, err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("warm %s on %s nodes: %w", artifactID, instanceType, core.ErrNoTemplateNodes)
	}
	art := core.NodeArtifact{ArtifactID: artifactID, InstanceType: instanceType}
	var errs []error
	for _, n := range nodes {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("warm %s: stopped before node %s: %w", artifactID, n.ID, err))
			break
		}
		if err := w.Agent.CreateImage(ctx, n, art); err != nil {
			errs = append(errs, fmt.Errorf("warm %s on node %s: %w", artifactID, n.ID, err))
			continue
		}
		warmed = append(warmed, n.ID)
	}
	return warmed, errors.Join(errs...)
}
