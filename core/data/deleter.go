package data

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// deletable are the statuses the deleter may claim. READY, PENDING and
// BUILDING rows are never deleted here: the control plane first moves a
// row to CLEANUP_PENDING once nothing references it.
var deletable = []core.ArtifactStatus{core.ArtifactCleanupPending, core.ArtifactDeleting, core.ArtifactFailed}

// Deleter removes an artifact's bytes and row on the data plane
// (POST /tc/api/v1/artifact/delete and the reconciler's backstop).
type Deleter struct {
	Store     ports.Store
	Artifacts ports.ArtifactStore
	// Chunks, when set, holds the artifacts' chunk indexes: an index goes
	// with its artifact's bytes, and ChunkGC (when set) is asked to
	// collect the chunks no index names any more.
	Chunks  ports.ChunkStore
	ChunkGC *ChunkCollector
}

// errNotDeletable aborts the claim of a row in a status that is not ours
// to delete.
var errNotDeletable = errors.New("artifact is not deletable")

// Delete claims the row (CLEANUP_PENDING, DELETING or FAILED -> DELETING),
// deletes the object from the artifact store, then deletes the row. It is
// idempotent: a missing row, or a row in another status (READY again,
// being rebuilt), is success with nothing done. If the bytes cannot be
// deleted, the row goes back to CLEANUP_PENDING with last_error (so the
// backstop retries) and the error is returned.
func (d *Deleter) Delete(ctx context.Context, artifactID string) error {
	if artifactID == "" {
		return &core.FieldError{Field: "artifact_id", Reason: "is required"}
	}
	a, err := d.Store.Artifacts().Update(ctx, artifactID, func(a *core.Artifact) error {
		if !slices.Contains(deletable, a.Status) {
			return fmt.Errorf("artifact %s is %s: %w", a.ArtifactID, a.Status, errNotDeletable)
		}
		return a.MoveTo(core.ArtifactDeleting)
	})
	switch {
	case errors.Is(err, core.ErrNotFound), errors.Is(err, errNotDeletable):
		return nil
	case err != nil:
		return fmt.Errorf("claim artifact %s for deletion: %w", artifactID, err)
	}

	key := core.ObjectKeyOf(a)
	derr := d.Artifacts.Delete(ctx, key)
	if d.Chunks != nil && derr == nil {
		if derr = d.Chunks.Delete(ctx, key); derr == nil {
			d.ChunkGC.Kick()
		}
	}
	if derr != nil {
		msg := fmt.Sprintf("delete %s from the %s store: %v", key, d.Artifacts.Backend(), derr)
		uctx := context.WithoutCancel(ctx)
		if _, err := d.Store.Artifacts().Update(uctx, artifactID, func(a *core.Artifact) error {
			if a.Status != core.ArtifactDeleting {
				return errNotDeletable
			}
			a.LastError = msg
			return a.MoveTo(core.ArtifactCleanupPending)
		}); err != nil && !errors.Is(err, errNotDeletable) && !errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("artifact %s: %s; and putting the row back to CLEANUP_PENDING failed: %w", artifactID, msg, err)
		}
		return fmt.Errorf("artifact %s: %s: %w", artifactID, msg, derr)
	}
	if err := d.Store.Artifacts().Delete(ctx, artifactID); err != nil {
		return fmt.Errorf("delete artifact row %s: %w", artifactID, err)
	}
	return nil
}
