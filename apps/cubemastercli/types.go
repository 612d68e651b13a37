package main

// The JSON shapes of the master's public template routes
// (adapters/httpapi/cubeapi). They are declared here so the CLI depends on
// the wire format only.

type jobInfo struct {
	JobID                   string        `json:"job_id"`
	TemplateID              string        `json:"template_id"`
	AttemptNo               int           `json:"attempt_no"`
	RetryOfJobID            string        `json:"retry_of_job_id"`
	Operation               string        `json:"operation"`
	RedoMode                string        `json:"redo_mode"`
	RedoScope               []string      `json:"redo_scope"`
	ResumePhase             string        `json:"resume_phase"`
	ArtifactID              string        `json:"artifact_id"`
	TemplateSpecFingerprint string        `json:"template_spec_fingerprint"`
	Status                  string        `json:"status"`
	Phase                   string        `json:"phase"`
	Progress                int           `json:"progress"`
	ErrorMessage            string        `json:"error_message"`
	ExpectedNodeCount       int           `json:"expected_node_count"`
	ReadyNodeCount          int           `json:"ready_node_count"`
	FailedNodeCount         int           `json:"failed_node_count"`
	TemplateStatus          string        `json:"template_status"`
	ArtifactStatus          string        `json:"artifact_status"`
	PullTotalBytes          int64         `json:"pull_total_bytes"`
	PullDownloadedBytes     int64         `json:"pull_downloaded_bytes"`
	PullTotalLayers         int           `json:"pull_total_layers"`
	PullCompletedLayers     int           `json:"pull_completed_layers"`
	PullSpeedBPS            int64         `json:"pull_speed_bps"`
	Artifact                *artifactInfo `json:"artifact"`
}

type artifactInfo struct {
	ArtifactID        string `json:"artifact_id"`
	SourceImageRef    string `json:"source_image_ref"`
	SourceImageDigest string `json:"source_image_digest"`
	Ext4SHA256        string `json:"ext4_sha256"`
	Ext4SizeBytes     int64  `json:"ext4_size_bytes"`
	Status            string `json:"status"`
	StorageBackend    string `json:"storage_backend"`
}

type jobResponse struct {
	Job *jobInfo `json:"job"`
}

type templateItem struct {
	TemplateID   string `json:"template_id"`
	InstanceType string `json:"instance_type"`
	Version      string `json:"version"`
	Status       string `json:"status"`
	LastError    string `json:"last_error"`
	Alias        string `json:"alias"`
	CreatedAt    string `json:"created_at"`
	ImageInfo    string `json:"image_info"`
}

type listResponse struct {
	Data []templateItem `json:"data"`
}

type replicaInfo struct {
	NodeID       string `json:"node_id"`
	NodeIP       string `json:"node_ip"`
	Status       string `json:"status"`
	Phase        string `json:"phase"`
	ArtifactID   string `json:"artifact_id"`
	SnapshotPath string `json:"snapshot_path"`
	ErrorMessage string `json:"error_message"`
}

type templateResponse struct {
	templateItem
	Replicas      []replicaInfo `json:"replicas"`
	CreateRequest any           `json:"create_request"`
}

type buildStatusResponse struct {
	BuildID      string `json:"build_id"`
	TemplateID   string `json:"template_id"`
	AttemptNo    int    `json:"attempt_no"`
	RetryOfJobID string `json:"retry_of_job_id"`
	Status       string `json:"status"`
	Progress     int    `json:"progress"`
	Message      string `json:"message"`
}

// fromImageRequest is the body of POST /cube/template/from-image.
type fromImageRequest struct {
	RequestID         string   `json:"requestID"`
	SourceImageRef    string   `json:"source_image_ref"`
	RegistryUsername  string   `json:"registry_username,omitempty"`
	RegistryPassword  string   `json:"registry_password,omitempty"`
	TemplateID        string   `json:"template_id,omitempty"`
	Alias             string   `json:"alias,omitempty"`
	InstanceType      string   `json:"instance_type,omitempty"`
	NetworkType       string   `json:"network_type,omitempty"`
	WritableLayerSize string   `json:"writable_layer_size"`
	ExposedPorts      []int32  `json:"exposed_ports,omitempty"`
	DistributionScope []string `json:"distribution_scope,omitempty"`
}

type redoRequest struct {
	RequestID         string   `json:"requestID"`
	TemplateID        string   `json:"template_id"`
	DistributionScope []string `json:"distribution_scope,omitempty"`
	FailedOnly        bool     `json:"failed_only,omitempty"`
}

type migrateRequest struct {
	RequestID  string `json:"requestID"`
	TemplateID string `json:"template_id"`
	Backend    string `json:"backend,omitempty"`
}

// deleteRequest spells the request id "RequestID", as upstream does.
type deleteRequest struct {
	RequestID  string `json:"RequestID"`
	TemplateID string `json:"template_id"`
}

type aliasRequest struct {
	RequestID string `json:"requestID"`
	Alias     string `json:"alias"`
}
