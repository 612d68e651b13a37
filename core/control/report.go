package control

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// HandleStatusReport applies one status callback from the data plane (POST
// /internal/template/jobs/:job_id/status, body already parsed and
// authenticated). Only the fields the data plane owns are applied (status,
// phase, progress, error message, artifact id/status, digest, fingerprint,
// pull counters, and its raw BUILT payload as result_json); the data plane
// may report RUNNING in a build phase, BUILT or FAILED, nothing that
// belongs to the control plane's pipeline.
//
// The job state machine decides: terminal states are absorbing and a late
// or duplicate report is harmless (applied=false, nil error). A BUILT
// report must carry the artifact's metadata (r.Artifact) unless the row
// already holds it; it is written to the artifact row before the job
// becomes BUILT, then the resume pipeline starts in the background and
// HandleStatusReport returns at once. An unknown job is core.ErrNotFound,
// a malformed report a *core.FieldError.
//
// A BUILT report binds the artifact under the artifact's lock
// (resumeLockName) when it can get it within builtLockWait, so it waits for
// a delete or GC of the same artifact and then sees its final state. An artifact that is being deleted
// (CLEANUP_PENDING or DELETING) is not bound: the job is FAILED with
// "artifact is being deleted; redo to rebuild" and the report is refused
// with an error wrapping core.ErrConflict (the data plane gets a 409).
func (s *Service) HandleStatusReport(ctx context.Context, jobID string, r ports.StatusReport) (applied bool, err error) {
	u, err := dataPlaneUpdate(r.Update)
	if err != nil {
		return false, err
	}
	var job *core.Job
	if u.Status == core.JobBuilt {
		job, applied, err = s.reportBuilt(ctx, jobID, u, r.Artifact)
	} else {
		job, applied, err = s.Report(ctx, jobID, u)
	}
	if err != nil {
		return false, err
	}
	if !applied {
		return false, nil
	}
	switch {
	case job.Status == core.JobBuilt:
		s.startResume(ctx, job.JobID)
	case job.Status.Terminal():
		s.dropProgress(ctx, job.JobID)
	case s.Progress != nil:
		if perr := s.Progress.Publish(ctx, jobID, ports.LiveProgress{Phase: job.Phase, Progress: job.Progress, Pull: job.Pull}); perr != nil {
			s.log().Debug("live progress not published", "job", jobID, "err", perr)
		}
	}
	return true, nil
}

// dataPlaneUpdate keeps the fields the data plane may set and refuses
// statuses and phases that belong to the control plane.
func dataPlaneUpdate(in core.JobUpdate) (core.JobUpdate, error) {
	u := core.JobUpdate{
		Status: in.Status, Phase: in.Phase, Progress: in.Progress, ErrorMessage: in.ErrorMessage,
		ArtifactID: in.ArtifactID, Fingerprint: in.Fingerprint, SourceImageDigest: in.SourceImageDigest,
		ArtifactStatus: in.ArtifactStatus, Pull: in.Pull,
	}
	if _, err := core.ParsePhase(string(u.Phase)); err != nil {
		return u, err
	}
	switch u.Status {
	case "", core.JobRunning:
		if u.Phase.PostBuild() {
			return u, &core.FieldError{Field: "phase", Reason: fmt.Sprintf("%s belongs to the control plane's resume pipeline", u.Phase)}
		}
	case core.JobBuilt:
		u.ResultJSON = in.ResultJSON
	case core.JobFailed:
	default:
		return u, &core.FieldError{Field: "status", Reason: fmt.Sprintf("the data plane may report RUNNING, BUILT or FAILED, not %q", u.Status)}
	}
	if u.Fingerprint != "" && u.ArtifactID != "" {
		if want, err := core.ArtifactIDFor(u.Fingerprint); err != nil || want != u.ArtifactID {
			return u, &core.FieldError{Field: "artifact_id", Reason: fmt.Sprintf("%q does not belong to fingerprint %q", u.ArtifactID, u.Fingerprint)}
		}
	}
	return u, nil
}

// recordBuiltArtifact writes a BUILT report's artifact metadata into the
// artifact row (creating it if the data plane did not). skip is true when
// the report would not apply to the job (late or duplicate): then nothing
// is written.
//
// The caller holds the artifact's lock (see reportBuilt).
func (s *Service) recordBuiltArtifact(ctx context.Context, job *core.Job, u *core.JobUpdate, meta *core.Artifact) (skip bool, err error) {
	if err := job.Clone().Apply(*u); err != nil {
		if errors.Is(err, core.ErrStaleUpdate) {
			return true, nil
		}
		return false, err
	}
	aid := u.ArtifactID
	if meta == nil {
		a, err := s.Store.Artifacts().Get(ctx, aid)
		if isNotFound(err) {
			return false, &core.FieldError{Field: "artifact", Reason: fmt.Sprintf("a BUILT report must carry the metadata of artifact %s (no row holds it)", aid)}
		}
		if err != nil {
			return false, err
		}
		if beingDeleted(a.Status) {
			return false, fmt.Errorf("artifact %s is %s: %w", aid, a.Status, errArtifactDeleting)
		}
		if a.Ext4SHA256 == "" || a.Ext4SizeBytes <= 0 {
			return false, &core.FieldError{Field: "artifact", Reason: fmt.Sprintf("artifact %s has no sha256/size; the BUILT report must carry them", aid)}
		}
		return false, nil
	}
	m := *meta
	if m.ArtifactID != "" && m.ArtifactID != aid {
		return false, &core.FieldError{Field: "artifact.artifact_id", Reason: fmt.Sprintf("%q differs from the job's artifact %q", m.ArtifactID, aid)}
	}
	m.ArtifactID = aid
	m.Fingerprint = firstString(m.Fingerprint, u.Fingerprint, job.Fingerprint)
	if m.Fingerprint != "" {
		if want, err := core.ArtifactIDFor(m.Fingerprint); err != nil || want != aid {
			return false, &core.FieldError{Field: "artifact.template_spec_fingerprint", Reason: fmt.Sprintf("%q does not give artifact id %q", m.Fingerprint, aid)}
		}
	}
	if !sha256Hex.MatchString(m.Ext4SHA256) {
		return false, &core.FieldError{Field: "artifact.ext4_sha256", Reason: "must be 64 lowercase hex characters"}
	}
	if m.Ext4SizeBytes <= 0 {
		return false, &core.FieldError{Field: "artifact.ext4_size_bytes", Reason: "must be positive"}
	}
	if _, err := core.ParseImageConfigJSON(m.ImageConfigJSON); err != nil {
		return false, err
	}
	m.SourceImageRef = firstString(m.SourceImageRef, job.SourceImageRef)
	m.SourceImageDigest = firstString(m.SourceImageDigest, u.SourceImageDigest, job.SourceImageDigest)
	m.WritableLayerSize = firstString(m.WritableLayerSize, job.WritableLayerSize)
	return false, s.upsertArtifact(ctx, &m)
}

// upsertArtifact creates the row from m (READY: the data plane just said
// the bytes exist; m's metadata was validated as complete) or copies m's
// data fields onto the existing row. The status moves to READY only from
// PENDING/BUILDING/FAILED; a row being cleaned up (CLEANUP_PENDING,
// DELETING) is refused with errArtifactDeleting, and the download token is
// the pipeline's. The caller holds the artifact's lock.
func (s *Service) upsertArtifact(ctx context.Context, m *core.Artifact) error {
	arts := s.Store.Artifacts()
	for range 2 {
		_, err := arts.Update(ctx, m.ArtifactID, func(a *core.Artifact) error {
			if beingDeleted(a.Status) {
				// Its node copies and bytes are (being) destroyed: binding
				// it would keep a row whose bytes are gone.
				return fmt.Errorf("artifact %s is %s: %w", a.ArtifactID, a.Status, errArtifactDeleting)
			}
			setIfNotEmpty(&a.Fingerprint, m.Fingerprint)
			setIfNotEmpty(&a.SourceImageRef, m.SourceImageRef)
			setIfNotEmpty(&a.SourceImageDigest, m.SourceImageDigest)
			setIfNotEmpty(&a.MasterNodeID, m.MasterNodeID)
			setIfNotEmpty(&a.DownloadBaseURL, m.DownloadBaseURL)
			setIfNotEmpty(&a.Ext4Path, m.Ext4Path)
			setIfNotEmpty(&a.Ext4SHA256, m.Ext4SHA256)
			setIfNotEmpty(&a.ImageConfigJSON, m.ImageConfigJSON)
			setIfNotEmpty(&a.WritableLayerSize, m.WritableLayerSize)
			setIfNotEmpty(&a.StorageBackend, m.StorageBackend)
			setIfNotEmpty(&a.ObjectKey, m.ObjectKey)
			a.Ext4SizeBytes = m.Ext4SizeBytes
			switch a.Status {
			case core.ArtifactPending, core.ArtifactBuilding, core.ArtifactFailed:
				a.Status = core.ArtifactReady
				a.LastError = ""
			}
			if a.GCDeadline == 0 {
				a.GCDeadline = s.gcDeadline()
			}
			return nil
		})
		if !isNotFound(err) {
			return err
		}
		row := *m
		row.Status = core.ArtifactReady
		row.DownloadToken = ""
		row.GeneratedRequestJSON = ""
		row.GCDeadline = s.gcDeadline()
		err = arts.Create(ctx, &row)
		if !errors.Is(err, core.ErrConflict) {
			return err
		}
		// Created concurrently (the data plane's own row): update it.
	}
	return fmt.Errorf("record artifact %s: %w", m.ArtifactID, core.ErrConflict)
}

// errArtifactDeleting refuses a BUILT report for an artifact whose cleanup
// has started; the job is failed with this message.
var errArtifactDeleting = fmt.Errorf("artifact is being deleted; redo to rebuild: %w", core.ErrConflict)

func beingDeleted(st core.ArtifactStatus) bool {
	return st == core.ArtifactCleanupPending || st == core.ArtifactDeleting
}

// reportBuilt applies a BUILT report: it binds the artifact and moves the
// job to BUILT while holding the artifact's lock, so the bind serializes
// with delete, GC and resume of the same artifact (the job, once BUILT and
// naming the artifact, counts as a reference for a later cleanup). The
// job is read again under the lock: a delete may have failed or removed it
// meanwhile. An artifact being deleted fails the job and returns the
// refusal.
// builtLockWait bounds how long a BUILT report waits for its artifact's lock.
const builtLockWait = 10 * time.Second

func (s *Service) reportBuilt(ctx context.Context, jobID string, u core.JobUpdate, meta *core.Artifact) (*core.Job, bool, error) {
	job, err := s.Store.Jobs().Get(ctx, jobID)
	if err != nil {
		return nil, false, err
	}
	aid := firstString(u.ArtifactID, job.ArtifactID)
	if meta != nil {
		aid = firstString(aid, meta.ArtifactID)
	}
	if aid == "" {
		return nil, false, &core.FieldError{Field: "artifact_id", Reason: "a BUILT report must name the artifact"}
	}
	u.ArtifactID = aid
	// Wait a bounded time for the artifact's lock. A delete holds it for a
	// few node calls; a resume of another template on this artifact may hold
	// it for a long distribution, and while it does no delete can run, so
	// binding without the lock is then safe — the status check below still
	// refuses an artifact that is being deleted. Blocking longer would make
	// the data plane's report time out and be lost.
	lctx, lcancel := context.WithTimeout(ctx, builtLockWait)
	lock, lerr := s.Locker.Lock(lctx, resumeLockName(aid))
	lcancel()
	switch {
	case lerr == nil:
		defer s.unlock(ctx, lock)
	case ctx.Err() != nil:
		return nil, false, fmt.Errorf("artifact %s: %w", aid, ctx.Err())
	default:
		s.log().Info("binding BUILT artifact without its lock (held by a long operation)", "artifact_id", aid, "job", jobID)
	}
	if job, err = s.Store.Jobs().Get(ctx, jobID); err != nil {
		return nil, false, err
	}
	skip, err := s.recordBuiltArtifact(ctx, job, &u, meta)
	if errors.Is(err, errArtifactDeleting) {
		failed, applied, ferr := s.Report(ctx, jobID, core.Fail(job.Phase, err.Error()))
		if ferr != nil {
			s.log().Warn("job not failed after refused BUILT report", "job", jobID, "err", ferr)
		} else if applied && failed.Status.Terminal() {
			s.dropProgress(ctx, jobID)
		}
		return nil, false, err
	}
	if err != nil || skip {
		return nil, false, err
	}
	return s.Report(ctx, jobID, u)
}

func setIfNotEmpty(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// startResume runs Resume for jobID in the background: detached from the
// caller (the callback's HTTP request ends at once), bounded by
// Config.ResumeTimeout, panics recovered. The BUILT sweeper replays it if
// this process dies first.
func (s *Service) startResume(ctx context.Context, jobID string) {
	s.goBackground(ctx, "resume "+jobID, func(ctx context.Context) error { return s.Resume(ctx, jobID) })
}
