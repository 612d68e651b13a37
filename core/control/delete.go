package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/liveness"
	"github.com/cubesandbox/templatecenter/ports"
)

// Delete removes a template (DELETE /cube/template; seed 001 §9.5, upstream
// §5.1 [newer]):
//
//  1. An active or BUILT job refuses the delete (*core.ActiveJobError)
//     while it is alive: updated within Config.StaleAfter, or its resume
//     holds the artifact's lock. A stuck job (older, lock free) is failed
//     first with a guarded update, so delete works on stuck templates.
//     This runs before the template's lock is taken; under it, a job
//     still active (or submitted since) refuses the delete.
//  2. Every replica's node drops the template (CleanupTemplate; missing is
//     fine, a node the directory no longer knows is skipped). Any other
//     error aborts and leaves all rows, so the delete can be retried.
//  3. The replicas, the definition, all jobs and the names of the template
//     go, in one transaction that first checks no job was added meanwhile.
//  4. Every artifact the template used goes through the reference-counted
//     three-phase cleanup: an artifact another template still uses is kept
//     (its GC deadline renewed); otherwise node copies are destroyed and
//     the data plane deletes the bytes and the row. A node copy that
//     cannot be destroyed leaves the artifact CLEANUP_PENDING for GC,
//     without failing the delete.
//
// Steps 2-3 run under the template's lock and stop as soon as it is lost
// (an error wrapping core.ErrConflict, nothing more written): another
// master may hold it by then and be redoing the template. Step 4 runs
// after the template's lock is released, each artifact under its own
// lock, so a delete never holds two locks (each pins a connection of a
// bounded pool) and never waits for one while holding another.
//
// instanceType is used for nothing but logging when the template's rows
// name one. core.ErrNotFound when the template has no rows at all.
func (s *Service) Delete(ctx context.Context, templateID, instanceType string) error {
	if err := core.ValidateTemplateID(templateID); err != nil {
		return err
	}
	// 1. Stuck jobs are failed before the template's lock is taken: telling
	// a stuck resume from a live one takes the artifact's lock, and a
	// delete never holds two locks. Their writes are compare-and-set.
	jobList, err := s.Store.Jobs().ListByTemplate(ctx, templateID)
	if err != nil {
		return err
	}
	for _, j := range jobList {
		if j.Status.Unfinished() {
			if err := s.abandonStale(ctx, j); err != nil {
				return err
			}
		}
	}
	// A synchronous create of the same template finishes first.
	hctx, lock, done, err := s.holdTemplate(ctx, templateID)
	if err != nil {
		return fmt.Errorf("delete template %s: %w", templateID, err)
	}
	aids, jobIDs, instanceType, err := s.deleteRows(hctx, lock, templateID, instanceType)
	done()
	if err != nil {
		return err
	}

	// 4. Artifacts.
	for _, aid := range aids {
		if _, err := s.cleanupArtifact(ctx, aid, "", false); err != nil {
			// The template is gone; what is left of the artifact is GC's.
			s.log().Warn("artifact of a deleted template not cleaned up; GC collects it", "template", templateID, "artifact", aid, "err", err)
		}
	}
	for _, id := range jobIDs {
		s.dropProgress(ctx, id)
	}
	s.log().Info("template deleted", "template", templateID, "instance_type", instanceType, "artifacts", len(aids))
	return nil
}

// deleteRows is steps 2-3 of Delete under the template's lock (ctx is
// cancelled once it is lost); it returns the artifacts and jobs the
// template had.
func (s *Service) deleteRows(ctx context.Context, lock ports.Lock, templateID, instanceType string) (aids, jobIDs []string, _ string, _ error) {
	tpl := s.Store.Templates()
	def, err := tpl.GetDefinition(ctx, templateID)
	if err != nil && !isNotFound(err) {
		return nil, nil, "", err
	}
	replicas, err := tpl.ListReplicas(ctx, templateID)
	if err != nil {
		return nil, nil, "", err
	}
	jobList, err := s.Store.Jobs().ListByTemplate(ctx, templateID)
	if err != nil {
		return nil, nil, "", err
	}
	if def == nil && len(replicas) == 0 && len(jobList) == 0 {
		// Names a submit claimed before its job could be written.
		if _, err := s.Store.Names().Release(ctx, templateID, ""); err != nil {
			return nil, nil, "", err
		}
		return nil, nil, "", fmt.Errorf("template %s: %w", templateID, core.ErrNotFound)
	}
	for _, j := range jobList {
		if j.Status.Active() || j.Status == core.JobBuilt {
			// Alive (step 1 failed the stuck ones), or submitted since.
			return nil, nil, "", &core.ActiveJobError{TemplateID: j.TemplateID, JobID: j.JobID, Status: j.Status}
		}
	}
	if def != nil {
		instanceType = firstString(instanceType, def.InstanceType)
	}
	if len(jobList) > 0 {
		instanceType = firstString(instanceType, jobList[len(jobList)-1].InstanceType)
	}
	instanceType = firstString(instanceType, core.DefaultInstanceType)

	// 2. Node templates.
	errs := make([]error, len(replicas))
	fanOut(len(replicas), s.cfg().DistributionWorkers, func(i int) { errs[i] = s.cleanupReplica(ctx, replicas[i]) })
	if err := errors.Join(errs...); err != nil {
		if lockLost(ctx) {
			err = errLockLost
		}
		return nil, nil, "", fmt.Errorf("delete template %s: %w", templateID, err)
	}

	set := map[string]bool{}
	if def != nil && def.RootfsArtifactID != "" {
		set[def.RootfsArtifactID] = true
	}
	for _, r := range replicas {
		if r.ArtifactID != "" {
			set[r.ArtifactID] = true
		}
	}
	seen := map[string]bool{}
	for _, j := range jobList {
		seen[j.JobID] = true
		jobIDs = append(jobIDs, j.JobID)
		if j.ArtifactID != "" {
			set[j.ArtifactID] = true
		}
	}

	// 3. Rows, only while the lock still keeps everyone else out, and only
	// the jobs this delete looked at: a job added since (another master's
	// redo, after this one's lock was lost unnoticed) stops it.
	if err := stillHeld(ctx, lock); err != nil {
		return nil, nil, "", fmt.Errorf("delete template %s: %w", templateID, err)
	}
	err = s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		now, err := r.Jobs().ListByTemplate(ctx, templateID)
		if err != nil {
			return err
		}
		for _, j := range now {
			if !seen[j.JobID] {
				return fmt.Errorf("job %s was submitted while the template was being deleted; nothing was deleted, retry: %w", j.JobID, core.ErrConflict)
			}
		}
		if _, err := r.Templates().DeleteReplicas(ctx, templateID); err != nil {
			return err
		}
		if err := r.Templates().DeleteDefinition(ctx, templateID); err != nil {
			return err
		}
		if _, err := r.Jobs().DeleteByTemplate(ctx, templateID); err != nil {
			return err
		}
		_, err = r.Names().Release(ctx, templateID, "")
		return err
	})
	if err != nil {
		if lockLost(ctx) {
			err = errLockLost
		}
		return nil, nil, "", fmt.Errorf("delete template %s: %w", templateID, err)
	}
	return sortedKeys(set), jobIDs, instanceType, nil
}

// errJobMoved: the job changed while delete tried to fail it, so it is alive.
var errJobMoved = errors.New("job moved")

// abandonStale fails an active or BUILT job that shows no sign of life, or
// returns *core.ActiveJobError if it does.
func (s *Service) abandonStale(ctx context.Context, j *core.Job) error {
	busy := &core.ActiveJobError{TemplateID: j.TemplateID, JobID: j.JobID, Status: j.Status}
	if liveness.BuildPhase(j) {
		// A build is judged by its data plane's liveness: freed at once
		// when the process that ran it is gone.
		if s.freeAbandoned(ctx, j) {
			return nil
		}
		return busy
	}
	age := s.storeNow(ctx).Sub(j.UpdatedAt)
	if age < s.cfg().StaleAfter {
		return busy
	}
	if j.ArtifactID != "" && (j.Status == core.JobBuilt || j.Phase.PostBuild()) {
		// A running resume holds the artifact's lock (and may be in a long
		// node RPC that writes nothing).
		l, err := s.Locker.TryLock(ctx, resumeLockName(j.ArtifactID))
		if errors.Is(err, core.ErrLocked) {
			return busy
		}
		if err != nil {
			return err
		}
		defer s.unlock(ctx, l)
	}
	msg := fmt.Sprintf("abandoned: no progress for %s; failed by template delete", age.Round(time.Second))
	_, err := s.Store.Jobs().Update(ctx, j.JobID, func(cur *core.Job) error {
		if cur.Status != j.Status || !cur.UpdatedAt.Equal(j.UpdatedAt) {
			return errJobMoved
		}
		return cur.Apply(core.Fail(cur.Phase, msg))
	})
	switch {
	case errors.Is(err, errJobMoved), errors.Is(err, core.ErrStaleUpdate):
		return busy
	case err != nil:
		return fmt.Errorf("fail stale job %s: %w", j.JobID, err)
	}
	s.log().Warn("stale job failed by delete", "job", j.JobID, "template", j.TemplateID, "status", j.Status, "age", age)
	return nil
}

// cleanupArtifact runs the three-phase, reference-counted cleanup of one
// artifact, not counting excludeTemplate's rows (the template being
// deleted; "" for GC). It holds the artifact's lock throughout so that no
// resume distributes the artifact while its copies are destroyed; with try
// it skips (false, nil) when the lock is held. done reports that phase 3
// ran and the data plane was asked to delete the bytes.
//
//   - Phase 1 (one transaction, artifact row locked): drop
//     excludeTemplate's replica bindings to the artifact and count the
//     references left. Some left: renew gc_deadline, undo CLEANUP_PENDING,
//     stop. None: mark CLEANUP_PENDING and read the placements.
//   - Phase 2 (no row lock, idempotent): DestroyImage on every placement
//     node. Any failure stops here; the row stays CLEANUP_PENDING for GC.
//   - Phase 3 (one transaction): recount; still none and still
//     CLEANUP_PENDING: delete the placement rows. References came back
//     (a job bound it during phase 2): the row goes back to READY but the
//     placement rows still go, since phase 2 destroyed those copies. After the commit ask the
//     data plane to delete the bytes and the row (only it does that); a
//     failure is logged and left to GC and the data plane's backstop.
func (s *Service) cleanupArtifact(ctx context.Context, aid, excludeTemplate string, try bool) (done bool, err error) {
	var lock ports.Lock
	if try {
		lock, err = s.Locker.TryLock(ctx, resumeLockName(aid))
		if errors.Is(err, core.ErrLocked) {
			return false, nil
		}
	} else {
		lock, err = s.Locker.Lock(ctx, resumeLockName(aid))
	}
	if err != nil {
		return false, fmt.Errorf("artifact %s: %w", aid, err)
	}
	defer s.unlock(ctx, lock)
	ctx, release := whileHeld(ctx, lock)
	defer release()

	deadline := s.gcDeadline(ctx)
	// Phase 1.
	var kept, skip, gone bool
	var placements []core.Placement
	err = s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		kept, skip, gone, placements = false, false, false, nil
		if excludeTemplate != "" {
			reps, err := r.Templates().ListReplicas(ctx, excludeTemplate)
			if err != nil {
				return err
			}
			var nodes []string
			for _, rep := range reps {
				if rep.ArtifactID == aid {
					nodes = append(nodes, rep.NodeID)
				}
			}
			if len(nodes) > 0 {
				if _, err := r.Templates().DeleteReplicas(ctx, excludeTemplate, nodes...); err != nil {
					return err
				}
			}
		}
		_, err := r.Artifacts().Update(ctx, aid, func(a *core.Artifact) error {
			n, err := r.Artifacts().CountReferences(ctx, aid, excludeTemplate)
			if err != nil {
				return err
			}
			if n > 0 {
				kept = true
				a.GCDeadline = deadline
				if a.Status == core.ArtifactCleanupPending {
					a.Status = core.ArtifactReady
				}
				return nil
			}
			switch a.Status {
			case core.ArtifactBuilding, core.ArtifactDeleting:
				// The data plane is writing or already deleting it.
				skip = true
				return nil
			}
			return a.MoveTo(core.ArtifactCleanupPending)
		})
		if isNotFound(err) {
			gone = true
			return nil
		}
		if err != nil {
			return err
		}
		if !kept && !skip {
			placements, err = r.Placements().List(ctx, aid)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("artifact %s cleanup phase 1: %w", aid, err)
	}
	if gone || kept || skip {
		s.log().Debug("artifact kept", "artifact", aid, "gone", gone, "referenced", kept, "busy", skip)
		return false, nil
	}

	// Phase 2.
	var mu sync.Mutex
	var failures []string
	fanOut(len(placements), s.cfg().DistributionWorkers, func(i int) {
		p := placements[i]
		err := s.destroyCopy(ctx, p, aid)
		if err != nil {
			mu.Lock()
			failures = append(failures, err.Error())
			mu.Unlock()
		}
	})
	if len(failures) > 0 {
		slices.Sort(failures)
		s.log().Warn("artifact copies not all destroyed; left CLEANUP_PENDING for GC", "artifact", aid, "errors", strings.Join(failures, "; "))
		return false, nil
	}

	// Phase 3.
	del, revived := false, false
	err = s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		del, revived = false, false
		_, err := r.Artifacts().Update(ctx, aid, func(a *core.Artifact) error {
			n, err := r.Artifacts().CountReferences(ctx, aid, excludeTemplate)
			if err != nil {
				return err
			}
			if n > 0 {
				// Someone started using it during phase 2: keep the row;
				// nodes download it again when they need it.
				revived = true
				a.GCDeadline = deadline
				if a.Status == core.ArtifactCleanupPending {
					a.Status = core.ArtifactReady
				}
				return nil
			}
			del = a.Status == core.ArtifactCleanupPending
			return nil
		})
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		// Deleted: no copy is left. Revived: phase 2 destroyed every listed
		// copy (any failure stopped before phase 3) and no resume could add
		// one while we hold the lock, so the placements are all stale; with
		// them gone the next resume distributes the artifact again.
		if del || revived {
			_, err = r.Placements().Delete(ctx, aid)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("artifact %s cleanup phase 3: %w", aid, err)
	}
	if revived {
		s.log().Info("artifact referenced again during cleanup; kept, destroyed copies forgotten", "artifact", aid, "copies", len(placements))
	}
	if !del {
		return false, nil
	}
	if err := s.DataPlane.DeleteArtifact(ctx, aid); err != nil {
		s.log().Warn("data plane did not delete the artifact; GC retries", "artifact", aid, "err", err)
	}
	s.log().Info("artifact cleaned up", "artifact", aid, "copies", len(placements))
	return true, nil
}

// destroyCopy removes the artifact from one placement node. A node the
// directory no longer knows is gone with its copy.
func (s *Service) destroyCopy(ctx context.Context, p core.Placement, aid string) error {
	n, err := s.Nodes.Get(ctx, p.NodeID)
	if isNotFound(err) {
		s.log().Info("placement node is gone; nothing to destroy", "artifact", aid, "node", p.NodeID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", p.NodeID, err)
	}
	if err := s.nodes().DestroyImage(ctx, n, aid); err != nil {
		return fmt.Errorf("destroy %s on node %s: %w", aid, p.NodeID, err)
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
