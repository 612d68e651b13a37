package cubeview

import (
	"encoding/json"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// JobInfo is upstream's TemplateImageJobInfo; every field is omitempty.
type JobInfo struct {
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
	Artifact                *ArtifactInfo `json:"artifact,omitempty"`
	// PhaseDurationsMS is how long each finished phase took, measured
	// where its work ran, in milliseconds by phase (this service's own).
	PhaseDurationsMS map[string]int64 `json:"phase_durations_ms,omitempty"`
	// Nodes are the job's target nodes with the state of their copy
	// (this service's own; job reads only).
	Nodes []JobNode `json:"nodes,omitempty"`
}

// JobNode is one target node of a job: Status is READY, FAILED or the
// step under way (DISTRIBUTING, DISTRIBUTED, SNAPSHOTTING); Error says why
// a FAILED node failed (a node that was down says so).
type JobNode struct {
	NodeID string `json:"node_id"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// NewJobNodes is the view of a job's replica rows (Nodes).
func NewJobNodes(rs []*core.Replica) []JobNode {
	out := make([]JobNode, 0, len(rs))
	for _, r := range rs {
		out = append(out, JobNode{NodeID: r.NodeID, Status: ShownReplicaStatus(r), Error: r.ErrorMessage})
	}
	return out
}

// ShownReplicaStatus is the status a view shows for a replica row. The
// row's status is READY or FAILED (upstream writes only these, and
// convergence and redo read them so); a FAILED row without an error whose
// phase is a step under way (DISTRIBUTING, DISTRIBUTED: the copy is
// there, SNAPSHOTTING) is shown by that phase: it has not failed.
func ShownReplicaStatus(r *core.Replica) string {
	if r.Status == core.ReplicaFailed && r.ErrorMessage == "" {
		switch r.Phase {
		case core.ReplicaPhaseDistributing, core.ReplicaPhaseDistributed, core.ReplicaPhaseSnapshotting:
			return string(r.Phase)
		}
	}
	return string(r.Status)
}

// ArtifactInfo is upstream's RootfsArtifactInfo. The download token is
// never shown.
type ArtifactInfo struct {
	ArtifactID              string `json:"artifact_id,omitempty"`
	TemplateSpecFingerprint string `json:"template_spec_fingerprint,omitempty"`
	SourceImageRef          string `json:"source_image_ref,omitempty"`
	SourceImageDigest       string `json:"source_image_digest,omitempty"`
	MasterNodeID            string `json:"master_node_id,omitempty"`
	// MasterNodeIP is upstream's misnamed column and field: it holds the
	// download base URL (http://host:port), not an IP. Kept for upstream's
	// clients; DownloadBaseURL says the same under its real name.
	MasterNodeIP      string `json:"master_node_ip,omitempty"`
	DownloadBaseURL   string `json:"download_base_url,omitempty"`
	Ext4Path          string `json:"ext4_path,omitempty"`
	Ext4SHA256        string `json:"ext4_sha256,omitempty"`
	Ext4SizeBytes     int64  `json:"ext4_size_bytes,omitempty"`
	WritableLayerSize string `json:"writable_layer_size,omitempty"`
	Status            string `json:"status,omitempty"`
	LastError         string `json:"last_error,omitempty"`
	StorageBackend    string `json:"storage_backend,omitempty"`
	ObjectKey         string `json:"object_key,omitempty"`
	// Builder is the Format of the builder that wrote the bytes
	// (ports.RootfsBuilder: its name and versions, e.g. "ext4stream/3");
	// absent when not known (built before it was recorded, by upstream,
	// or uploaded by migrate). This service's own.
	Builder string `json:"builder,omitempty"`
}

// NewJobInfo is the view of a job and, if known, its artifact.
func NewJobInfo(j *core.Job, a *core.Artifact) *JobInfo {
	if j == nil {
		return nil
	}
	return &JobInfo{
		JobID: j.JobID, TemplateID: j.TemplateID, AttemptNo: j.AttemptNo, RetryOfJobID: j.RetryOfJobID,
		Operation: string(j.Operation), RedoMode: string(j.RedoMode), RedoScope: j.RedoScope,
		ResumePhase: string(j.ResumePhase), ArtifactID: j.ArtifactID, TemplateSpecFingerprint: j.Fingerprint,
		Status: string(j.Status), Phase: string(j.Phase), Progress: ShownProgress(j), ErrorMessage: j.ErrorMessage,
		ExpectedNodeCount: j.ExpectedNodeCount, ReadyNodeCount: j.ReadyNodeCount, FailedNodeCount: j.FailedNodeCount,
		TemplateStatus: j.TemplateStatus, ArtifactStatus: j.ArtifactStatus,
		PullTotalBytes: j.Pull.TotalBytes, PullDownloadedBytes: j.Pull.DownloadedBytes, PullTotalLayers: j.Pull.TotalLayers,
		PullCompletedLayers: j.Pull.CompletedLayers, PullSpeedBPS: j.Pull.SpeedBPS,
		Artifact: NewArtifactInfo(a), PhaseDurationsMS: durationsMS(j.PhaseDurations),
	}
}

func durationsMS(d core.PhaseDurations) map[string]int64 {
	if len(d) == 0 {
		return nil
	}
	out := make(map[string]int64, len(d))
	for ph, v := range d {
		out[string(ph)] = v.Milliseconds()
	}
	return out
}

// NewArtifactInfo is the view of an artifact row (nil for nil).
func NewArtifactInfo(a *core.Artifact) *ArtifactInfo {
	if a == nil {
		return nil
	}
	return &ArtifactInfo{
		ArtifactID: a.ArtifactID, TemplateSpecFingerprint: a.Fingerprint, SourceImageRef: a.SourceImageRef,
		SourceImageDigest: a.SourceImageDigest, MasterNodeID: a.MasterNodeID, MasterNodeIP: a.DownloadBaseURL,
		DownloadBaseURL: a.DownloadBaseURL,
		Ext4Path:        a.Ext4Path, Ext4SHA256: a.Ext4SHA256, Ext4SizeBytes: a.Ext4SizeBytes,
		WritableLayerSize: a.WritableLayerSize, Status: string(a.Status), LastError: a.LastError,
		StorageBackend: a.StorageBackend, ObjectKey: a.ObjectKey, Builder: a.Builder,
	}
}

// JobResponse is what the job routes answer beside the envelope.
type JobResponse struct {
	Job *JobInfo `json:"job,omitempty"`
}

// TemplateItem is one template in a listing.
type TemplateItem struct {
	TemplateID   string `json:"template_id"`
	InstanceType string `json:"instance_type,omitempty"`
	Version      string `json:"version,omitempty"`
	Status       string `json:"status,omitempty"`
	LastError    string `json:"last_error,omitempty"`
	Alias        string `json:"alias,omitempty"`
	// DisplayName is the alias under the name upstream's newest master
	// uses (its CLI prints it as ALIAS).
	DisplayName string `json:"display_name,omitempty"`
	CreatedAt   string `json:"created_at,omitempty"` // RFC 3339, UTC
	ImageInfo   string `json:"image_info,omitempty"`
	// JobID is the template's latest job (upstream's JOB_ID column).
	JobID string `json:"job_id,omitempty"`
	// Backend is the template's copy-on-write backend, under both names
	// upstream's newest master answers it with (its BACKEND column).
	Backend        string `json:"backend,omitempty"`
	StorageBackend string `json:"storage_backend,omitempty"`
	// ArtifactID is the rootfs artifact; ReplicasReady of ReplicasTotal node copies are READY,
	// counted from the replica rows when the read has them (one
	// template), else the latest job's ready and target node counts (a
	// listing). This service's own, for the console.
	ArtifactID    string `json:"artifact_id,omitempty"`
	ReplicasReady int    `json:"replicas_ready"`
	ReplicasTotal int    `json:"replicas_total"`
	// UpdatedAt is when the template last changed (RFC 3339, UTC);
	// SizeBytes its rootfs image's size, in a paged listing only (this
	// service's own, for the console).
	UpdatedAt string `json:"updated_at,omitempty"`
	SizeBytes int64  `json:"size_bytes,omitempty"`
	// Builder is the Format of the builder that wrote the template's
	// artifact (ArtifactInfo.Builder), in a paged listing and a single
	// template's answer; absent when not known.
	Builder string `json:"builder,omitempty"`
}

// NewTemplateItem is the listing view of a template.
func NewTemplateItem(t *control.Template) TemplateItem {
	it := TemplateItem{TemplateID: t.TemplateID, InstanceType: t.InstanceType, Version: t.Version, Status: t.Status,
		LastError: t.LastError, Alias: t.Alias, DisplayName: t.Alias, ImageInfo: t.ImageInfo, JobID: t.JobID,
		Backend: t.Backend, StorageBackend: t.Backend,
		ArtifactID: t.ArtifactID, ReplicasReady: t.ReadyNodes, ReplicasTotal: t.TargetNodes, Builder: t.Builder}
	if len(t.Replicas) > 0 {
		it.ReplicasReady, it.ReplicasTotal = 0, len(t.Replicas)
		for _, r := range t.Replicas {
			if r.Status == core.ReplicaReady {
				it.ReplicasReady++
			}
		}
	}
	if !t.CreatedAt.IsZero() {
		it.CreatedAt = t.CreatedAt.UTC().Format(time.RFC3339)
	}
	if !t.UpdatedAt.IsZero() {
		it.UpdatedAt = t.UpdatedAt.UTC().Format(time.RFC3339)
	}
	return it
}

// ListResponse is GET /cube/template without a template id.
type ListResponse struct {
	Data []TemplateItem `json:"data"`
	// Total is how many templates matched the filters before paging; set
	// only when the caller asked for a page or a filter (limit, offset,
	// status, q), so an unfiltered listing is the upstream answer.
	Total *int `json:"total,omitempty"`
}

// ReplicaInfo is one node's copy of a template.
type ReplicaInfo struct {
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

// NewReplicaInfos is the view of a template's replicas (never nil).
func NewReplicaInfos(rs []*core.Replica) []ReplicaInfo {
	out := make([]ReplicaInfo, 0, len(rs))
	for _, r := range rs {
		out = append(out, ReplicaInfo{NodeID: r.NodeID, NodeIP: r.NodeIP, InstanceType: r.InstanceType, Spec: r.Spec,
			SnapshotPath: r.SnapshotPath, Status: ShownReplicaStatus(r), Phase: string(r.Phase), ArtifactID: r.ArtifactID,
			LastJobID: r.LastJobID, LastErrorPhase: r.LastErrorPhase, ErrorMessage: r.ErrorMessage, CleanupRequired: r.CleanupRequired})
	}
	return out
}

// TemplateResponse is one template with its replicas (GET /cube/template
// with a template id, POST /cube/template). CreateRequest is set only when
// asked for.
type TemplateResponse struct {
	TemplateItem
	Replicas      []ReplicaInfo `json:"replicas"`
	CreateRequest any           `json:"create_request,omitempty"`
	// The CubeEgress root CA in the template's image, as upstream's newest
	// master answers it (its CLI prints "cube_egress_ca: baked=..."), and
	// ours: why a template that wanted it was built without it.
	CubeEgressCABaked          bool   `json:"cube_egress_ca_baked,omitempty"`
	CubeEgressCAFingerprint    string `json:"cube_egress_ca_fingerprint,omitempty"`
	CubeEgressCATargetsWritten int64  `json:"cube_egress_ca_targets_written,omitempty"`
	CubeEgressCANote           string `json:"cube_egress_ca_note,omitempty"`
	// AliasMovedFrom is the template the alias was moved away from (a
	// set-alias or a newer create took it); moving it back undoes that.
	AliasMovedFrom string `json:"alias_moved_from,omitempty"`
}

// NewTemplateResponse is the detail view of t; withRequest adds its stored
// create request.
func NewTemplateResponse(t *control.Template, withRequest bool) TemplateResponse {
	out := TemplateResponse{TemplateItem: NewTemplateItem(t), Replicas: NewReplicaInfos(t.Replicas),
		CubeEgressCABaked: t.CubeEgressCABaked, CubeEgressCAFingerprint: t.CubeEgressCAFingerprint,
		CubeEgressCATargetsWritten: t.CubeEgressCATargetsWritten, CubeEgressCANote: t.CubeEgressCANote,
		AliasMovedFrom: t.AliasMovedFrom}
	if withRequest {
		out.CreateRequest = RawOrString(t.CreateRequest)
	}
	return out
}

// ResolveResponse is GET /cube/template/resolve.
type ResolveResponse struct {
	TemplateID    string `json:"template_id"`
	Alias         string `json:"alias,omitempty"`
	Status        string `json:"status,omitempty"`
	CreateRequest any    `json:"create_request,omitempty"`
}

// DeleteResponse is DELETE /cube/template.
type DeleteResponse struct {
	TemplateID string `json:"template_id"`
}

// AliasResponse is PUT /cube/template/{template_id}/alias.
type AliasResponse struct {
	TemplateID string `json:"template_id"`
	Alias      string `json:"alias"`
}

// BuildStatus is GET /cube/template/build/{build_id}/status. Status is
// "building", "ready" or "error"; Message the job's error, else its phase.
type BuildStatus struct {
	BuildID      string `json:"build_id"`
	TemplateID   string `json:"template_id"`
	AttemptNo    int    `json:"attempt_no"`
	RetryOfJobID string `json:"retry_of_job_id,omitempty"`
	Status       string `json:"status"`
	Progress     int    `json:"progress"`
	Message      string `json:"message"`
}

// NewBuildStatus is the build-status view of a job (upstream
// handleTemplateBuildStatusAction).
func NewBuildStatus(buildID string, j *core.Job) BuildStatus {
	msg := j.ErrorMessage
	if msg == "" {
		msg = string(j.Phase)
	}
	st := "building"
	switch j.Status {
	case core.JobReady:
		st = "ready"
	case core.JobFailed:
		st = "error"
	}
	return BuildStatus{BuildID: buildID, TemplateID: j.TemplateID, AttemptNo: j.AttemptNo, RetryOfJobID: j.RetryOfJobID,
		Status: st, Progress: ShownProgress(j), Message: msg}
}

// RootfsArtifactResponse is GET /cube/rootfs-artifact.
type RootfsArtifactResponse struct {
	Job struct {
		ArtifactID     string        `json:"artifact_id"`
		ArtifactStatus string        `json:"artifact_status"`
		Artifact       *ArtifactInfo `json:"artifact"`
	} `json:"job"`
}

// RawOrString returns stored JSON as an embedded object, or as a string if
// it is not valid JSON (legacy rows); nil for "".
func RawOrString(s string) any {
	if s == "" {
		return nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return s
}

// ResolvedRequest is POST /cube/template/resolve: the template a sandbox
// create request named and the request completed from it.
type ResolvedRequest struct {
	TemplateID    string               `json:"template_id"`
	Alias         string               `json:"alias,omitempty"`
	MergedRequest *core.SandboxRequest `json:"merged_request"`
}

// Preview is POST /cube/sandbox/preview (upstream sandboxPreviewResponse):
// the caller's request, the request merged with its template, and the
// request a node would be sent.
type Preview struct {
	APIRequest     *core.SandboxRequest `json:"api_request,omitempty"`
	MergedRequest  *core.SandboxRequest `json:"merged_request,omitempty"`
	CubeletRequest any                  `json:"cubelet_request,omitempty"`
}

// phaseStart is the progress at which each phase starts (the data plane's
// pipeline and the master's resume report these values).
var phaseStart = map[core.Phase]int{
	core.PhasePulling: 5, core.PhaseUnpacking: 20, core.PhaseBuildingExt4: 40, core.PhaseGeneratingJSON: 78,
	core.PhaseUploading: 80, core.PhaseRegistering: 80, core.PhaseDistributing: 85, core.PhaseMigrating: 10,
	core.PhaseCreatingTemplate: 90, core.PhaseSnapshotting: 92,
}

// ShownProgress is the progress a view shows. A FAILED job's row says 100
// (the job is over), which reads as "done": the view shows where it
// stopped instead, the start of the phase that failed.
func ShownProgress(j *core.Job) int {
	if j.Status != core.JobFailed {
		return j.Progress
	}
	if p, ok := phaseStart[j.Phase]; ok && p < j.Progress {
		return p
	}
	return min(j.Progress, 99)
}

// ComponentVersion is one replica's component versions (upstream's
// TemplateComponentVersionEntry).
type ComponentVersion struct {
	NodeID            string `json:"node_id,omitempty"`
	NodeIP            string `json:"node_ip,omitempty"`
	Status            string `json:"status,omitempty"`
	GuestImageVersion string `json:"guest_image_version,omitempty"`
	AgentVersion      string `json:"agent_version,omitempty"`
	KernelVersion     string `json:"kernel_version,omitempty"`
	ShimVersion       string `json:"shim_version,omitempty"`
}

// ComponentVersions is the data of GET
// /internal/meta/templates/{template_id}/component-versions.
type ComponentVersions struct {
	TemplateID string             `json:"template_id"`
	Replicas   []ComponentVersion `json:"replicas"`
}

// ComponentVersionsResponse is what the route answers beside the envelope.
type ComponentVersionsResponse struct {
	Data *ComponentVersions `json:"data,omitempty"`
}

// NewComponentVersions is the view of a template's replicas' versions
// (never nil).
func NewComponentVersions(templateID string, rs []*core.Replica) *ComponentVersions {
	out := &ComponentVersions{TemplateID: templateID, Replicas: make([]ComponentVersion, 0, len(rs))}
	for _, r := range rs {
		out.Replicas = append(out.Replicas, ComponentVersion{NodeID: r.NodeID, NodeIP: r.NodeIP, Status: string(r.Status),
			GuestImageVersion: r.GuestImageVersion, AgentVersion: r.AgentVersion, KernelVersion: r.KernelVersion, ShimVersion: r.ShimVersion})
	}
	return out
}
