package data

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

// reuseSignal stops the pipeline after resolution: the artifact already
// exists, READY and with its bytes in the store.
type reuseSignal struct{ artifact *core.Artifact }

func (s *reuseSignal) Error() string {
	return "artifact " + s.artifact.ArtifactID + " is already built"
}

// maxClaimRounds bounds the re-reads after a lost insert race or a row
// deleted under us.
const maxClaimRounds = 4

// afterResolve runs between resolution and the layer fetch. It takes the
// fingerprint lock; while another build holds it, it polls and reuses the
// artifact as soon as that build finished it. Under the lock it reuses a
// READY artifact whose bytes exist, or claims the row for this build.
func (r *run) afterResolve(ctx context.Context, res pipeline.Resolved) error {
	name := LockPrefix + res.Fingerprint
	for {
		lk, err := r.e.Locker.TryLock(ctx, name)
		if err == nil {
			r.mu.Lock()
			r.lock = lk
			r.mu.Unlock()
			go r.watchLock(lk)
			break
		}
		if !errors.Is(err, core.ErrLocked) {
			return fmt.Errorf("take build lock for %s: %w", res.ArtifactID, err)
		}
		if a, ok := r.reusable(ctx, res); ok {
			r.log.Info("reusing artifact built by another build", "artifact_id", a.ArtifactID)
			return &reuseSignal{a}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for build lock of %s: %w", res.ArtifactID, ctx.Err())
		case <-time.After(r.c.LockPoll):
		}
	}

	a, reuse, err := r.claim(ctx, res)
	if err != nil {
		return err
	}
	if reuse {
		r.log.Info("reusing READY artifact", "artifact_id", a.ArtifactID)
		return &reuseSignal{a}
	}
	r.mu.Lock()
	r.claimed = true
	r.st.artifactStatus = core.ArtifactBuilding
	r.mu.Unlock()
	r.wake()
	return nil
}

// watchLock stops the build when lk is lost: another replica may take the
// lock and claim the row, and this build must stop writing the row and the
// bytes (ports.Lock.Lost).
func (r *run) watchLock(lk ports.Lock) {
	select {
	case <-lk.Lost():
	case <-r.ctx.Done():
		return
	}
	r.mu.Lock()
	held := r.lock == lk // a release closes Lost too on some adapters
	if held {
		r.lockLost = true
	}
	r.mu.Unlock()
	if held {
		r.log.Error("fingerprint lock lost; stopping the build", "lock", lk.Name())
		r.abort(ErrLockLost)
	}
}

// isLockLost also looks at Lost() itself, so the check after the pipeline
// does not depend on the watcher having run yet.
func (r *run) isLockLost() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.lockLost && r.lock != nil {
		select {
		case <-r.lock.Lost():
			r.lockLost = true
		default:
		}
	}
	return r.lockLost
}

// newOwnerToken is unique to one claim of the row. It is random rather
// than from Executor.IDs: fencing must not depend on an injected generator.
func newOwnerToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// ownsRow reports whether a still carries this build's claim.
func (r *run) ownsRow(a *core.Artifact) bool {
	r.mu.Lock()
	owner := r.owner
	r.mu.Unlock()
	return a.Status == core.ArtifactBuilding && owner != "" && a.BuildOwnerToken == owner
}

// reusable is the check made while waiting for the lock; any error just
// means "not yet".
func (r *run) reusable(ctx context.Context, res pipeline.Resolved) (*core.Artifact, bool) {
	a, err := r.e.Store.Artifacts().Get(ctx, res.ArtifactID)
	if err != nil || a.Status != core.ArtifactReady || !sameSpec(a, res) {
		return nil, false
	}
	ok, err := r.bytesExist(ctx, a)
	return a, ok && err == nil
}

// sameSpec guards against an id collision; legacy rows have no fingerprint.
func sameSpec(a *core.Artifact, res pipeline.Resolved) bool {
	return a.Fingerprint == "" || a.Fingerprint == res.Fingerprint
}

// bytesExist reports whether the store holds the artifact's object, with
// the recorded size and digest when the row has them.
func (r *run) bytesExist(ctx context.Context, a *core.Artifact) (bool, error) {
	info, err := r.e.Artifacts.Stat(ctx, core.ObjectKeyOf(a))
	if errors.Is(err, core.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check bytes of artifact %s: %w", a.ArtifactID, err)
	}
	if a.Ext4SizeBytes > 0 && info.Size != a.Ext4SizeBytes {
		r.log.Warn("stored artifact has the wrong size; rebuilding", "artifact_id", a.ArtifactID, "row", a.Ext4SizeBytes, "store", info.Size)
		return false, nil
	}
	if a.Ext4SHA256 != "" && info.SHA256 != "" && !strings.EqualFold(a.Ext4SHA256, info.SHA256) {
		r.log.Warn("stored artifact has the wrong sha256; rebuilding", "artifact_id", a.ArtifactID)
		return false, nil
	}
	return true, nil
}

// claim runs under the fingerprint lock: it returns a READY row whose bytes
// exist (reuse=true), or moves the row to BUILDING for this build, creating
// it PENDING first when there is none.
func (r *run) claim(ctx context.Context, res pipeline.Resolved) (*core.Artifact, bool, error) {
	repo := r.e.Store.Artifacts()
	owner := newOwnerToken()
	for round := 0; round < maxClaimRounds; round++ {
		a, err := repo.Get(ctx, res.ArtifactID)
		switch {
		case errors.Is(err, core.ErrNotFound):
			row := &core.Artifact{
				ArtifactID:        res.ArtifactID,
				Fingerprint:       res.Fingerprint,
				SourceImageRef:    r.norm.SourceImageRef,
				SourceImageDigest: res.ImageDigest,
				WritableLayerSize: r.norm.WritableLayerSize,
				Status:            core.ArtifactPending,
			}
			if err := repo.Create(ctx, row); errors.Is(err, core.ErrConflict) {
				continue // someone inserted it first: read theirs
			} else if err != nil {
				return nil, false, fmt.Errorf("create artifact row %s: %w", res.ArtifactID, err)
			}
		case err != nil:
			return nil, false, fmt.Errorf("read artifact %s: %w", res.ArtifactID, err)
		default:
			if !sameSpec(a, res) {
				return nil, false, fmt.Errorf("artifact %s belongs to fingerprint %s, not %s: %w", a.ArtifactID, a.Fingerprint, res.Fingerprint, core.ErrConflict)
			}
			if a.Status == core.ArtifactReady {
				ok, err := r.bytesExist(ctx, a)
				if err != nil {
					return nil, false, err
				}
				if ok {
					return a, true, nil
				}
				r.log.Warn("READY artifact has no bytes in the store; rebuilding", "artifact_id", a.ArtifactID, "key", core.ObjectKeyOf(a))
			}
			if err := deletionInProgress(a); err != nil {
				return nil, false, err
			}
		}
		a, err = repo.Update(ctx, res.ArtifactID, func(a *core.Artifact) error {
			if err := deletionInProgress(a); err != nil {
				return err
			}
			if a.Fingerprint == "" {
				a.Fingerprint = res.Fingerprint
			}
			a.SourceImageRef = r.norm.SourceImageRef
			a.SourceImageDigest = res.ImageDigest
			a.WritableLayerSize = r.norm.WritableLayerSize
			a.LastError = ""
			// Fences the row: an older build that lost its lock no longer
			// matches and leaves the row alone.
			a.BuildOwnerToken = owner
			return a.MoveTo(core.ArtifactBuilding)
		})
		if errors.Is(err, core.ErrNotFound) {
			continue // deleted between the read and the claim
		}
		if err != nil {
			return nil, false, fmt.Errorf("claim artifact %s: %w", res.ArtifactID, err)
		}
		r.mu.Lock()
		r.owner = owner
		r.mu.Unlock()
		return a, false, nil
	}
	return nil, false, fmt.Errorf("claim artifact %s: the row kept changing: %w", res.ArtifactID, core.ErrConflict)
}

// deletionInProgress refuses to build over a row the control plane is
// deleting; the job fails and a later redo builds after the row is gone.
func deletionInProgress(a *core.Artifact) error {
	if a.Status == core.ArtifactCleanupPending || a.Status == core.ArtifactDeleting {
		return fmt.Errorf("artifact %s is being deleted (%s); retry once the deletion finished: %w", a.ArtifactID, a.Status, core.ErrConflict)
	}
	return nil
}

// markReady records a fresh build on the row this build claimed. The
// pipeline published the bytes before returning, so a READY row never
// points at bytes that are not there yet.
func (r *run) markReady(res *pipeline.Result) error {
	cfg := res.Image.Config.Config
	cj, err := core.ImageConfig{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User}.JSON()
	if err != nil {
		return err
	}
	key := res.ObjectKey
	if key == "" {
		return fmt.Errorf("artifact %s was not published: the pipeline has no artifact store", res.ArtifactID)
	}
	baseURL := r.req.DownloadBaseURL
	if baseURL == "" {
		baseURL = r.c.DownloadBaseURL
	}
	var token string
	if r.e.IDs != nil {
		token = core.NewDownloadSeed(r.e.IDs.NewToken()) // used only by a row that has none yet
	}
	// The builder is the one the fingerprint was computed with (the
	// artifact id includes its Format), so it is the one that wrote these
	// bytes.
	r.mu.Lock()
	var builder string
	if r.st.resolved != nil {
		builder = r.st.resolved.Inputs.Builder
	}
	r.mu.Unlock()
	// The write must land even if the build is being cancelled right now:
	// the bytes are published and the row is ours.
	ctx, cancel := r.finalCtx()
	defer cancel()
	// The deadline is the store's time: the control plane's GC judges it
	// by the store's clock, whatever this host's says.
	now := r.e.now()
	if t, err := r.e.Store.Now(ctx); err == nil {
		now = t
	}
	a, err := r.e.Store.Artifacts().Update(ctx, res.ArtifactID, func(a *core.Artifact) error {
		if !r.ownsRow(a) {
			return fmt.Errorf("artifact %s is %s, no longer claimed by this build: %w", a.ArtifactID, a.Status, core.ErrConflict)
		}
		a.Fingerprint = res.Fingerprint
		a.SourceImageRef = r.norm.SourceImageRef
		a.SourceImageDigest = res.Image.Digest
		a.WritableLayerSize = r.norm.WritableLayerSize
		a.DownloadBaseURL = baseURL
		a.Ext4SHA256 = res.SHA256
		a.Ext4SizeBytes = res.SizeBytes
		a.Ext4Path = res.Path
		a.ObjectKey = key
		a.StorageBackend = r.e.Artifacts.Backend()
		a.ImageConfigJSON = cj
		a.LastError = ""
		a.GCDeadline = now.Add(r.c.GCDeadlineAfter).Unix()
		a.CubeEgressCABaked = res.CA.Baked
		a.CubeEgressCAFingerprint = res.CA.Fingerprint
		a.CubeEgressCATargetsWritten = int64(res.CA.TargetsWritten)
		a.Builder = builder
		// A row rebuilt after its bytes went missing keeps its token:
		// every template using the artifact carries it in its requests.
		if a.DownloadToken == "" {
			a.DownloadToken = token
		}
		return a.MoveTo(core.ArtifactReady)
	})
	if err != nil {
		return fmt.Errorf("record artifact %s: %w", res.ArtifactID, err)
	}
	r.mu.Lock()
	r.artifact = a
	r.mu.Unlock()
	return nil
}

// markFailed moves the row this build claimed from BUILDING to FAILED and
// reports whether it did; a row that moved on (another build claimed it,
// writing its own owner token) is left alone. The check and the write are
// one Update under the row's lock, so a claim cannot slip in between: this
// holds without the fingerprint lock, once it was lost.
func (r *run) markFailed(ctx context.Context, artifactID, msg string) bool {
	_, err := r.e.Store.Artifacts().Update(ctx, artifactID, func(a *core.Artifact) error {
		if !r.ownsRow(a) {
			return errLeaveRow
		}
		a.LastError = msg
		return a.MoveTo(core.ArtifactFailed)
	})
	if err != nil && !errors.Is(err, errLeaveRow) {
		r.log.Error("mark artifact FAILED", "artifact_id", artifactID, "err", err)
	}
	return err == nil
}

var errLeaveRow = errors.New("artifact row moved on; left alone")

// unlock releases the fingerprint lock (held from the claim until the row
// is READY or FAILED).
func (r *run) unlock() {
	r.mu.Lock()
	lk := r.lock
	r.lock = nil
	r.mu.Unlock()
	if lk == nil {
		return
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	if err := lk.Unlock(ctx); err != nil {
		r.log.Warn("release build lock", "lock", lk.Name(), "err", err)
	}
}
