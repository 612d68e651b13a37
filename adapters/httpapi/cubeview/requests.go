package cubeview

import "github.com/cubesandbox/templatecenter/core"

// FromImageRequest is the body of POST /cube/template/from-image (upstream
// CreateTemplateFromImageReq).
type FromImageRequest struct {
	RequestID        string              `json:"requestID"`
	SourceImageRef   string              `json:"source_image_ref"`
	RegistryUsername string              `json:"registry_username,omitempty"`
	RegistryPassword string              `json:"registry_password,omitempty"`
	TemplateID       string              `json:"template_id,omitempty"`
	Alias            string              `json:"alias,omitempty"`
	InstanceType     string              `json:"instance_type,omitempty"`
	NetworkType      string              `json:"network_type,omitempty"`
	CubeVSContext    *core.CubeVSContext `json:"cubevs_context,omitempty"`
	// CubeNetworkConfig is the policy under the newer key; it wins.
	CubeNetworkConfig  *core.CubeVSContext      `json:"cube_network_config,omitempty"`
	WritableLayerSize  string                   `json:"writable_layer_size,omitempty"`
	ExposedPorts       []int32                  `json:"exposed_ports,omitempty"`
	DistributionScope  []string                 `json:"distribution_scope,omitempty"`
	ContainerOverrides *core.ContainerOverrides `json:"container_overrides,omitempty"`
	Platform           string                   `json:"platform,omitempty"`
	// WithCubeCA asks for the CubeEgress root CA to be baked in (upstream
	// default true).
	WithCubeCA *bool `json:"with_cube_ca,omitempty"`
	Wait       bool  `json:"wait,omitempty"`
	// Backend is the template's copy-on-write backend (xfs or s3);
	// EnableIvshmem becomes the cube.master.enable_ivshmem annotation of
	// its sandbox request.
	Backend       string `json:"backend,omitempty"`
	EnableIvshmem *bool  `json:"enable_ivshmem,omitempty"`
}

// Request is the domain request the body asks for. A policy under
// cube_network_config wins over one under cubevs_context.
func (r *FromImageRequest) Request() *core.FromImageRequest {
	policy := r.CubeVSContext
	if r.CubeNetworkConfig != nil {
		policy = r.CubeNetworkConfig
	}
	return &core.FromImageRequest{
		RequestID: r.RequestID, SourceImageRef: r.SourceImageRef, RegistryUsername: r.RegistryUsername,
		RegistryPassword: r.RegistryPassword, TemplateID: r.TemplateID, Alias: r.Alias, InstanceType: r.InstanceType,
		NetworkType: r.NetworkType, CubeVSContext: policy, WritableLayerSize: r.WritableLayerSize,
		ExposedPorts: r.ExposedPorts, DistributionScope: r.DistributionScope, ContainerOverrides: r.ContainerOverrides,
		Platform: r.Platform, Wait: r.Wait, Backend: r.Backend, EnableIvshmem: r.EnableIvshmem,
		WithCubeCA: r.WithCubeCA,
	}
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

// AliasRequest is the body of PUT /cube/template/{template_id}/alias; an
// absent, null or empty alias clears it.
type AliasRequest struct {
	RequestID string  `json:"requestID"`
	Alias     *string `json:"alias"`
}
