package control

import (
	"context"
	"fmt"
	"sync"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// distribute sends the artifact to every target in parallel. Each node gets
// a placement row before the call (so cleanup can always find a copy, even
// one whose answer was lost), then a DISTRIBUTED replica row, or a FAILED
// one when the call failed. It
// returns the nodes that have the artifact and the errors, in node order.
func (s *Service) distribute(ctx context.Context, p *pipeline, ref core.NodeArtifact) ([]ports.Node, []string) {
	// A node where another template's replica uses this artifact keeps its
	// copy: destroying it would break that template there.
	shared := map[string]bool{}
	if p.destroyFirst {
		users, err := s.Store.Templates().ListReplicasByArtifact(ctx, ref.ArtifactID)
		if err != nil {
			users = nil
			p.destroyFirst = false // cannot tell: do not destroy anything
		}
		for _, r := range users {
			if r.TemplateID != p.job.TemplateID {
				shared[r.NodeID] = true
			}
		}
	}
	ok := make([]bool, len(p.targets))
	errs := make([]string, len(p.targets))
	var mu sync.Mutex
	ready, failed := 0, 0
	total := len(p.targets) + len(p.down)
	fanOut(len(p.targets), s.cfg().DistributionWorkers, func(i int) {
		n := p.targets[i]
		// The node's row says the copy is under way, so a watcher can name
		// the nodes it still waits for.
		s.markReplica(ctx, p, n, core.ReplicaPhaseDistributing)
		err := s.distributeOne(ctx, n, ref, p.destroyFirst && !shared[n.ID])
		rep := s.replica(p, n)
		if err != nil {
			// Node errors may quote the download URL; the token must not
			// end up in job or replica messages the API shows.
			msg := redact(err.Error(), ref.Token)
			errs[i] = fmt.Sprintf("node %s: %s", n.ID, msg)
			rep.Status, rep.Phase = core.ReplicaFailed, core.ReplicaPhaseFailed
			rep.LastErrorPhase, rep.CleanupRequired, rep.ErrorMessage = string(core.PhaseDistributing), true, msg
		} else {
			ok[i] = true
			// upstream quirk kept: DISTRIBUTED counts as not ready until
			// the snapshot succeeds.
			rep.Status, rep.Phase = core.ReplicaFailed, core.ReplicaPhaseDistributed
		}
		if uerr := s.upsertReplica(ctx, p.job.JobID, rep); uerr != nil {
			s.log().Warn("replica not recorded", "template", p.job.TemplateID, "node", n.ID, "err", uerr)
		}
		mu.Lock()
		if err != nil {
			failed++
		} else {
			ready++
		}
		r, f := ready, failed
		mu.Unlock()
		// The counters double as the job's heartbeat during long copies.
		prog := progressDistributing + (progressDefining-progressDistributing)*(r+f)/max(total, 1)
		if _, _, herr := s.Report(ctx, p.job.JobID, core.JobUpdate{ReadyNodeCount: &r, FailedNodeCount: &f, Progress: &prog}); herr != nil {
			s.log().Debug("distribution counters not written", "job", p.job.JobID, "err", herr)
		}
	})
	var got []ports.Node
	var out []string
	for i, n := range p.targets {
		if ok[i] {
			got = append(got, n)
		} else {
			out = append(out, errs[i])
		}
	}
	return got, out
}

func (s *Service) distributeOne(ctx context.Context, n ports.Node, art core.NodeArtifact, destroyFirst bool) error {
	if destroyFirst {
		if err := s.nodes().DestroyImage(ctx, n, art.ArtifactID); err != nil {
			return fmt.Errorf("remove old copy before redistributing: %w", err)
		}
	}
	// The placement is recorded before the call, as an intent: a node may
	// store the bytes and lose the answer, and cleanup must still find the
	// copy (destroying one that is not there is harmless).
	if err := s.Store.Placements().Add(ctx, core.Placement{ArtifactID: art.ArtifactID, NodeID: n.ID, NodeIP: n.IP, CreatedAt: s.now()}); err != nil {
		return fmt.Errorf("record placement: %w", err)
	}
	return s.nodes().CreateImage(ctx, n, art)
}

// markReplica records that node n's step of this run is under way: the
// row is FAILED (a replica is READY only once its snapshot is) with the
// step's phase and no error until the step's outcome replaces it, and the
// view shows it by its phase, so a watcher can tell the nodes it still
// waits for. A READY row is left alone: sandboxes keep using its old
// snapshot until the new one replaces it.
func (s *Service) markReplica(ctx context.Context, p *pipeline, n ports.Node, phase core.ReplicaPhase) {
	s.log().Info("node step started", "job", p.job.JobID, "node", n.ID, "step", phase)
	if prev := p.previous[n.ID]; prev != nil && prev.Status == core.ReplicaReady {
		return
	}
	rep := s.replica(p, n)
	rep.Status, rep.Phase = core.ReplicaFailed, phase
	if err := s.Store.Templates().UpsertReplica(ctx, rep); err != nil {
		s.log().Warn("replica not recorded", "template", p.job.TemplateID, "node", n.ID, "err", err)
	}
}

// replica is the row of node n for this run. It keeps the previous
// snapshot path until a new snapshot replaces it, so cleanup can always
// locate what the node holds.
func (s *Service) replica(p *pipeline, n ports.Node) *core.Replica {
	r := &core.Replica{
		TemplateID:   p.job.TemplateID,
		NodeID:       n.ID,
		NodeIP:       n.IP,
		InstanceType: p.job.InstanceType,
		Spec:         p.spec,
		ArtifactID:   p.artifact.ArtifactID,
		LastJobID:    p.job.JobID,
	}
	// The versions describe the snapshot the node holds, so they travel
	// with its path until a new snapshot replaces both.
	if prev := p.previous[n.ID]; prev != nil {
		r.SnapshotPath = prev.SnapshotPath
		r.GuestImageVersion, r.AgentVersion, r.KernelVersion, r.ShimVersion = prev.GuestImageVersion, prev.AgentVersion, prev.KernelVersion, prev.ShimVersion
		r.CompatStatus, r.CompatCheckedUnix = prev.CompatStatus, prev.CompatCheckedUnix
	}
	return r
}

// recordDown writes a FAILED replica for every target that went down after
// the job was submitted and returns their errors. Nothing was sent to them,
// so there is nothing to clean up.
func (s *Service) recordDown(ctx context.Context, p *pipeline) []string {
	var errs []string
	for _, n := range p.down {
		msg := fmt.Sprintf("node %s is not healthy; it gets the template when it is back", n.ID)
		rep := s.replica(p, n)
		rep.Status, rep.Phase = core.ReplicaFailed, core.ReplicaPhaseFailed
		rep.LastErrorPhase, rep.ErrorMessage = string(core.PhaseDistributing), msg
		if err := s.upsertReplica(ctx, p.job.JobID, rep); err != nil {
			s.log().Warn("replica not recorded", "template", p.job.TemplateID, "node", n.ID, "err", err)
		}
		errs = append(errs, msg)
	}
	return errs
}
