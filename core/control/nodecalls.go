package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ErrNodeDown is the cause of a node call cancelled because the node
// failed a health check while the call ran.
var ErrNodeDown = errors.New("stopped answering its health check")

// nodes is the node agent as the control plane calls it: every call to a
// node that is healthy when it starts is cancelled once the node fails a
// health check (ports.NodeDirectory.Down), so a hung node (a stopped
// process, a host that stopped answering) costs a job a probe interval,
// not the call's whole timeout. A call to a node already down is made as
// before (cleanup reaches nodes as soon as they answer again).
func (s *Service) nodes() ports.NodeAgent { return guardedAgent{s.Agent, s.Nodes} }

type guardedAgent struct {
	agent ports.NodeAgent
	dir   ports.NodeDirectory
}

// call runs fn with a context cancelled when n goes down.
func (g guardedAgent) call(ctx context.Context, n ports.Node, fn func(ctx context.Context) error) error {
	down := g.dir.Down(n.ID)
	select {
	case <-down:
		return fn(ctx)
	default:
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-down:
			cancel(ErrNodeDown)
		case <-stop:
		}
	}()
	err := fn(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrNodeDown) {
		return fmt.Errorf("%w; the call was cancelled", ErrNodeDown)
	}
	return err
}

func (g guardedAgent) CreateImage(ctx context.Context, n ports.Node, art core.NodeArtifact) error {
	return g.call(ctx, n, func(ctx context.Context) error { return g.agent.CreateImage(ctx, n, art) })
}

func (g guardedAgent) DestroyImage(ctx context.Context, n ports.Node, image string) error {
	return g.call(ctx, n, func(ctx context.Context) error { return g.agent.DestroyImage(ctx, n, image) })
}

func (g guardedAgent) AppSnapshot(ctx context.Context, n ports.Node, req *core.SandboxRequest, dir string) (ports.SnapshotResult, error) {
	var res ports.SnapshotResult
	err := g.call(ctx, n, func(ctx context.Context) error {
		var err error
		res, err = g.agent.AppSnapshot(ctx, n, req, dir)
		return err
	})
	return res, err
}

func (g guardedAgent) CleanupTemplate(ctx context.Context, n ports.Node, templateID, snapshotPath string) error {
	return g.call(ctx, n, func(ctx context.Context) error { return g.agent.CleanupTemplate(ctx, n, templateID, snapshotPath) })
}
