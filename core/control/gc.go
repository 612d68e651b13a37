package control

import (
	"context"
	"errors"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// GC collects orphaned artifacts (seed 001 §9.3): rows left
// CLEANUP_PENDING by an interrupted cleanup, and READY or FAILED rows whose
// gc_deadline has passed, each through the same three-phase cleanup as
// delete (a row still referenced only gets its deadline renewed). A READY
// or FAILED row without a deadline gets one, so it is collected a TTL
// later if nothing uses it. Only READY/FAILED rows last written more than
// ArtifactTTL ago are looked at (a row written since cannot be due unless
// its deadline was set shorter than ours). Artifacts whose lock is held (a
// resume or a delete at work) are skipped this pass. It returns how many
// artifacts were handed to the data plane for deletion.
func (s *Service) GC(ctx context.Context) (int, error) {
	batch := s.cfg().Batch
	// Rows carry the store's clock (updated_at) and deadlines are written
	// by it (gcDeadline): both are judged by it too.
	storeNow := s.storeNow(ctx)
	now := storeNow.Unix()
	deadline := storeNow.Add(s.cfg().ArtifactTTL).Unix()
	arts := s.Store.Artifacts()
	var cands []string
	pending, err := arts.ListByStatus(ctx, core.ArtifactCleanupPending, time.Time{}, batch)
	if err != nil {
		return 0, err
	}
	for _, a := range pending {
		cands = append(cands, a.ArtifactID)
	}
	// A row written within the last TTL cannot be due unless its deadline
	// was set shorter than ours; skipping recent rows keeps the oldest
	// (likeliest due) ones from being crowded out of the batch, at the cost
	// of collecting such a row up to one TTL late, never early.
	oldEnough := storeNow.Add(-s.cfg().ArtifactTTL)
	for _, st := range []core.ArtifactStatus{core.ArtifactReady, core.ArtifactFailed} {
		list, err := arts.ListByStatus(ctx, st, oldEnough, batch)
		if err != nil {
			return 0, err
		}
		for _, a := range list {
			switch {
			case a.GCDeadline == 0:
				if _, err := arts.Update(ctx, a.ArtifactID, func(x *core.Artifact) error {
					if x.GCDeadline == 0 {
						x.GCDeadline = deadline
					}
					return nil
				}); err != nil && !isNotFound(err) {
					return 0, err
				}
			case a.GCDeadline <= now:
				cands = append(cands, a.ArtifactID)
			}
		}
	}
	n := 0
	var errs []error
	for _, aid := range cands {
		done, err := s.cleanupArtifact(ctx, aid, "", true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if done {
			n++
		}
	}
	return n, errors.Join(errs...)
}
