package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// MigrateRequest is POST /cube/template/migrate (tpl merge).
type MigrateRequest struct {
	RequestID  string
	TemplateID string
}

// errLocalGone is the migrate failure that no retry of migrate can fix.
// cause, when not nil, says why there is no local copy.
func errLocalGone(aid string, cause error) error {
	why := ""
	if cause != nil {
		why = " (" + cause.Error() + ")"
	}
	return fmt.Errorf("local ext4 of %s is gone%s; use redo to rebuild from the source image: %w", aid, why, core.ErrNotFound)
}

// Migrate submits a MIGRATE job that moves a READY template's artifact from
// the master's legacy local disk into the artifact store (upstream §3.3):
//
//   - the template must exist (core.ErrNotFound) and be READY or
//     PARTIALLY_READY (core.ErrTemplateNotReady) with a rootfs artifact;
//   - no from-image job may be active for it (*core.ActiveJobError);
//   - one migrate job is active per template: a resubmit while one is
//     active returns it, and the unique active key decides races.
//
// The job runs in the background (GetMigrateJob polls it).
func (s *Service) Migrate(ctx context.Context, mr MigrateRequest) (*core.Job, error) {
	tid := strings.TrimSpace(mr.TemplateID)
	if err := core.ValidateTemplateID(tid); err != nil {
		return nil, err
	}
	if err := core.ValidateRequestID(mr.RequestID); err != nil {
		return nil, err
	}
	hctx, lock, done, err := s.holdTemplate(ctx, tid)
	if err != nil {
		return nil, fmt.Errorf("migrate template %s: %w", tid, err)
	}
	res, err := s.submitJob(hctx, jobPlan{
		templateID: tid,
		key:        core.ActiveKeyMigrate(tid),
		lock:       lock,
		onActive:   func(active *core.Job) (*core.Job, error) { return active, nil },
		build: func(ctx context.Context, latest *core.Job) (*core.Job, error) {
			return s.newMigrateJob(ctx, tid, latest)
		},
	})
	done()
	if err != nil {
		return nil, fmt.Errorf("migrate template %s: %w", tid, err)
	}
	job := res.Job
	if !res.Created {
		return job, nil
	}
	s.log().Info("migrate submitted", "template", tid, "job", job.JobID, "artifact", job.ArtifactID, "request", mr.RequestID)
	s.goBackground(ctx, "migrate "+job.JobID, func(ctx context.Context) error { return s.runMigrate(ctx, job) })
	return job, nil
}

// newMigrateJob checks the template and builds its next MIGRATE job after
// latest (nil: the template has no job).
func (s *Service) newMigrateJob(ctx context.Context, tid string, latest *core.Job) (*core.Job, error) {
	def, err := s.Store.Templates().GetDefinition(ctx, tid)
	if isNotFound(err) {
		return nil, fmt.Errorf("template %s: %w", tid, core.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if def.Status != core.TemplateReady && def.Status != core.TemplatePartiallyReady {
		return nil, fmt.Errorf("template %s is %s; only READY or PARTIALLY_READY templates can be migrated: %w", tid, def.Status, core.ErrTemplateNotReady)
	}
	if def.RootfsArtifactID == "" {
		return nil, fmt.Errorf("template %s has no rootfs artifact to migrate: %w", tid, core.ErrUnsupported)
	}
	if active, err := s.Store.Jobs().GetActive(ctx, core.ActiveKeyFromImage(tid)); err == nil {
		return nil, &core.ActiveJobError{TemplateID: tid, JobID: active.JobID, Status: active.Status}
	} else if !isNotFound(err) {
		return nil, err
	}
	job := &core.Job{
		JobID:       s.IDs.NewJobID(),
		Operation:   core.OpMigrate,
		ArtifactID:  def.RootfsArtifactID,
		Status:      core.JobPending,
		Phase:       core.PhaseMigrating,
		RequestJSON: migrateRequestJSON(tid),
	}
	if latest != nil {
		// Redo starts from the latest job's request: keep the from-image
		// request (and what it built from) so a migrated template can still
		// be redone.
		if strings.TrimSpace(latest.RequestJSON) != "" {
			job.RequestJSON = latest.RequestJSON
		}
		job.SourceImageRef, job.SourceImageDigest = latest.SourceImageRef, latest.SourceImageDigest
		job.WritableLayerSize, job.InstanceType, job.NetworkType = latest.WritableLayerSize, latest.InstanceType, latest.NetworkType
		job.Fingerprint = latest.Fingerprint
		job.RegistryAuth = latest.RegistryAuth
	}
	if job.InstanceType == "" {
		job.InstanceType = def.InstanceType
	}
	return job, nil
}

// migrateRequestJSON is the request snapshot of a template that has no
// from-image request of its own.
func migrateRequestJSON(tid string) string {
	b, _ := json.Marshal(struct {
		TemplateID string `json:"template_id"`
		Operation  string `json:"operation"`
	}{tid, string(core.OpMigrate)})
	return string(b)
}

// GetMigrateJob returns a MIGRATE job; any other job id is core.ErrNotFound.
func (s *Service) GetMigrateJob(ctx context.Context, jobID string) (*core.Job, error) {
	j, err := s.GetJob(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if j.Operation != core.OpMigrate {
		return nil, fmt.Errorf("migrate job %s: %w", jobID, core.ErrNotFound)
	}
	return j, nil
}

// runMigrate moves the job's artifact into the store under the artifact's
// lock (so resume, redo and delete never interleave with it) and ends the
// job READY or FAILED with the reason.
func (s *Service) runMigrate(ctx context.Context, job *core.Job) error {
	lock, err := s.lockArtifact(ctx, job.ArtifactID, false)
	if err != nil {
		return s.fail(ctx, job, core.PhaseMigrating, fmt.Errorf("lock artifact %s: %w", job.ArtifactID, err))
	}
	defer s.unlock(ctx, lock)
	ctx, cancel := context.WithTimeout(ctx, s.cfg().ResumeTimeout)
	defer cancel()
	ctx, release := whileHeld(ctx, lock)
	defer release()
	if _, ctx, err = s.claimRun(ctx, job.JobID); err != nil {
		return s.fail(ctx, job, core.PhaseMigrating, err)
	}
	if _, err := s.step(ctx, job.JobID, core.Progress(core.JobRunning, core.PhaseMigrating, 10)); err != nil {
		if errors.Is(err, errJobFinished) {
			return nil
		}
		return s.fail(ctx, job, core.PhaseMigrating, err)
	}
	note, err := s.migrateArtifact(ctx, job.ArtifactID)
	if err != nil {
		return s.fail(ctx, job, core.PhaseMigrating, err)
	}
	done := core.Progress(core.JobReady, core.PhaseReady, 100)
	done.ArtifactStatus = string(core.ArtifactReady)
	done.ResultJSON = note
	if _, err := s.step(ctx, job.JobID, done); err != nil && !errors.Is(err, errJobFinished) {
		return s.fail(ctx, job, core.PhaseMigrating, err)
	}
	s.log().Info("migrate finished", "template", job.TemplateID, "job", job.JobID, "artifact", job.ArtifactID)
	return nil
}

// migrateArtifact does the work of one migrate and returns the job's
// result_json.
func (s *Service) migrateArtifact(ctx context.Context, aid string) (string, error) {
	a, err := s.Store.Artifacts().Get(ctx, aid)
	if err != nil {
		return "", fmt.Errorf("artifact %s: %w", aid, err)
	}
	if a.Status != core.ArtifactReady {
		return "", fmt.Errorf("artifact %s is %s, not READY: %w", aid, a.Status, core.ErrInvalidArgument)
	}
	if a.ObjectKey != "" {
		// Asked for real (bytesServed): a legacy row without a download
		// token answered "present" unasked would have its only copy, the
		// local one, removed while the store holds nothing.
		var ok bool
		a, ok, err = s.bytesServed(ctx, a)
		if err != nil {
			return "", fmt.Errorf("check artifact %s in the store: %w", aid, err)
		}
		if a.Status != core.ArtifactReady {
			return "", fmt.Errorf("artifact %s is %s, not READY: %w", aid, a.Status, core.ErrInvalidArgument)
		}
		if ok {
			s.removeLocal(ctx, a)
			return migrateResult(a, "already_migrated"), nil
		}
		s.log().Warn("artifact row names a store object that is missing; migrating from the local copy", "artifact", aid, "object_key", a.ObjectKey)
	}

	info := ports.ObjectInfo{Size: a.Ext4SizeBytes, SHA256: strings.ToLower(a.Ext4SHA256)}
	if info.SHA256 == "" {
		// The upload must declare the sha256 up front: hash the file first.
		if info, err = s.hashLocal(ctx, a); err != nil {
			return "", err
		}
	}
	body, size, err := s.openLocal(ctx, a)
	if err != nil {
		return "", err
	}
	defer body.Close()
	if info.Size > 0 && size != info.Size {
		return "", fmt.Errorf("local ext4 of %s has %d bytes, the artifact records %d: %w", aid, size, info.Size, core.ErrInvalidArgument)
	}
	info.Size = size
	obj, err := s.DataPlane.UploadArtifact(ctx, aid, body, info)
	if err != nil {
		return "", fmt.Errorf("upload artifact %s: %w", aid, err)
	}
	// The row names the object only once the store holds verified bytes.
	a, err = s.Store.Artifacts().Update(ctx, aid, func(a *core.Artifact) error {
		a.ObjectKey, a.StorageBackend = obj.ObjectKey, obj.StorageBackend
		if a.Ext4SHA256 == "" {
			a.Ext4SHA256 = info.SHA256
		}
		if a.Ext4SizeBytes == 0 {
			a.Ext4SizeBytes = info.Size
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("record the store object of artifact %s: %w", aid, err)
	}
	s.removeLocal(ctx, a)
	return migrateResult(a, "migrated"), nil
}

func migrateResult(a *core.Artifact, outcome string) string {
	b, _ := json.Marshal(map[string]string{
		"migrate": outcome, "artifact_id": a.ArtifactID, "object_key": a.ObjectKey, "storage_backend": a.StorageBackend,
	})
	return string(b)
}

// openLocal opens the legacy local copy; a missing one is errLocalGone.
func (s *Service) openLocal(ctx context.Context, a *core.Artifact) (io.ReadCloser, int64, error) {
	if s.Legacy == nil {
		return nil, 0, errLocalGone(a.ArtifactID, nil)
	}
	rc, size, err := s.Legacy.Open(ctx, a)
	if isNotFound(err) {
		return nil, 0, errLocalGone(a.ArtifactID, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open local ext4 of %s: %w", a.ArtifactID, err)
	}
	return rc, size, nil
}

// hashLocal reads the local copy once for its sha256 and size.
func (s *Service) hashLocal(ctx context.Context, a *core.Artifact) (ports.ObjectInfo, error) {
	rc, _, err := s.openLocal(ctx, a)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	defer rc.Close()
	sum, n, err := core.SHA256Of(rc)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("hash local ext4 of %s: %w", a.ArtifactID, err)
	}
	return ports.ObjectInfo{Size: n, SHA256: sum}, nil
}

// removeLocal drops the legacy local copy, best effort: the store copy is
// what counts now, and a leftover is removed by the next migrate.
func (s *Service) removeLocal(ctx context.Context, a *core.Artifact) {
	if s.Legacy == nil {
		return
	}
	if err := s.Legacy.Remove(ctx, a); err != nil && !isNotFound(err) {
		s.log().Warn("local ext4 not removed after migrate", "artifact", a.ArtifactID, "path", a.Ext4Path, "err", err)
	}
}
