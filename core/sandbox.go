package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// Annotation keys and fixed values of the sandbox request and of an
// artifact sent to a node. They are wire facts the nodes read, defined here
// once: the control plane writes them, the node adapter maps them, the node
// agent reads them back.
const (
	AnnotationTemplateID         = "cube.master.appsnapshot.template.id"
	AnnotationAppSnapshotCreate  = "cube.master.appsnapshot.create"
	AnnotationAppSnapshotVersion = "cube.master.appsnapshot.version"
	AnnotationTemplateVersion    = "cube.master.appsnapshot.template.version"
	AnnotationArtifactID         = "cube.master.rootfs.artifact.id"
	AnnotationArtifactURL        = "cube.master.rootfs.artifact.url"
	AnnotationArtifactToken      = "cube.master.rootfs.artifact.token"
	AnnotationArtifactSHA256     = "cube.master.rootfs.artifact.sha256"
	AnnotationArtifactSizeBytes  = "cube.master.rootfs.artifact.size_bytes"
	AnnotationWritableLayerSize  = "cube.master.rootfs.writable_layer_size"
	AnnotationSpecFingerprint    = "cube.master.template.spec_fingerprint"
	AnnotationSystemDiskSize     = "cube.master.system_disk_size"
	AnnotationInstanceType       = "cube.master.instance.type"
	// AnnotationExposedPorts lists ports as "p1:p2"; nodes get them as the
	// request's exposed ports.
	AnnotationExposedPorts = "com.exposed_ports"
	AnnotationInjectEnvd   = "cube.master.inject_envd"
	InjectEnvdOptIn        = "true"
	// AnnotationEnableIvshmem asks the node to boot the template's build
	// sandbox with ivshmem, so its snapshot holds the device topology.
	AnnotationEnableIvshmem = "cube.master.enable_ivshmem"
	// StorageMediaExt4 is the storage medium of a prebuilt ext4 rootfs.
	StorageMediaExt4 = "ext4"
)

// Annotations the master adds to, or reads from, every sandbox request it
// sends to a node (upstream ConstructCubeletReq).
const (
	// Top-level request annotations under these prefixes are the ones the
	// master forwards on purpose; the rest only ride along (see the node
	// adapter's request mapping).
	MasterAnnotationPrefix = "cube.master"
	CloudAnnotationPrefix  = "cloud.tencent.com"

	AnnotationVIPs              = "cube.master.vips"
	AnnotationBlkQos            = "cube.master.blk.qos"
	AnnotationFSQos             = "cube.master.fs.qos"
	AnnotationRegion            = "cube.master.instance.region"
	AnnotationUseNetfileCache   = "cube.instance.use_netfile_cache"
	AnnotationCreateTimeEnvVars = "cube.master.internal.create_time_env_vars"
	AnnotationStorageBackend    = "cube.master.storage.backend"
	AnnotationImageUsername     = "cube.master.image.username"
	AnnotationImageToken        = "cube.master.image.token"

	// Caller-facing annotations with a meaning of their own.
	AnnotationNetID      = "com.netid"
	AnnotationInvokePort = "com.invoke_port"
	AnnotationComVIPs    = "com.vips"
	// AnnotationHostMount is a JSON list of {hostPath, mountPath, readOnly}
	// the master turns into host-dir volumes.
	AnnotationHostMount = "host-mount"
	// AnnotationPluginVolumeMounts names plugin volumes, which need the
	// master's volume records; this master has none.
	AnnotationPluginVolumeMounts = "plugin-volume-mounts"

	// EnvdInImagePath is where an injected envd lives in a template rootfs;
	// EnvdPort is the port the wrapped entrypoint exposes for it.
	EnvdInImagePath = "/usr/local/bin/envd"
	EnvdPort        = 49983
)

// Snapshot storage backends (upstream NormalizeSnapshotBackend).
const (
	BackendXFS = "xfs"
	BackendS3  = "s3"
)

// NormalizeBackend maps a backend name onto xfs or s3: empty and the
// historical copy-on-write names are xfs; anything else is an error.
func NormalizeBackend(raw string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "", BackendXFS, "cow", "cubecow", "reflink", "xfscow":
		return BackendXFS, nil
	case BackendS3:
		return BackendS3, nil
	}
	return "", &FieldError{Field: "backend", Reason: fmt.Sprintf("%q is not xfs or s3", raw)}
}

// The artifact download protocol between nodes and the services.
const (
	// DownloadPath is the route nodes fetch artifact bytes from, on the
	// master (which forwards it) and on the template center.
	DownloadPath = "/cube/template/artifact/download"
	// DownloadTokenHeader carries the artifact's download token; it is
	// accepted instead of the URL's token query, and headers stay out of
	// access logs.
	DownloadTokenHeader = "X-Cube-Artifact-Token"
)

// DownloadURL is base + DownloadPath + "?artifact_id=<id>&token=<token>".
// A base without a scheme gets http://.
func DownloadURL(base, artifactID, token string) string {
	base = strings.TrimRight(NormalizeBaseURL(base), "/")
	q := url.Values{"artifact_id": {artifactID}, "token": {token}}
	return base + DownloadPath + "?" + q.Encode()
}

// NormalizeBaseURL trims base and gives it http:// when it has no scheme.
func NormalizeBaseURL(base string) string {
	base = strings.TrimSpace(base)
	if base == "" || strings.Contains(base, "://") {
		return base
	}
	return "http://" + base
}

// ArtifactObjectKey is the artifact store key of an artifact's ext4 (the
// legacy local layout <id>/<id>.ext4), used when a row records no key.
func ArtifactObjectKey(artifactID string) string {
	return artifactID + "/" + artifactID + ".ext4"
}

// ObjectKeyOf is the store key of a's bytes: the recorded one, else the
// default layout.
func ObjectKeyOf(a *Artifact) string {
	if a.ObjectKey != "" {
		return a.ObjectKey
	}
	return ArtifactObjectKey(a.ArtifactID)
}

// NodeArtifact is what a node is told about an artifact it must store
// (CreateImage): which one, where to download it, and how to verify the
// bytes. A node must refuse bytes whose size or sha256 differ.
type NodeArtifact struct {
	ArtifactID string
	// DownloadURL is the full URL (see DownloadURL); Token is also sent
	// in DownloadTokenHeader.
	DownloadURL string
	Token       string
	SHA256      string // lowercase hex
	SizeBytes   int64
	// WritableLayerSize, Fingerprint and InstanceType describe the
	// template the artifact belongs to.
	WritableLayerSize string
	Fingerprint       string
	InstanceType      string
}

// SandboxRequest is a sandbox create request (upstream CreateCubeSandboxReq):
// the request generated for a rootfs template, the one a caller sends to
// create a template from a sandbox, and what a node's AppSnapshot builds the
// template from. Sub-objects this service only passes through stay raw JSON;
// the node adapter maps them onto the node's wire format.
type SandboxRequest struct {
	RequestID string   `json:"requestID,omitempty"`
	Volumes   []Volume `json:"volumes,omitempty"`
	// CubeVSContext and CubeNetworkConfig are the same policy under its old
	// and its new key; NetworkPolicy picks the one that applies.
	CubeVSContext     *CubeVSContext    `json:"cubevs_context,omitempty"`
	CubeNetworkConfig *CubeVSContext    `json:"cube_network_config,omitempty"`
	Containers        []Container       `json:"containers,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	// CreateTimeEnvVars reach the node as one JSON annotation.
	CreateTimeEnvVars map[string]string `json:"create_time_env_vars,omitempty"`
	InstanceType      string            `json:"instance_type,omitempty"`
	NetworkType       string            `json:"network_type,omitempty"`
	// Backend is the snapshot storage backend (xfs or s3; empty: xfs).
	Backend        string `json:"backend,omitempty"`
	RuntimeHandler string `json:"runtime_handler,omitempty"`
	Namespace      string `json:"namespace,omitempty"`
}

// NetworkPolicy is the request's egress policy: cube_network_config when
// set (the newer key wins), else cubevs_context, else nil. A policy under
// either key is never ignored.
func (r *SandboxRequest) NetworkPolicy() *CubeVSContext {
	if r == nil {
		return nil
	}
	if r.CubeNetworkConfig != nil {
		return r.CubeNetworkConfig
	}
	return r.CubeVSContext
}

// EgressRule is an L7 egress rule of a network policy; rules are evaluated
// in order, the first match wins.
type EgressRule struct {
	Name   string            `json:"name"`
	Match  *EgressRuleMatch  `json:"match,omitempty"`
	Action *EgressRuleAction `json:"action,omitempty"`
}

// EgressRuleMatch selects requests; empty fields match anything. A port
// needs a scheme.
type EgressRuleMatch struct {
	SNI    *string  `json:"sni,omitempty"`
	Host   *string  `json:"host,omitempty"`
	Method []string `json:"method,omitempty"`
	Path   *string  `json:"path,omitempty"`
	Scheme *string  `json:"scheme,omitempty"`
	Port   *int     `json:"port,omitempty"`
}

// EgressRuleAction is what happens to a matching request.
type EgressRuleAction struct {
	Allow  bool                `json:"allow"`
	Audit  *string             `json:"audit,omitempty"`
	Inject []*EgressRuleInject `json:"inject,omitempty"`
}

// EgressRuleInject adds a credential header to an allowed HTTPS request.
type EgressRuleInject struct {
	Header string  `json:"header"`
	Secret string  `json:"secret"`
	Format *string `json:"format,omitempty"`
}

// Volume is a sandbox volume.
type Volume struct {
	Name         string        `json:"name,omitempty"`
	VolumeSource *VolumeSource `json:"volume_source,omitempty"`
}

// VolumeSource says what backs a volume; templates generate only
// empty_dir, the other kinds pass through.
type VolumeSource struct {
	EmptyDir       *EmptyDirVolumeSource `json:"empty_dir,omitempty"`
	SandboxPath    json.RawMessage       `json:"sandbox_path,omitempty"`
	HostDirVolumes json.RawMessage       `json:"host_dir_volumes,omitempty"`
	Image          json.RawMessage       `json:"image,omitempty"`
}

// EmptyDirVolumeSource is a scratch volume of at most SizeLimit. Medium is
// an enum sent as its number or name.
type EmptyDirVolumeSource struct {
	Medium    json.RawMessage `json:"medium,omitempty"`
	SizeLimit string          `json:"size_limit,omitempty"`
}

// SandboxImage names a container's image: for templates the ext4 artifact.
type SandboxImage struct {
	Image string `json:"image,omitempty"`
	// Name and Token are registry credentials; they reach the node as the
	// image's cube.master.image.username / .token annotations.
	Name              string            `json:"name,omitempty"`
	Token             string            `json:"token,omitempty"`
	StorageMedia      string            `json:"storage_media,omitempty"`
	WritableLayerSize string            `json:"writable_layer_size,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	RuntimeHandler    string            `json:"runtime_handler,omitempty"`
}

// Container is one container of a sandbox request.
type Container struct {
	Name            string            `json:"name,omitempty"`
	ID              string            `json:"id,omitempty"`
	Image           *SandboxImage     `json:"image,omitempty"`
	Command         []string          `json:"command,omitempty"`
	Args            []string          `json:"args,omitempty"`
	WorkingDir      string            `json:"working_dir,omitempty"`
	Envs            []*KeyValue       `json:"envs,omitempty"`
	VolumeMounts    []json.RawMessage `json:"volume_mounts,omitempty"`
	RLimit          *RLimit           `json:"r_limit,omitempty"`
	Resources       *Resource         `json:"resources,omitempty"`
	SecurityContext json.RawMessage   `json:"security_context,omitempty"`
	Probe           json.RawMessage   `json:"probe,omitempty"`
	DNSConfig       *DNSConfig        `json:"dns_config,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	Sysctls         map[string]string `json:"sysctls,omitempty"`
	Syscalls        json.RawMessage   `json:"syscalls,omitempty"`
	HostAliases     json.RawMessage   `json:"host_aliases,omitempty"`
	Prestop         json.RawMessage   `json:"prestop,omitempty"`
	Poststop        json.RawMessage   `json:"poststop,omitempty"`
	Hooks           json.RawMessage   `json:"hooks,omitempty"`
}

// ParseSandboxRequest decodes a sandbox create request. It accepts
// upstream's request_id spelling beside requestID and returns the
// snapshot_dir the JSON carries (may be empty). Bad input is a *FieldError.
func ParseSandboxRequest(b []byte) (*SandboxRequest, string, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, "", &FieldError{Field: "create_request", Reason: "is empty"}
	}
	var in struct {
		SandboxRequest
		RequestIDSnake string `json:"request_id"`
		SnapshotDir    string `json:"snapshot_dir"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, "", &FieldError{Field: "create_request", Reason: "not valid JSON: " + err.Error()}
	}
	out := in.SandboxRequest
	if out.RequestID == "" {
		out.RequestID = in.RequestIDSnake
	}
	return &out, in.SnapshotDir, nil
}
