package control

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ensureDefinition writes the definition if missing, or points an existing
// one at this artifact and stored request. An alias from the request that
// is taken by another template is not applied; the returned note says so
// (it ends up in the job's message and the definition's last error).
//
// A redo leaves an existing definition's alias alone: since the create the
// alias is the user's (SetAlias may have changed or cleared it, releasing
// the name), and the stored request it works from still names the
// create's.
func (s *Service) ensureDefinition(ctx context.Context, p *pipeline) (aliasNote string, err error) {
	tpl := s.Store.Templates()
	tid := p.job.TemplateID
	alias := p.req.Alias
	if p.redo && alias != "" {
		if _, err := tpl.GetDefinition(ctx, tid); err == nil {
			alias = ""
		} else if !isNotFound(err) {
			return "", err
		}
	}
	note := func(holder string) string {
		return fmt.Sprintf("alias %q not applied: already used by template %s", alias, holder)
	}
	if alias != "" {
		if holder, err := tpl.GetDefinitionByAlias(ctx, alias); err == nil && holder.TemplateID != tid {
			aliasNote, alias = note(holder.TemplateID), ""
		} else if err != nil && !isNotFound(err) {
			return "", err
		}
	}
	// The definition is written only for the run that holds the job
	// (fenced), like everything the run publishes.
	write := func(fn func(ctx context.Context, t ports.TemplateRepository) error) error {
		return s.fenced(ctx, p.job.JobID, func(ctx context.Context, r ports.Repos) error { return fn(ctx, r.Templates()) })
	}
	for range 3 {
		err := write(func(ctx context.Context, t ports.TemplateRepository) error {
			_, err := t.UpdateDefinition(ctx, tid, func(d *core.Definition) error {
				d.InstanceType = p.job.InstanceType
				d.Version = core.DefaultTemplateVersion
				d.Status = core.TemplatePending
				d.RequestJSON = p.stored
				d.RootfsArtifactID = p.artifact.ArtifactID
				if alias != "" && d.Alias == "" && !p.redo {
					d.Alias = alias
				}
				return nil
			})
			return err
		})
		if err == nil {
			return aliasNote, nil
		}
		if errors.Is(err, core.ErrConflict) && alias != "" {
			aliasNote, alias = note(s.aliasHolder(ctx, alias)), ""
			continue
		}
		if !isNotFound(err) {
			return "", fmt.Errorf("update template %s: %w", tid, err)
		}
		def := &core.Definition{
			TemplateID:       tid,
			InstanceType:     p.job.InstanceType,
			Version:          core.DefaultTemplateVersion,
			Status:           core.TemplatePending,
			RequestJSON:      p.stored,
			Alias:            alias,
			RootfsArtifactID: p.artifact.ArtifactID,
		}
		err = write(func(ctx context.Context, t ports.TemplateRepository) error { return t.CreateDefinition(ctx, def) })
		if err == nil {
			return aliasNote, nil
		}
		if !errors.Is(err, core.ErrConflict) {
			return "", fmt.Errorf("create template %s: %w", tid, err)
		}
		// Either the alias was taken meanwhile or another writer created
		// the definition: find out which and go round again.
		if alias != "" {
			if h, herr := tpl.GetDefinitionByAlias(ctx, alias); herr == nil && h.TemplateID != tid {
				aliasNote, alias = note(h.TemplateID), ""
			}
		}
	}
	return "", fmt.Errorf("write template %s: kept conflicting with concurrent writers: %w", tid, core.ErrConflict)
}

// settleOtherReplicas deals with replica rows outside this run's targets,
// so that the summary over all rows means something:
//
//   - a CREATE replaces the template: rows left by earlier attempts are
//     removed after their node dropped the template (CleanupTemplate; a
//     node that is gone has nothing to clean). A row whose cleanup fails
//     stays, FAILED with cleanup_required.
//   - a REDO keeps rows that hold this artifact; a row that holds another
//     artifact (the rebuild produced a new one) no longer matches the
//     definition and is marked FAILED so the scheduler stops using it.
func (s *Service) settleOtherReplicas(ctx context.Context, p *pipeline) error {
	rows, err := s.Store.Templates().ListReplicas(ctx, p.job.TemplateID)
	if err != nil {
		return err
	}
	target := map[string]bool{}
	for _, n := range append(slices.Clone(p.targets), p.down...) {
		target[n.ID] = true
	}
	for _, r := range rows {
		if target[r.NodeID] {
			continue
		}
		if p.redo {
			if r.ArtifactID == p.artifact.ArtifactID {
				continue
			}
			r.Status, r.Phase, r.CleanupRequired = core.ReplicaFailed, core.ReplicaPhaseFailed, true
			r.ErrorMessage = fmt.Sprintf("holds artifact %s, the template now uses %s; redo this node", r.ArtifactID, p.artifact.ArtifactID)
			if err := s.upsertReplica(ctx, p.job.JobID, r); err != nil {
				return err
			}
			continue
		}
		if err := s.cleanupReplica(ctx, r); err != nil {
			r.Status, r.Phase, r.CleanupRequired = core.ReplicaFailed, core.ReplicaPhaseFailed, true
			r.ErrorMessage = "left over from an earlier attempt; cleanup failed: " + err.Error()
			if uerr := s.upsertReplica(ctx, p.job.JobID, r); uerr != nil {
				return uerr
			}
			continue
		}
		if err := s.fenced(ctx, p.job.JobID, func(ctx context.Context, repos ports.Repos) error {
			_, err := repos.Templates().DeleteReplicas(ctx, r.TemplateID, r.NodeID)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// cleanupReplica removes the template from the replica's node. A node the
// directory no longer knows has nothing left to clean.
func (s *Service) cleanupReplica(ctx context.Context, r *core.Replica) error {
	if neverOnNode(r) {
		// A node that was down for the run (or whose copy never got as
		// far as a snapshot) holds no template to remove: its row must not
		// hold a delete up until the node answers again.
		return nil
	}
	n, err := s.Nodes.Get(ctx, r.NodeID)
	if isNotFound(err) {
		s.log().Info("replica node is gone; nothing to clean", "template", r.TemplateID, "node", r.NodeID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", r.NodeID, err)
	}
	if err := s.nodes().CleanupTemplate(ctx, n, r.TemplateID, r.SnapshotPath); err != nil {
		return fmt.Errorf("cleanup template %s on node %s: %w", r.TemplateID, r.NodeID, err)
	}
	return nil
}

// neverOnNode reports whether a replica row says no template of it reached
// its node: no snapshot path, no cleanup owed, and its run never got to
// snapshot there (a node recorded down, a copy that failed or was cut
// short). The artifact copies are the placements', cleaned with the
// artifact.
func neverOnNode(r *core.Replica) bool {
	return r.SnapshotPath == "" && !r.CleanupRequired && r.Status != core.ReplicaReady && r.Phase != core.ReplicaPhaseSnapshotting
}
