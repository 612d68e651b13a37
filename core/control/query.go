package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// TemplateInfo is a template as the API shows it (upstream TemplateInfo /
// templateResponse JSON).
type TemplateInfo struct {
	TemplateID   string        `json:"template_id"`
	InstanceType string        `json:"instance_type,omitempty"`
	Version      string        `json:"version,omitempty"`
	Status       string        `json:"status"`
	Alias        string        `json:"alias,omitempty"`
	LastError    string        `json:"last_error,omitempty"`
	CreatedAt    string        `json:"created_at,omitempty"` // RFC 3339, UTC
	ImageInfo    string        `json:"image_info,omitempty"` // ref@sha256:...
	JobID        string        `json:"job_id,omitempty"`     // latest job
	ArtifactID   string        `json:"artifact_id,omitempty"`
	Replicas     []ReplicaInfo `json:"replicas,omitempty"`
	// CreateRequest is the stored sandbox create request (GetTemplate
	// only; the API shows it with include_request).
	CreateRequest json.RawMessage `json:"create_request,omitempty"`
}

// ReplicaInfo is one node's copy of a template.
type ReplicaInfo struct {
	NodeID          string `json:"node_id"`
	NodeIP          string `json:"node_ip"`
	InstanceType    string `json:"instance_type,omitempty"`
	Spec            string `json:"spec,omitempty"`
	SnapshotPath    string `json:"snapshot_path,omitempty"`
	Status          string `json:"status"`
	Phase           string `json:"phase,omitempty"`
	ArtifactID      string `json:"artifact_id,omitempty"`
	LastJobID       string `json:"last_job_id,omitempty"`
	LastErrorPhase  string `json:"last_error_phase,omitempty"`
	CleanupRequired bool   `json:"cleanup_required,omitempty"`
	ErrorMessage    string `json:"error_message,omitempty"`
}

// ArtifactInfo is an artifact row as the API shows it (upstream
// RootfsArtifactInfo; the download token is never shown).
type ArtifactInfo struct {
	ArtifactID        string `json:"artifact_id,omitempty"`
	Fingerprint       string `json:"template_spec_fingerprint,omitempty"`
	SourceImageRef    string `json:"source_image_ref,omitempty"`
	SourceImageDigest string `json:"source_image_digest,omitempty"`
	MasterNodeID      string `json:"master_node_id,omitempty"`
	MasterNodeIP      string `json:"master_node_ip,omitempty"`
	Ext4Path          string `json:"ext4_path,omitempty"`
	Ext4SHA256        string `json:"ext4_sha256,omitempty"`
	Ext4SizeBytes     int64  `json:"ext4_size_bytes,omitempty"`
	WritableLayerSize string `json:"writable_layer_size,omitempty"`
	Status            string `json:"status,omitempty"`
	LastError         string `json:"last_error,omitempty"`
	StorageBackend    string `json:"storage_backend,omitempty"`
}

// JobInfo is a job as the API shows it (upstream TemplateImageJobInfo).
type JobInfo struct {
	JobID             string        `json:"job_id,omitempty"`
	TemplateID        string        `json:"template_id,omitempty"`
	AttemptNo         int           `json:"attempt_no,omitempty"`
	RetryOfJobID      string        `json:"retry_of_job_id,omitempty"`
	Operation         string        `json:"operation,omitempty"`
	RedoMode          string        `json:"redo_mode,omitempty"`
	RedoScope         []string      `json:"redo_scope,omitempty"`
	ResumePhase       string        `json:"resume_phase,omitempty"`
	ArtifactID        string        `json:"artifact_id,omitempty"`
	Fingerprint       string        `json:"template_spec_fingerprint,omitempty"`
	Status            string        `json:"status,omitempty"`
	Phase             string        `json:"phase,omitempty"`
	Progress          int           `json:"progress,omitempty"`
	ErrorMessage      string        `json:"error_message,omitempty"`
	ExpectedNodeCount int           `json:"expected_node_count,omitempty"`
	ReadyNodeCount    int           `json:"ready_node_count,omitempty"`
	FailedNodeCount   int           `json:"failed_node_count,omitempty"`
	TemplateStatus    string        `json:"template_status,omitempty"`
	ArtifactStatus    string        `json:"artifact_status,omitempty"`
	Artifact          *ArtifactInfo `json:"artifact,omitempty"`
	core.PullProgress
}

// BuildStatus is GET /cube/template/build/:id/status.
type BuildStatus struct {
	BuildID      string `json:"build_id"`
	TemplateID   string `json:"template_id"`
	AttemptNo    int    `json:"attempt_no,omitempty"`
	RetryOfJobID string `json:"retry_of_job_id,omitempty"`
	// Status is "building", "ready" or "error".
	Status   string `json:"status"`
	Progress int    `json:"progress"`
	// Message is the job's error, else its phase.
	Message string `json:"message,omitempty"`
}

// NewJobInfo converts a job (and its artifact, if known) to the API view.
func NewJobInfo(j *core.Job, a *core.Artifact) *JobInfo {
	info := &JobInfo{
		JobID: j.JobID, TemplateID: j.TemplateID, AttemptNo: j.AttemptNo, RetryOfJobID: j.RetryOfJobID,
		Operation: string(j.Operation), RedoMode: string(j.RedoMode), RedoScope: j.RedoScope, ResumePhase: string(j.ResumePhase),
		ArtifactID: j.ArtifactID, Fingerprint: j.Fingerprint, Status: string(j.Status), Phase: string(j.Phase),
		Progress: j.Progress, ErrorMessage: j.ErrorMessage, ExpectedNodeCount: j.ExpectedNodeCount,
		ReadyNodeCount: j.ReadyNodeCount, FailedNodeCount: j.FailedNodeCount, TemplateStatus: j.TemplateStatus,
		ArtifactStatus: j.ArtifactStatus, PullProgress: j.Pull,
	}
	if a != nil {
		info.Artifact = NewArtifactInfo(a)
	}
	return info
}

// NewArtifactInfo converts an artifact row to the API view.
func NewArtifactInfo(a *core.Artifact) *ArtifactInfo {
	return &ArtifactInfo{
		ArtifactID: a.ArtifactID, Fingerprint: a.Fingerprint, SourceImageRef: a.SourceImageRef,
		SourceImageDigest: a.SourceImageDigest, MasterNodeID: a.MasterNodeID, MasterNodeIP: a.DownloadBaseURL,
		Ext4Path: a.Ext4Path, Ext4SHA256: a.Ext4SHA256, Ext4SizeBytes: a.Ext4SizeBytes,
		WritableLayerSize: a.WritableLayerSize, Status: string(a.Status), LastError: a.LastError,
		StorageBackend: a.StorageBackend,
	}
}

// ComposeImageInfo is "ref@sha256:..." (the digest cut to its sha256:
// part, fixing upstream's "ref@name@sha256:..."); ref alone without a
// digest.
func ComposeImageInfo(ref, digest string) string {
	if i := strings.Index(digest, "sha256:"); i >= 0 {
		digest = digest[i:]
	}
	switch {
	case ref == "":
		return digest
	case digest == "":
		return ref
	}
	return ref + "@" + digest
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func templateInfo(def *core.Definition, replicas []*core.Replica) *TemplateInfo {
	info := &TemplateInfo{
		TemplateID: def.TemplateID, InstanceType: def.InstanceType, Version: def.Version,
		Status: string(def.Status), Alias: def.Alias, LastError: def.LastError,
		CreatedAt: formatTime(def.CreatedAt), ArtifactID: def.RootfsArtifactID,
	}
	for _, r := range replicas {
		info.Replicas = append(info.Replicas, ReplicaInfo{
			NodeID: r.NodeID, NodeIP: r.NodeIP, InstanceType: r.InstanceType, Spec: r.Spec,
			SnapshotPath: r.SnapshotPath, Status: string(r.Status), Phase: string(r.Phase),
			ArtifactID: r.ArtifactID, LastJobID: r.LastJobID, LastErrorPhase: r.LastErrorPhase,
			CleanupRequired: r.CleanupRequired, ErrorMessage: r.ErrorMessage,
		})
	}
	return info
}

// templateInfoFromJob shows a template that has no definition yet (or
// whose build failed) through its latest job: the job's template status
// if set, else its status (upstream templateInfoFromJob).
func templateInfoFromJob(j *core.Job) *TemplateInfo {
	status := j.TemplateStatus
	if status == "" {
		status = strings.ToUpper(string(j.Status))
	}
	return &TemplateInfo{
		TemplateID: j.TemplateID, InstanceType: j.InstanceType, Version: core.DefaultTemplateVersion,
		Status: status, LastError: j.ErrorMessage, CreatedAt: formatTime(j.CreatedAt),
		ImageInfo: ComposeImageInfo(j.SourceImageRef, j.SourceImageDigest), JobID: j.JobID, ArtifactID: j.ArtifactID,
	}
}

// GetTemplate returns the template with its replicas and stored create
// request. Without a definition it falls back to the latest job (in-flight
// and failed templates show up as PENDING/RUNNING/FAILED);
// core.ErrNotFound when neither exists.
func (s *Service) GetTemplate(ctx context.Context, templateID string) (*TemplateInfo, error) {
	if err := core.ValidateTemplateID(templateID); err != nil {
		return nil, err
	}
	tpl := s.Store.Templates()
	latest, err := s.Store.Jobs().Latest(ctx, templateID)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	replicas, err := tpl.ListReplicas(ctx, templateID)
	if err != nil {
		return nil, err
	}
	def, err := tpl.GetDefinition(ctx, templateID)
	switch {
	case err == nil:
		info := templateInfo(def, replicas)
		if json.Valid([]byte(def.RequestJSON)) {
			info.CreateRequest = json.RawMessage(def.RequestJSON)
		}
		if latest != nil {
			info.JobID = latest.JobID
			info.ImageInfo = ComposeImageInfo(latest.SourceImageRef, latest.SourceImageDigest)
		}
		return info, nil
	case !isNotFound(err):
		return nil, err
	case latest == nil:
		return nil, fmt.Errorf("template %s: %w", templateID, core.ErrNotFound)
	}
	info := templateInfoFromJob(latest)
	info.Replicas = templateInfo(&core.Definition{}, replicas).Replicas
	return info, nil
}

// ListTemplates lists every template: definitions (by template id), then
// templates that only have jobs, shown through their latest job. Replicas
// and create requests are left out.
func (s *Service) ListTemplates(ctx context.Context) ([]TemplateInfo, error) {
	defs, err := s.Store.Templates().ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	// The job repository has no "latest per template" query; an unfiltered
	// stale query lists every job.
	all, err := s.Store.Jobs().ListStale(ctx, ports.StaleQuery{})
	if err != nil {
		return nil, err
	}
	latest := map[string]*core.Job{}
	var order []string
	for _, j := range all {
		cur, ok := latest[j.TemplateID]
		if !ok {
			order = append(order, j.TemplateID)
		}
		if !ok || j.AttemptNo > cur.AttemptNo {
			latest[j.TemplateID] = j
		}
	}
	out := make([]TemplateInfo, 0, len(defs))
	seen := map[string]bool{}
	for _, d := range defs {
		info := templateInfo(d, nil)
		if j := latest[d.TemplateID]; j != nil {
			info.JobID = j.JobID
			info.ImageInfo = ComposeImageInfo(j.SourceImageRef, j.SourceImageDigest)
		}
		out = append(out, *info)
		seen[d.TemplateID] = true
	}
	for _, tid := range sortedStrings(order) {
		if !seen[tid] {
			out = append(out, *templateInfoFromJob(latest[tid]))
		}
	}
	return out, nil
}

// GetJob returns the job; core.ErrNotFound for an unknown id.
func (s *Service) GetJob(ctx context.Context, jobID string) (*core.Job, error) {
	if strings.TrimSpace(jobID) == "" {
		return nil, &core.FieldError{Field: "job_id", Reason: "is required"}
	}
	return s.Store.Jobs().Get(ctx, jobID)
}

// GetJobInfo returns the API view of the job with its artifact and, while
// the job is active, the live pull progress from the ProgressSink.
func (s *Service) GetJobInfo(ctx context.Context, jobID string) (*JobInfo, error) {
	j, err := s.GetJob(ctx, jobID)
	if err != nil {
		return nil, err
	}
	var a *core.Artifact
	if j.ArtifactID != "" {
		if a, err = s.Store.Artifacts().Get(ctx, j.ArtifactID); err != nil && !isNotFound(err) {
			return nil, err
		}
	}
	info := NewJobInfo(j, a)
	if s.Progress != nil && j.Status.Active() {
		if live, ok, err := s.Progress.Get(ctx, jobID); err == nil && ok && live.Pull.TotalBytes > 0 {
			info.PullProgress = live.Pull
		}
	}
	return info, nil
}

// GetBuildStatus is the build-status view of a job (upstream
// handleTemplateBuildStatusAction); core.ErrNotFound for an unknown id.
func (s *Service) GetBuildStatus(ctx context.Context, buildID string) (*BuildStatus, error) {
	j, err := s.GetJob(ctx, buildID)
	if err != nil {
		return nil, err
	}
	st := "building"
	switch j.Status {
	case core.JobReady:
		st = "ready"
	case core.JobFailed:
		st = "error"
	}
	msg := j.ErrorMessage
	if msg == "" {
		msg = string(j.Phase)
	}
	return &BuildStatus{BuildID: j.JobID, TemplateID: j.TemplateID, AttemptNo: j.AttemptNo,
		RetryOfJobID: j.RetryOfJobID, Status: st, Progress: j.Progress, Message: msg}, nil
}

// GetArtifact returns an artifact row; core.ErrNotFound if missing.
func (s *Service) GetArtifact(ctx context.Context, artifactID string) (*core.Artifact, error) {
	if strings.TrimSpace(artifactID) == "" {
		return nil, &core.FieldError{Field: "artifact_id", Reason: "is required"}
	}
	return s.Store.Artifacts().Get(ctx, artifactID)
}
