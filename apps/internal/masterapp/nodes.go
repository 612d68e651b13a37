package masterapp

import (
	"context"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// meteredAgent counts every node RPC per node and result (the distribution
// counters of /metrics) without the control plane knowing about metrics. A
// CreateImage without a download URL is the replica check's presence
// check, counted as check_replica so it does not blur the copies.
type meteredAgent struct {
	ports.NodeAgent
	m *metrics.Metrics
}

func (a meteredAgent) observe(node ports.Node, op string, start time.Time, err error) {
	a.m.NodeOp(node.ID, op, err, time.Since(start))
}

func (a meteredAgent) CreateImage(ctx context.Context, node ports.Node, art core.NodeArtifact) error {
	start := time.Now()
	err := a.NodeAgent.CreateImage(ctx, node, art)
	op := "create_image"
	if art.DownloadURL == "" {
		op = "check_replica"
	}
	a.observe(node, op, start, err)
	return err
}

func (a meteredAgent) DestroyImage(ctx context.Context, node ports.Node, image string) error {
	start := time.Now()
	err := a.NodeAgent.DestroyImage(ctx, node, image)
	a.observe(node, "destroy_image", start, err)
	return err
}

func (a meteredAgent) AppSnapshot(ctx context.Context, node ports.Node, req *core.SandboxRequest, snapshotDir string) (ports.SnapshotResult, error) {
	start := time.Now()
	res, err := a.NodeAgent.AppSnapshot(ctx, node, req, snapshotDir)
	a.observe(node, "app_snapshot", start, err)
	return res, err
}

func (a meteredAgent) CleanupTemplate(ctx context.Context, node ports.Node, templateID, snapshotPath string) error {
	start := time.Now()
	err := a.NodeAgent.CleanupTemplate(ctx, node, templateID, snapshotPath)
	a.observe(node, "cleanup_template", start, err)
	return err
}
