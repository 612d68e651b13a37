package control

import (
	"context"
	"fmt"
	"sync"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// snapshot runs AppSnapshot on every node that has the artifact, first
// dropping a template the node may hold from an earlier run. It returns how
// many succeeded and the errors in node order.
func (s *Service) snapshot(ctx context.Context, p *pipeline, nodes []ports.Node) (int, []string) {
	okCount, done := 0, 0
	errs := make([]string, len(nodes))
	var mu sync.Mutex
	fanOut(len(nodes), s.cfg().DistributionWorkers, func(i int) {
		n := nodes[i]
		s.markReplica(ctx, p, n, core.ReplicaPhaseSnapshotting)
		rep := s.replica(p, n)
		res, err := s.snapshotOne(ctx, n, p, p.previous[n.ID])
		if err != nil {
			// The snapshot request carries the artifact URL with its
			// download token, and a node may quote it: like distribution
			// errors, the message is stored without it.
			msg := redact(redact(err.Error(), s.downloadToken(p.artifact)), p.artifact.DownloadToken)
			errs[i] = fmt.Sprintf("node %s: %s", n.ID, msg)
			rep.Status, rep.Phase = core.ReplicaFailed, core.ReplicaPhaseFailed
			rep.LastErrorPhase, rep.CleanupRequired, rep.ErrorMessage = string(core.PhaseSnapshotting), true, msg
		} else {
			rep.Status, rep.Phase, rep.SnapshotPath = core.ReplicaReady, core.ReplicaPhaseReady, res.SnapshotPath
			// A new snapshot: its versions replace the old ones and the
			// old verdict no longer applies until the next compat scan.
			rep.GuestImageVersion, rep.AgentVersion, rep.KernelVersion, rep.ShimVersion = res.GuestImageVersion, res.AgentVersion, res.KernelVersion, res.ShimVersion
			rep.CompatStatus, rep.CompatCheckedUnix = "", 0
			mu.Lock()
			okCount++
			mu.Unlock()
		}
		if uerr := s.upsertReplica(ctx, p.job.JobID, rep); uerr != nil {
			s.log().Warn("replica not recorded", "template", p.job.TemplateID, "node", n.ID, "err", uerr)
		}
		mu.Lock()
		done++
		prog := progressSnapshotting + (progressSnapshotsEnd-progressSnapshotting)*done/len(nodes)
		mu.Unlock()
		if _, _, err := s.Report(ctx, p.job.JobID, core.JobUpdate{Progress: &prog}); err != nil {
			s.log().Debug("snapshot progress not written", "job", p.job.JobID, "err", err)
		}
	})
	var out []string
	for _, e := range errs {
		if e != "" {
			out = append(out, e)
		}
	}
	return okCount, out
}

func (s *Service) snapshotOne(ctx context.Context, n ports.Node, p *pipeline, prev *core.Replica) (ports.SnapshotResult, error) {
	if prev != nil && (prev.SnapshotPath != "" || prev.Status == core.ReplicaReady) {
		if err := s.nodes().CleanupTemplate(ctx, n, p.job.TemplateID, prev.SnapshotPath); err != nil {
			return ports.SnapshotResult{}, fmt.Errorf("cleanup previous template: %w", err)
		}
	}
	return s.nodes().AppSnapshot(ctx, n, p.gen, s.cfg().SnapshotDir)
}
