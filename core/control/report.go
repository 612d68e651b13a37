package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode"

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
// or duplicate report is harmless (applied=false, nil error). A report
// applies only while the job is in its build (inBuild): from BUILT on the
// resume owns the job, and no data-plane report can end it. A BUILT
// report must carry the artifact's metadata (r.Artifact) unless the row
// already holds it; it is written to the artifact row before the job
// becomes BUILT, then the resume pipeline starts in the background and
// HandleStatusReport returns at once. An unknown job is core.ErrNotFound,
// a malformed report a *core.FieldError.
//
// A BUILT report is recorded with the job's move to BUILT and answered at
// once (see reportBuilt); the resume binds the artifact under its lock.
func (s *Service) HandleStatusReport(ctx context.Context, jobID string, r ports.StatusReport) (applied bool, err error) {
	u, err := dataPlaneUpdate(r.Update)
	if err != nil {
		return false, err
	}
	var job *core.Job
	if u.Status == core.JobBuilt {
		job, applied, err = s.reportBuilt(ctx, jobID, u, r.Artifact, r.Inputs)
	} else {
		job, applied, err = s.reportIf(ctx, jobID, u, inBuild)
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
		if job.Status == core.JobFailed {
			s.log().Warn("the data plane reported the build failed", "job", jobID, "phase", job.Phase, "err", job.ErrorMessage)
		}
		s.dropProgress(ctx, job.JobID)
	case s.Progress != nil:
		if perr := s.Progress.Publish(ctx, jobID, ports.LiveProgress{Phase: job.Phase, Progress: job.Progress, Pull: job.Pull}); perr != nil {
			s.log().Debug("live progress not published", "job", jobID, "err", perr)
		}
	}
	return true, nil
}

// inBuild is the precondition of every data-plane report: the job is still
// in the part the data plane owns, PENDING or RUNNING in a build phase.
// From BUILT on (and for a redo that reuses its artifact, PENDING in a
// post-build phase, which never goes to the data plane) the master's resume
// owns the job and fences its own writes with the run number; a data-plane
// report carries none, so it is late, duplicated (a second build of the
// job) or forged, and is acknowledged without being applied.
func inBuild(j *core.Job) error {
	if (j.Status == core.JobPending || j.Status == core.JobRunning) && !j.Phase.PostBuild() {
		return nil
	}
	return fmt.Errorf("job %s is %s/%s, past its build; a data-plane report no longer applies: %w", j.JobID, j.Status, j.Phase, core.ErrStaleUpdate)
}

// dataPlaneUpdate keeps the fields the data plane may set and refuses
// statuses and phases that belong to the control plane.
func dataPlaneUpdate(in core.JobUpdate) (core.JobUpdate, error) {
	u := core.JobUpdate{
		Status: in.Status, Phase: in.Phase, Progress: in.Progress, ErrorMessage: in.ErrorMessage,
		ArtifactID: in.ArtifactID, Fingerprint: in.Fingerprint, SourceImageDigest: in.SourceImageDigest,
		ArtifactStatus: in.ArtifactStatus, Pull: in.Pull, PhaseDurations: in.PhaseDurations,
	}
	if _, err := core.ParsePhase(string(u.Phase)); err != nil {
		return u, err
	}
	for ph := range u.PhaseDurations {
		if ph.PostBuild() || ph == core.PhaseMigrating {
			return u, &core.FieldError{Field: "phase_durations", Reason: fmt.Sprintf("%s belongs to the control plane", ph)}
		}
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

// builtMeta checks a BUILT report's artifact metadata and completes it from
// the job; nil meta means the report carries none, and then the artifact
// row must already hold the sha256 and size (read, not locked: the resume
// re-checks under the artifact's lock). skip is true when the report would
// not apply to the job (late or duplicate).
//
// The callback token is all the data plane shows, so a report is held to
// what the job itself determines (ownArtifact): it may name only the
// artifact of the job's own spec, its paths must have this service's
// shape, and an artifact already READY is never described otherwise than
// its row records (a refusal logged as a security event).
func (s *Service) builtMeta(ctx context.Context, job *core.Job, u *core.JobUpdate, meta *core.Artifact, in *core.BuildInputs) (m *core.Artifact, skip bool, err error) {
	err = inBuild(job)
	if err == nil {
		err = job.Clone().Apply(*u)
	}
	if err != nil {
		if errors.Is(err, core.ErrStaleUpdate) {
			return nil, true, nil
		}
		return nil, false, err
	}
	aid := u.ArtifactID
	fp := u.Fingerprint
	if meta != nil {
		fp = firstString(fp, meta.Fingerprint)
		if meta.Fingerprint != "" && meta.Fingerprint != fp {
			return nil, false, &core.FieldError{Field: "artifact.template_spec_fingerprint", Reason: fmt.Sprintf("%q differs from the report's %q", meta.Fingerprint, fp)}
		}
	}
	if err := s.ownArtifact(job, aid, firstString(fp, job.Fingerprint), in); err != nil {
		return nil, false, err
	}
	fp = firstString(fp, job.Fingerprint)
	u.Fingerprint = fp
	if meta == nil {
		a, err := s.Store.Artifacts().Get(ctx, aid)
		if isNotFound(err) {
			return nil, false, &core.FieldError{Field: "artifact", Reason: fmt.Sprintf("a BUILT report must carry the metadata of artifact %s (no row holds it)", aid)}
		}
		if err != nil {
			return nil, false, err
		}
		if !beingDeleted(a.Status) && (a.Ext4SHA256 == "" || a.Ext4SizeBytes <= 0) {
			return nil, false, &core.FieldError{Field: "artifact", Reason: fmt.Sprintf("artifact %s has no sha256/size; the BUILT report must carry them", aid)}
		}
		return nil, false, nil
	}
	c := *meta
	if c.ArtifactID != "" && c.ArtifactID != aid {
		return nil, false, &core.FieldError{Field: "artifact.artifact_id", Reason: fmt.Sprintf("%q differs from the job's artifact %q", c.ArtifactID, aid)}
	}
	c.ArtifactID = aid
	c.Fingerprint = fp
	if !sha256Hex.MatchString(c.Ext4SHA256) {
		return nil, false, &core.FieldError{Field: "artifact.ext4_sha256", Reason: "must be 64 lowercase hex characters"}
	}
	if c.Ext4SizeBytes <= 0 {
		return nil, false, &core.FieldError{Field: "artifact.ext4_size_bytes", Reason: "must be positive"}
	}
	if err := checkArtifactPaths(&c); err != nil {
		return nil, false, err
	}
	if _, err := core.ParseImageConfigJSON(c.ImageConfigJSON); err != nil {
		return nil, false, err
	}
	c.SourceImageRef = firstString(c.SourceImageRef, job.SourceImageRef)
	c.SourceImageDigest = firstString(c.SourceImageDigest, u.SourceImageDigest, job.SourceImageDigest)
	c.WritableLayerSize = firstString(c.WritableLayerSize, job.WritableLayerSize)
	// The builder is the one the fingerprint was just checked against
	// (ownArtifact): the artifact id includes its Format.
	c.Builder = in.Builder
	// Checked again under the artifact's lock when the resume binds it;
	// refusing here leaves the job alone (a forged report cannot end it).
	if cur, err := s.Store.Artifacts().Get(ctx, aid); err == nil && cur.Status == core.ArtifactReady {
		if field := rewrites(cur, &c); field != "" {
			s.securityEvent("BUILT report would rewrite a READY artifact; refused", job.JobID, aid, field)
			return nil, false, &core.FieldError{Field: "artifact." + field, Reason: fmt.Sprintf("differs from what READY artifact %s records; a READY artifact is never rewritten", aid)}
		}
	} else if err != nil && !isNotFound(err) {
		return nil, false, err
	}
	return &c, false, nil
}

// ownArtifact checks that a BUILT report names the artifact of the job's
// own spec: the fingerprint must be the one of the job's request built
// from the inputs the report declares (core.FingerprintOf, what the data
// plane computed), the artifact id the one derived from it, and neither
// may differ from what the job recorded when its build resolved the image.
// Another template's artifact can then be named only if its spec is the
// job's (the same artifact, legitimately shared). A refusal is logged as a
// security event: a data plane never sends such a report.
func (s *Service) ownArtifact(job *core.Job, aid, fp string, in *core.BuildInputs) error {
	refuse := func(field, reason string) error {
		s.securityEvent("BUILT report names an artifact that is not the job's own; refused", job.JobID, aid, field)
		return &core.FieldError{Field: field, Reason: reason}
	}
	if fp == "" {
		return &core.FieldError{Field: "template_spec_fingerprint", Reason: "a BUILT report must name the artifact's fingerprint"}
	}
	if want, err := core.ArtifactIDFor(fp); err != nil || want != aid {
		return refuse("artifact_id", fmt.Sprintf("%q does not belong to fingerprint %q", aid, fp))
	}
	if job.Fingerprint != "" && job.Fingerprint != fp {
		return refuse("template_spec_fingerprint", fmt.Sprintf("%q differs from %q, which the job's build resolved", fp, job.Fingerprint))
	}
	if job.ArtifactID != "" && job.ArtifactID != aid {
		return refuse("artifact_id", fmt.Sprintf("%q differs from %q, which the job's build resolved", aid, job.ArtifactID))
	}
	if in == nil {
		return &core.FieldError{Field: "template_spec_inputs", Reason: "a BUILT report must say what the build was made from (digest, injected content, builder) so its fingerprint can be checked against the job's request"}
	}
	if job.SourceImageDigest != "" && in.SourceImageDigest != job.SourceImageDigest {
		return refuse("template_spec_inputs.source_image_digest", fmt.Sprintf("%q differs from %q, which the job's build resolved", in.SourceImageDigest, job.SourceImageDigest))
	}
	var n core.NormalizedRequest
	req, err := core.DecodeRequestJSON(job.RequestJSON)
	if err == nil {
		n, err = core.NormalizeFromImageRequest(req, nil)
	}
	if err != nil {
		return fmt.Errorf("job %s: its request cannot be read to check the BUILT report: %w", job.JobID, err)
	}
	got, err := core.FingerprintOf(n, *in)
	if err != nil {
		return &core.FieldError{Field: "template_spec_inputs", Reason: err.Error()}
	}
	if got != fp {
		return refuse("template_spec_fingerprint", fmt.Sprintf("%q is not the fingerprint of this job's request built from the reported inputs", fp))
	}
	return nil
}

// checkArtifactPaths refuses an object key or ext4 path a BUILT report
// could use to point the artifact elsewhere: the key is the one layout
// this service stores artifacts under, the path (upstream's column) an
// absolute, clean path ending in <artifact id>/<artifact id>.ext4.
func checkArtifactPaths(a *core.Artifact) error {
	if a.ObjectKey != "" && a.ObjectKey != core.ArtifactObjectKey(a.ArtifactID) {
		return &core.FieldError{Field: "artifact.object_key", Reason: fmt.Sprintf("must be %q, the key artifacts are stored under", core.ArtifactObjectKey(a.ArtifactID))}
	}
	if p := a.Ext4Path; p != "" {
		tail := "/" + a.ArtifactID + "/" + a.ArtifactID + ".ext4"
		if len(p) > 2048 || !path.IsAbs(p) || path.Clean(p) != p || !strings.HasSuffix(p, tail) || strings.ContainsFunc(p, unicode.IsControl) {
			return &core.FieldError{Field: "artifact.ext4_path", Reason: fmt.Sprintf("must be an absolute, clean path ending in %q", tail)}
		}
	}
	return nil
}

// rewrites names the first of a READY row's sha256, size and object key
// that m would change ("" when none): those are what nodes and downloads
// trust, and a BUILT report never rewrites them.
func rewrites(row, m *core.Artifact) string {
	switch {
	case !strings.EqualFold(row.Ext4SHA256, m.Ext4SHA256):
		return "ext4_sha256"
	case row.Ext4SizeBytes != m.Ext4SizeBytes:
		return "ext4_size_bytes"
	case m.ObjectKey != "" && row.ObjectKey != m.ObjectKey:
		return "object_key"
	}
	return ""
}

// securityEvent logs a refused attempt to make the control plane trust
// something the data plane's own builds never send.
func (s *Service) securityEvent(msg, jobID, artifactID, field string) {
	s.log().Error(msg, "security_event", true, "job", jobID, "artifact", artifactID, "field", field)
}

// builtRecord is what a BUILT job keeps in result_json until its resume
// has bound the artifact: the checked metadata (nil when the report
// carried none) and the data plane's report as received. It is written in
// the same update that makes the job BUILT, so a master that dies right
// after answering the callback loses nothing.
type builtRecord struct {
	Artifact *builtArtifact  `json:"built_artifact,omitempty"`
	Report   json.RawMessage `json:"remote_build_report,omitempty"`
}

// builtArtifact is the persisted form of a BUILT report's artifact
// metadata (its keys never change: rows carry them across upgrades).
type builtArtifact struct {
	ArtifactID        string `json:"artifact_id"`
	Fingerprint       string `json:"template_spec_fingerprint,omitempty"`
	SourceImageRef    string `json:"source_image_ref,omitempty"`
	SourceImageDigest string `json:"source_image_digest,omitempty"`
	MasterNodeID      string `json:"master_node_id,omitempty"`
	DownloadBaseURL   string `json:"download_base_url,omitempty"`
	Ext4Path          string `json:"ext4_path,omitempty"`
	Ext4SHA256        string `json:"ext4_sha256"`
	Ext4SizeBytes     int64  `json:"ext4_size_bytes"`
	ImageConfigJSON   string `json:"image_config_json,omitempty"`
	WritableLayerSize string `json:"writable_layer_size,omitempty"`
	StorageBackend    string `json:"storage_backend,omitempty"`
	ObjectKey         string `json:"object_key,omitempty"`
	CABaked           bool   `json:"cube_egress_ca_baked,omitempty"`
	CAFingerprint     string `json:"cube_egress_ca_fingerprint,omitempty"`
	CATargetsWritten  int64  `json:"cube_egress_ca_targets_written,omitempty"`
	Builder           string `json:"builder,omitempty"`
}

func encodeBuilt(meta *core.Artifact, report string) (string, error) {
	rec := builtRecord{}
	if r := strings.TrimSpace(report); r != "" && json.Valid([]byte(r)) {
		rec.Report = json.RawMessage(r)
	}
	if m := meta; m != nil {
		rec.Artifact = &builtArtifact{
			ArtifactID: m.ArtifactID, Fingerprint: m.Fingerprint, SourceImageRef: m.SourceImageRef,
			SourceImageDigest: m.SourceImageDigest, MasterNodeID: m.MasterNodeID, DownloadBaseURL: m.DownloadBaseURL,
			Ext4Path: m.Ext4Path, Ext4SHA256: m.Ext4SHA256, Ext4SizeBytes: m.Ext4SizeBytes, ImageConfigJSON: m.ImageConfigJSON,
			WritableLayerSize: m.WritableLayerSize, StorageBackend: m.StorageBackend, ObjectKey: m.ObjectKey,
			CABaked: m.CubeEgressCABaked, CAFingerprint: m.CubeEgressCAFingerprint, CATargetsWritten: m.CubeEgressCATargetsWritten,
			Builder: m.Builder,
		}
	}
	b, err := json.Marshal(rec)
	return string(b), err
}

// decodeBuilt reads a BUILT job's result_json. A row written before the
// record existed holds the data plane's report alone: that becomes the
// report, with no metadata.
func decodeBuilt(resultJSON string) (meta *core.Artifact, report json.RawMessage) {
	r := strings.TrimSpace(resultJSON)
	if r == "" || !json.Valid([]byte(r)) {
		return nil, nil
	}
	var rec builtRecord
	if err := json.Unmarshal([]byte(r), &rec); err != nil || (rec.Artifact == nil && rec.Report == nil) {
		return nil, json.RawMessage(r)
	}
	if b := rec.Artifact; b != nil {
		meta = &core.Artifact{
			ArtifactID: b.ArtifactID, Fingerprint: b.Fingerprint, SourceImageRef: b.SourceImageRef,
			SourceImageDigest: b.SourceImageDigest, MasterNodeID: b.MasterNodeID, DownloadBaseURL: b.DownloadBaseURL,
			Ext4Path: b.Ext4Path, Ext4SHA256: b.Ext4SHA256, Ext4SizeBytes: b.Ext4SizeBytes, ImageConfigJSON: b.ImageConfigJSON,
			WritableLayerSize: b.WritableLayerSize, StorageBackend: b.StorageBackend, ObjectKey: b.ObjectKey,
			CubeEgressCABaked: b.CABaked, CubeEgressCAFingerprint: b.CAFingerprint, CubeEgressCATargetsWritten: b.CATargetsWritten,
			Builder: b.Builder,
		}
	}
	return meta, rec.Report
}

// bindBuilt writes a BUILT job's artifact metadata into the artifact row
// (creating it if the data plane did not) before the resume claims it. The
// caller holds the artifact's lock.
func (s *Service) bindBuilt(ctx context.Context, job *core.Job) error {
	meta, _ := decodeBuilt(job.ResultJSON)
	if meta == nil {
		return nil
	}
	if meta.ArtifactID != job.ArtifactID {
		return fmt.Errorf("the BUILT record names artifact %s, the job %s: %w", meta.ArtifactID, job.ArtifactID, core.ErrInvalidArgument)
	}
	return s.upsertArtifact(ctx, job.JobID, meta)
}

// upsertArtifact creates the row from m (READY, once the data plane
// confirms the bytes exist; m's metadata was validated as complete) or
// completes the existing READY row with m's fields the row lacks. What a
// READY row records of its bytes (sha256, size, object key) is never
// rewritten: a report that differs is refused and logged as a security
// event. A row that is not READY is never made READY here: FAILED means
// the bytes were found rotten and removed (the scrub), PENDING or BUILDING
// that a build is writing them anew, and CLEANUP_PENDING or DELETING that
// they are being deleted (errArtifactDeleting); the job fails and a redo
// builds again. The download token is the pipeline's (a row created here
// gets the one its bytes were checked with, and claimArtifact keeps it).
// The caller holds the artifact's lock.
func (s *Service) upsertArtifact(ctx context.Context, jobID string, m *core.Artifact) error {
	arts := s.Store.Artifacts()
	deadline := s.gcDeadline(ctx)
	for range 2 {
		_, err := arts.Update(ctx, m.ArtifactID, func(a *core.Artifact) error {
			switch {
			case beingDeleted(a.Status):
				// Its node copies and bytes are (being) destroyed: binding
				// it would keep a row whose bytes are gone.
				return fmt.Errorf("artifact %s is %s: %w", a.ArtifactID, a.Status, errArtifactDeleting)
			case a.Status != core.ArtifactReady:
				return fmt.Errorf("artifact %s is %s, not READY: its bytes are not there to distribute (found rotten and removed, or being written by another build); redo to rebuild: %w",
					a.ArtifactID, a.Status, core.ErrConflict)
			}
			if field := rewrites(a, m); field != "" {
				s.securityEvent("BUILT report would rewrite a READY artifact; refused", jobID, a.ArtifactID, field)
				return fmt.Errorf("artifact %s: the BUILT report's %s differs from what the READY row records; a READY artifact is never rewritten: %w", a.ArtifactID, field, core.ErrConflict)
			}
			if m.CubeEgressCABaked && !a.CubeEgressCABaked {
				// Completes a row that says nothing of the CA; a report
				// that says nothing of it (an older data plane) leaves
				// what the row says.
				a.CubeEgressCABaked, a.CubeEgressCAFingerprint, a.CubeEgressCATargetsWritten =
					true, m.CubeEgressCAFingerprint, m.CubeEgressCATargetsWritten
			}
			setIfEmpty(&a.Fingerprint, m.Fingerprint)
			setIfEmpty(&a.SourceImageRef, m.SourceImageRef)
			setIfEmpty(&a.SourceImageDigest, m.SourceImageDigest)
			setIfEmpty(&a.MasterNodeID, m.MasterNodeID)
			setIfEmpty(&a.DownloadBaseURL, m.DownloadBaseURL)
			setIfEmpty(&a.Ext4Path, m.Ext4Path)
			setIfEmpty(&a.ImageConfigJSON, m.ImageConfigJSON)
			setIfEmpty(&a.WritableLayerSize, m.WritableLayerSize)
			setIfEmpty(&a.StorageBackend, m.StorageBackend)
			setIfEmpty(&a.ObjectKey, m.ObjectKey)
			setIfEmpty(&a.Builder, m.Builder)
			if a.GCDeadline == 0 {
				a.GCDeadline = deadline
			}
			return nil
		})
		if !isNotFound(err) {
			return err
		}
		// No row: either a data plane that keeps no rows here, or the
		// artifact was deleted (its last template gone, GC run) while this
		// build was being reported. Only bytes that are there get a READY
		// row. The data plane is asked about the row as it would be
		// created, READY with its download token, the way nodes will ask:
		// a row that is not READY would be answered "present" unseen, and
		// one without a token cannot be asked at all (ports.DataPlane).
		row := *m
		row.Status = core.ArtifactReady
		row.DownloadToken = core.NewDownloadSeed(s.IDs.NewToken())
		row.GeneratedRequestJSON = ""
		row.GCDeadline = deadline
		ok, err := s.DataPlane.ArtifactExists(ctx, s.withDownloadToken(&row))
		if err != nil {
			return fmt.Errorf("artifact %s has no row; checking its bytes: %w", m.ArtifactID, err)
		}
		if !ok {
			return fmt.Errorf("artifact %s was deleted while it was being built (no row, no bytes); redo to rebuild: %w", m.ArtifactID, core.ErrConflict)
		}
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

// reportBuilt applies a BUILT report: it checks the report and records it
// with the job's move to BUILT in one compare-and-set update, and answers.
// It never waits for the artifact's lock: another template's resume may
// hold it for a long distribution, and the data plane's report must not
// time out behind it. Binding the artifact row happens in the resume,
// under the lock (bindBuilt); an artifact that is being deleted then fails
// the job with "artifact is being deleted; redo to rebuild". Once BUILT,
// the job counts as a reference, so a delete that has not yet counted the
// artifact's references keeps it.
func (s *Service) reportBuilt(ctx context.Context, jobID string, u core.JobUpdate, meta *core.Artifact, in *core.BuildInputs) (*core.Job, bool, error) {
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
	checked, skip, err := s.builtMeta(ctx, job, &u, meta, in)
	if err != nil || skip {
		return nil, false, err
	}
	if u.ResultJSON, err = encodeBuilt(checked, u.ResultJSON); err != nil {
		return nil, false, fmt.Errorf("record BUILT report of job %s: %w", jobID, err)
	}
	return s.reportIf(ctx, jobID, u, inBuild)
}

// setIfEmpty fills an empty field; a recorded one is kept.
func setIfEmpty(dst *string, v string) {
	if *dst == "" {
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
