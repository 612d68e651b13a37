package cubeapi

import (
	"encoding/json"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// JobView is a job with its artifact row, if it has one.
type JobView struct {
	Job      *core.Job
	Artifact *core.Artifact
}

// TemplateSummary is one template in a listing. Templates that have no
// definition yet (in-flight first builds) are summarised from their latest
// job by the service.
type TemplateSummary struct {
	TemplateID   string
	InstanceType string
	Version      string
	Status       string
	LastError    string
	Alias        string
	CreatedAt    time.Time
	// ImageInfo is "ref@sha256:..." of the source image.
	ImageInfo string
}

// TemplateDetail is one template with its replicas.
type TemplateDetail struct {
	TemplateSummary
	Replicas []*core.Replica
	// CreateRequest is the stored sandbox create request (JSON), filled
	// only when include_request was asked for.
	CreateRequest string
}

// ResolvedTemplate is the template an id or alias resolves to.
type ResolvedTemplate struct {
	TemplateID string
	Alias      string
	Status     string
	// CreateRequest is the stored sandbox create request (JSON).
	CreateRequest string
}

// RedoRequest is the body of POST /cube/template/redo.
type RedoRequest struct {
	RequestID         string   `json:"requestID"`
	TemplateID        string   `json:"template_id"`
	DistributionScope []string `json:"distribution_scope,omitempty"`
	FailedOnly        bool     `json:"failed_only,omitempty"`
	Wait              bool     `json:"wait,omitempty"` // ignored, as upstream
}

// MigrateRequest is the body of POST /cube/template/migrate (tpl merge).
type MigrateRequest struct {
	RequestID  string `json:"requestID"`
	TemplateID string `json:"template_id"`
	// Backend is the target store kind ("s3"); empty means the configured
	// default.
	Backend string `json:"backend,omitempty"`
}

// DeleteRequest is the body of DELETE /cube/template. Upstream spells the
// request id "RequestID" here (encoding/json also accepts "requestID").
type DeleteRequest struct {
	RequestID    string `json:"RequestID"`
	TemplateID   string `json:"template_id"`
	InstanceType string `json:"instance_type,omitempty"`
	Sync         bool   `json:"sync,omitempty"` // ignored, as upstream
}

// jobInfo is upstream's TemplateImageJobInfo; every field is omitempty.
type jobInfo struct {
	JobID                   string        `json:"job_id,omitempty"`
	TemplateID              string        `json:"template_id,omitempty"`
	AttemptNo               int           `json:"attempt_no,omitempty"`
	RetryOfJobID            string        `json:"retry_of_job_id,omitempty"`
	Operation               string        `json:"operation,omitempty"`
	RedoMode                string        `json:"redo_mode,omitempty"`
	RedoScope               []string      `json:"redo_scope,omitempty"`
	ResumePhase             string        `json:"resume_phase,omitempty"`
	ArtifactID              string        `json:"artifact_id,omitempty"`
	TemplateSpecFingerprint string        `json:"template_spec_fingerprint,omitempty"`
	Status                  string        `json:"status,omitempty"`
	Phase                   string        `json:"phase,omitempty"`
	Progress                int           `json:"progress,omitempty"`
	ErrorMessage            string        `json:"error_message,omitempty"`
	ExpectedNodeCount       int           `json:"expected_node_count,omitempty"`
	ReadyNodeCount          int           `json:"ready_node_count,omitempty"`
	FailedNodeCount         int           `json:"failed_node_count,omitempty"`
	TemplateStatus          string        `json:"template_status,omitempty"`
	ArtifactStatus          string        `json:"artifact_status,omitempty"`
	PullTotalBytes          int64         `json:"pull_total_bytes,omitempty"`
	PullDownloadedBytes     int64         `json:"pull_downloaded_bytes,omitempty"`
	PullTotalLayers         int           `json:"pull_total_layers,omitempty"`
	PullCompletedLayers     int           `json:"pull_completed_layers,omitempty"`
	PullSpeedBPS            int64         `json:"pull_speed_bps,omitempty"`
	Artifact                *artifactInfo `json:"artifact,omitempty"`
}

// artifactInfo is upstream's RootfsArtifactInfo. The download token is never
// shown.
type artifactInfo struct {
	ArtifactID              string `json:"artifact_id,omitempty"`
	TemplateSpecFingerprint string `json:"template_spec_fingerprint,omitempty"`
	SourceImageRef          string `json:"source_image_ref,omitempty"`
	SourceImageDigest       string `json:"source_image_digest,omitempty"`
	MasterNodeID            string `json:"master_node_id,omitempty"`
	MasterNodeIP            string `json:"master_node_ip,omitempty"`
	Ext4Path                string `json:"ext4_path,omitempty"`
	Ext4SHA256              string `json:"ext4_sha256,omitempty"`
	Ext4SizeBytes           int64  `json:"ext4_size_bytes,omitempty"`
	WritableLayerSize       string `json:"writable_layer_size,omitempty"`
	Status                  string `json:"status,omitempty"`
	LastError               string `json:"last_error,omitempty"`
	StorageBackend          string `json:"storage_backend,omitempty"`
	ObjectKey               string `json:"object_key,omitempty"`
}

func newJobInfo(v *JobView) *jobInfo {
	if v == nil || v.Job == nil {
		return nil
	}
	j := v.Job
	return &jobInfo{
		JobID: j.JobID, TemplateID: j.TemplateID, AttemptNo: j.AttemptNo, RetryOfJobID: j.RetryOfJobID,
		Operation: string(j.Operation), RedoMode: string(j.RedoMode), RedoScope: j.RedoScope,
		ResumePhase: string(j.ResumePhase), ArtifactID: j.ArtifactID, TemplateSpecFingerprint: j.Fingerprint,
		Status: string(j.Status), Phase: string(j.Phase), Progress: j.Progress, ErrorMessage: j.ErrorMessage,
		ExpectedNodeCount: j.ExpectedNodeCount, ReadyNodeCount: j.ReadyNodeCount, FailedNodeCount: j.FailedNodeCount,
		TemplateStatus: j.TemplateStatus, ArtifactStatus: j.ArtifactStatus,
		PullTotalBytes: j.Pull.TotalBytes, PullDownloadedBytes: j.Pull.DownloadedBytes, PullTotalLayers: j.Pull.TotalLayers,
		PullCompletedLayers: j.Pull.CompletedLayers, PullSpeedBPS: j.Pull.SpeedBPS,
		Artifact: newArtifactInfo(v.Artifact),
	}
}

func newArtifactInfo(a *core.Artifact) *artifactInfo {
	if a == nil {
		return nil
	}
	return &artifactInfo{
		ArtifactID: a.ArtifactID, TemplateSpecFingerprint: a.Fingerprint, SourceImageRef: a.SourceImageRef,
		SourceImageDigest: a.SourceImageDigest, MasterNodeID: a.MasterNodeID, MasterNodeIP: a.DownloadBaseURL,
		Ext4Path: a.Ext4Path, Ext4SHA256: a.Ext4SHA256, Ext4SizeBytes: a.Ext4SizeBytes,
		WritableLayerSize: a.WritableLayerSize, Status: string(a.Status), LastError: a.LastError,
		StorageBackend: a.StorageBackend, ObjectKey: a.ObjectKey,
	}
}

type templateItem struct {
	TemplateID   string `json:"template_id"`
	InstanceType string `json:"instance_type,omitempty"`
	Version      string `json:"version,omitempty"`
	Status       string `json:"status,omitempty"`
	LastError    string `json:"last_error,omitempty"`
	Alias        string `json:"alias,omitempty"`
	CreatedAt    string `json:"created_at,omitempty"` // RFC 3339, UTC
	ImageInfo    string `json:"image_info,omitempty"`
}

func newTemplateItem(s TemplateSummary) templateItem {
	it := templateItem{TemplateID: s.TemplateID, InstanceType: s.InstanceType, Version: s.Version, Status: s.Status,
		LastError: s.LastError, Alias: s.Alias, ImageInfo: s.ImageInfo}
	if !s.CreatedAt.IsZero() {
		it.CreatedAt = s.CreatedAt.UTC().Format(time.RFC3339)
	}
	return it
}

type replicaInfo struct {
	NodeID          string `json:"node_id"`
	NodeIP          string `json:"node_ip,omitempty"`
	InstanceType    string `json:"instance_type,omitempty"`
	Spec            string `json:"spec,omitempty"`
	SnapshotPath    string `json:"snapshot_path,omitempty"`
	Status          string `json:"status,omitempty"`
	Phase           string `json:"phase,omitempty"`
	ArtifactID      string `json:"artifact_id,omitempty"`
	LastJobID       string `json:"last_job_id,omitempty"`
	LastErrorPhase  string `json:"last_error_phase,omitempty"`
	ErrorMessage    string `json:"error_message,omitempty"`
	CleanupRequired bool   `json:"cleanup_required,omitempty"`
}

func newReplicaInfos(rs []*core.Replica) []replicaInfo {
	out := make([]replicaInfo, 0, len(rs))
	for _, r := range rs {
		out = append(out, replicaInfo{NodeID: r.NodeID, NodeIP: r.NodeIP, InstanceType: r.InstanceType, Spec: r.Spec,
			SnapshotPath: r.SnapshotPath, Status: string(r.Status), Phase: string(r.Phase), ArtifactID: r.ArtifactID,
			LastJobID: r.LastJobID, LastErrorPhase: r.LastErrorPhase, ErrorMessage: r.ErrorMessage, CleanupRequired: r.CleanupRequired})
	}
	return out
}

// rawOrString returns stored JSON as an embedded object, or as a string if
// it is not valid JSON (legacy rows).
func rawOrString(s string) any {
	if s == "" {
		return nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return s
}

// buildState maps a job status to the build-status route's vocabulary.
func buildState(s core.JobStatus) string {
	switch s {
	case core.JobReady:
		return "ready"
	case core.JobFailed:
		return "error"
	}
	return "building"
}
