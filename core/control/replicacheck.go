package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// replicaCursor is where the replica check stopped: the next pass starts
// after this template and node, so every READY replica gets its turn.
type replicaCursor struct {
	mu                 sync.Mutex
	templateID, nodeID string
}

// replicaCheckTimeout bounds one presence check: a node answers it from
// its disk (a node agent hashes the file only when its digest is missing),
// and a node that hangs must not hold the sweep up for the minutes a copy
// may take. A check that runs out changes nothing.
const replicaCheckTimeout = time.Minute

// replicaCheck is one replica a pass checks, with what the check sends.
type replicaCheck struct {
	replica *core.Replica
	node    ports.Node
	art     core.NodeArtifact
}

// CheckReplicas is one pass of the replica check: up to
// Config.ReplicaCheckAtOnce READY replicas, taken in turn by template and
// node id after those the previous pass checked, are checked on their
// healthy nodes with what the node protocol offers: a CreateImage with the
// artifact's sha256 and size and no download URL, which a node answers
// from its own copy and which never downloads (ports.NodeAgent). A node
// that answers it does not hold the artifact (core.ErrNotFound) gets its
// replica marked FAILED (markGone), which convergence, next in the sweep,
// redoes on that node; any other outcome (an unreachable node, a timeout,
// a check cancelled because its node failed a health probe meanwhile:
// nodecalls.go) changes nothing. So a replica whose file went away (a DestroyImage from
// someone else, a wiped disk) is reported READY for at most one pass after
// its turn. It returns the replicas it marked.
func (s *Service) CheckReplicas(ctx context.Context) ([]*core.Replica, error) {
	if s.cfg().ReplicaCheckDisabled {
		return nil, nil
	}
	checks, err := s.replicasToCheck(ctx)
	if err != nil || len(checks) == 0 {
		return nil, err
	}
	gone := make([]error, len(checks))
	fanOut(len(checks), s.cfg().DistributionWorkers, func(i int) {
		c := checks[i]
		cctx, cancel := context.WithTimeout(ctx, replicaCheckTimeout)
		err := s.nodes().CreateImage(cctx, c.node, c.art)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, core.ErrNotFound):
			gone[i] = err
		default:
			s.log().Debug("replica check: no answer about the artifact; the replica is left as it is",
				"template", c.replica.TemplateID, "node", c.node.ID, "artifact", c.art.ArtifactID, "err", err)
		}
	})
	var marked []*core.Replica
	var errs []error
	for i, c := range checks {
		if gone[i] == nil {
			continue
		}
		r, err := s.markGone(ctx, c.replica, gone[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("replica of %s on %s: %w", c.replica.TemplateID, c.node.ID, err))
		}
		if r != nil {
			marked = append(marked, r)
		}
	}
	return marked, errors.Join(errs...)
}

// replicasToCheck picks the pass's replicas: READY ones of READY or
// PARTIALLY_READY templates, on healthy nodes, whose artifact is READY,
// starting after the cursor and wrapping around once; the cursor moves to
// the last one taken. Templates are read one at a time until the pass is
// full, so a pass costs the database little however many there are.
func (s *Service) replicasToCheck(ctx context.Context) ([]replicaCheck, error) {
	limit := s.cfg().ReplicaCheckAtOnce
	defs, err := s.Store.Templates().ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(defs, func(a, b *core.Definition) int { return cmp.Compare(a.TemplateID, b.TemplateID) })
	s.replicaCursor.mu.Lock()
	afterT, afterN := s.replicaCursor.templateID, s.replicaCursor.nodeID
	s.replicaCursor.mu.Unlock()
	if len(defs) == 0 {
		return nil, nil
	}
	start, found := slices.BinarySearchFunc(defs, afterT, func(d *core.Definition, t string) int { return cmp.Compare(d.TemplateID, t) })
	// Visit from the cursor's template round to it again: that one twice,
	// its nodes after the cursor first and the others on the way back.
	visits := len(defs)
	if found {
		visits++
	}

	healthy := map[string]map[string]ports.Node{} // by instance type, then node id
	arts := map[string]*core.Artifact{}           // nil: not READY or unreadable
	var out []replicaCheck
	for k := 0; k < visits && len(out) < limit; k++ {
		d := defs[(start+k)%len(defs)]
		if d.Status != core.TemplateReady && d.Status != core.TemplatePartiallyReady {
			continue
		}
		rows, err := s.Store.Templates().ListReplicas(ctx, d.TemplateID)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(rows, func(a, b *core.Replica) int { return cmp.Compare(a.NodeID, b.NodeID) })
		for _, r := range rows {
			if len(out) >= limit {
				break
			}
			if found && d.TemplateID == afterT {
				// First visit: after the cursor; second: up to it.
				if after := r.NodeID > afterN; (k == 0) != after {
					continue
				}
			}
			if r.Status != core.ReplicaReady || r.CleanupRequired || r.ArtifactID == "" {
				continue
			}
			itype := firstString(r.InstanceType, d.InstanceType, core.DefaultInstanceType)
			nodes, ok := healthy[itype]
			if !ok {
				list, err := s.Nodes.HealthyNodes(ctx, itype)
				if err != nil {
					return nil, err
				}
				nodes = map[string]ports.Node{}
				for _, n := range list {
					nodes[n.ID] = n
				}
				healthy[itype] = nodes
			}
			node, ok := nodes[r.NodeID]
			if !ok {
				continue // a node that is down is convergence's business
			}
			a, ok := arts[r.ArtifactID]
			if !ok {
				a, err = s.Store.Artifacts().Get(ctx, r.ArtifactID)
				if err != nil || a.Status != core.ArtifactReady || a.Ext4SHA256 == "" {
					a = nil
				}
				arts[r.ArtifactID] = a
			}
			if a == nil {
				continue
			}
			out = append(out, replicaCheck{replica: r, node: node, art: core.NodeArtifact{
				ArtifactID: a.ArtifactID, SHA256: a.Ext4SHA256, SizeBytes: a.Ext4SizeBytes,
				WritableLayerSize: a.WritableLayerSize, Fingerprint: a.Fingerprint, InstanceType: itype,
			}})
		}
	}
	if len(out) > 0 {
		last := out[len(out)-1].replica
		s.replicaCursor.mu.Lock()
		s.replicaCursor.templateID, s.replicaCursor.nodeID = last.TemplateID, last.NodeID
		s.replicaCursor.mu.Unlock()
	}
	return out, nil
}

// markGone marks FAILED the replica whose node answered that it no longer
// holds the artifact, unless something else is at work on the template:
// it takes the template's lock and then the artifact's, at once or not at
// all, skips a template with a job at work (that job settles the row), and
// writes only a row that is still the READY one that was checked. The
// definition keeps its status: the redo convergence starts in the same
// sweep settles it from all its replicas, as for a node that was down.
// It returns the row it wrote, or nil.
func (s *Service) markGone(ctx context.Context, checked *core.Replica, answer error) (*core.Replica, error) {
	tid := checked.TemplateID
	tlock, err := s.Locker.TryLock(ctx, templateLockName(tid))
	if errors.Is(err, core.ErrLocked) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer s.unlock(ctx, tlock)
	alock, err := s.lockArtifact(ctx, checked.ArtifactID, true)
	if errors.Is(err, core.ErrLocked) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer s.unlock(ctx, alock)
	if _, err := s.Store.Jobs().GetActive(ctx, core.ActiveKeyFromImage(tid)); err == nil {
		return nil, nil
	} else if !isNotFound(err) {
		return nil, err
	}
	if latest, err := s.Store.Jobs().Latest(ctx, tid); err == nil && latest.Status == core.JobBuilt {
		return nil, nil
	}
	rows, err := s.Store.Templates().ListReplicas(ctx, tid)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(rows, func(r *core.Replica) bool { return r.NodeID == checked.NodeID })
	if i < 0 {
		return nil, nil
	}
	r := rows[i]
	if r.Status != core.ReplicaReady || r.CleanupRequired || r.ArtifactID != checked.ArtifactID {
		return nil, nil
	}
	r.Status, r.Phase = core.ReplicaFailed, core.ReplicaPhaseFailed
	// DISTRIBUTING: a redo of this node copies the artifact again before
	// it snapshots (DetermineRedoResumePhase).
	r.LastErrorPhase, r.CleanupRequired = string(core.PhaseDistributing), true
	r.ErrorMessage = fmt.Sprintf("replica check: node %s no longer holds artifact %s (%v); convergence distributes it again", r.NodeID, r.ArtifactID, answer)
	if err := s.Store.Templates().UpsertReplica(ctx, r); err != nil {
		return nil, err
	}
	s.log().Warn("replica gone from its node: marked FAILED", "template", tid, "node", r.NodeID, "artifact", r.ArtifactID)
	return r, nil
}
