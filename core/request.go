package core

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Defaults applied by NormalizeFromImageRequest.
const (
	DefaultInstanceType = "cubebox"
	DefaultNetworkType  = "tap"
	// MaxCustomExposedPorts is upstream's limit on ports other than the
	// reserved ones.
	MaxCustomExposedPorts = 3
	// MaxTemplateIDLen is the width of the template_id columns.
	MaxTemplateIDLen = 128
)

// reservedPorts are exposed by every sandbox and do not count against
// MaxCustomExposedPorts.
var reservedPorts = []int32{8080, 32000}

// KeyValue is an environment entry.
type KeyValue struct {
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
}

// DNSConfig overrides the sandbox resolver.
type DNSConfig struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Resource is a container's cpu/memory request.
type Resource struct {
	CPU   string    `json:"cpu,omitempty"`
	Mem   string    `json:"mem,omitempty"`
	Limit *Resource `json:"limit,omitempty"`
}

// RLimit carries resource limits.
type RLimit struct {
	NoFile uint64 `json:"no_file,omitempty"`
}

// ContainerOverrides replace values derived from the image config. Nested
// objects this service only passes through are kept as raw JSON.
type ContainerOverrides struct {
	Command         []string          `json:"command,omitempty"`
	Args            []string          `json:"args,omitempty"`
	WorkingDir      string            `json:"working_dir,omitempty"`
	Envs            []*KeyValue       `json:"envs,omitempty"`
	DNSConfig       *DNSConfig        `json:"dns_config,omitempty"`
	Resources       *Resource         `json:"resources,omitempty"`
	SecurityContext json.RawMessage   `json:"security_context,omitempty"`
	Probe           json.RawMessage   `json:"probe,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	VolumeMounts    json.RawMessage   `json:"volume_mounts,omitempty"`
	RLimit          *RLimit           `json:"r_limit,omitempty"`
}

// CubeVSContext is the sandbox network policy (not part of the fingerprint):
// upstream's cubevs_context, renamed cube_network_config in newer masters,
// which added the L7 rules and the ingress-only fields.
type CubeVSContext struct {
	AllowInternetAccess *bool `json:"allowInternetAccess,omitempty"`
	// AllowPublicTraffic and MaskRequestHost concern ingress (the proxy);
	// they are kept in stored requests but never sent to a node.
	AllowPublicTraffic *bool         `json:"allowPublicTraffic,omitempty"`
	AllowOut           []string      `json:"allowOut,omitempty"`
	DenyOut            []string      `json:"denyOut,omitempty"`
	Rules              []*EgressRule `json:"rules,omitempty"`
	MaskRequestHost    *string       `json:"maskRequestHost,omitempty"`
}

// FromImageRequest is the body of POST /cube/template/from-image
// (upstream CreateTemplateFromImageReq).
type FromImageRequest struct {
	RequestID          string              `json:"requestID,omitempty"`
	SourceImageRef     string              `json:"source_image_ref,omitempty"`
	RegistryUsername   string              `json:"registry_username,omitempty"`
	RegistryPassword   string              `json:"registry_password,omitempty"`
	TemplateID         string              `json:"template_id,omitempty"`
	Alias              string              `json:"alias,omitempty"`
	InstanceType       string              `json:"instance_type,omitempty"`
	NetworkType        string              `json:"network_type,omitempty"`
	CubeVSContext      *CubeVSContext      `json:"cubevs_context,omitempty"`
	WritableLayerSize  string              `json:"writable_layer_size,omitempty"`
	ExposedPorts       []int32             `json:"exposed_ports,omitempty"`
	DistributionScope  NodeScope           `json:"distribution_scope,omitempty"`
	ContainerOverrides *ContainerOverrides `json:"container_overrides,omitempty"`
	// Platform is the OS/ARCH to resolve the image for (default linux/amd64).
	Platform string `json:"platform,omitempty"`
	Wait     bool   `json:"wait,omitempty"`
	// Backend is the copy-on-write backend of the template and its
	// sandboxes (xfs or s3; empty keeps the node's default, xfs). It is
	// not part of the fingerprint: the rootfs is the same.
	Backend string `json:"backend,omitempty"`
	// EnableIvshmem boots the template's build sandbox with ivshmem
	// (upstream's --enable-ivshmem); only true is kept. Not part of the
	// fingerprint either.
	EnableIvshmem *bool `json:"enable_ivshmem,omitempty"`
	// WithCubeCA asks for the CubeEgress root CA to be baked into the
	// rootfs (upstream's with_cube_ca); nil means true. Only false is
	// kept. The CA's fingerprint, not this flag, is part of the
	// fingerprint.
	WithCubeCA *bool `json:"with_cube_ca,omitempty"`
}

var (
	templateIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	quantityPattern   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T|k|m|g|t)?$`)
)

// IDGenerator supplies the random part of generated template ids.
type IDGenerator func() string

// NormalizedRequest is a FromImageRequest that NormalizeFromImageRequest
// checked and completed. Only that function makes one, and it is called
// where a request enters (the control plane's API, the data plane's build
// route, a stored request read back, the one-shot build), so what comes
// after (submitting the job, the canonical form, dispatching and running
// the build, the fingerprint) takes a NormalizedRequest and cannot be
// handed a request nobody checked. The zero value holds no request.
type NormalizedRequest struct{ req *FromImageRequest }

// Request returns a copy of the normalized request. Changing the copy
// changes nothing in n; its slices and nested values are n's own and are
// only to be read.
func (n NormalizedRequest) Request() *FromImageRequest {
	if n.req == nil {
		return nil
	}
	c := *n.req
	return &c
}

// IsZero reports whether n holds no request.
func (n NormalizedRequest) IsZero() bool { return n.req == nil }

// WithCredentials returns n with other registry credentials: they are no
// part of the canonical request (the password is never stored), so a
// rebuild passes on the template's own or a redo caller's.
func (n NormalizedRequest) WithCredentials(username, password string) NormalizedRequest {
	c := n.Request()
	c.RegistryUsername, c.RegistryPassword = username, password
	return NormalizedRequest{req: c}
}

// WithRequestID returns n answering another call's request id (no part of
// the canonical request either).
func (n NormalizedRequest) WithRequestID(id string) (NormalizedRequest, error) {
	if err := ValidateRequestID(id); err != nil {
		return NormalizedRequest{}, err
	}
	c := n.Request()
	c.RequestID = id
	return NormalizedRequest{req: c}, nil
}

// NormalizeFromImageRequest validates req and fills defaults in place:
// instance and network type, sorted de-duplicated ports, a generated
// template id (tpl- + 24 hex) when none is given, the default platform. It
// returns the result as a NormalizedRequest of its own, which later
// changes to req do not reach.
func NormalizeFromImageRequest(req *FromImageRequest, newHex IDGenerator) (NormalizedRequest, error) {
	if err := normalize(req, newHex); err != nil {
		return NormalizedRequest{}, err
	}
	c := *req
	c.ExposedPorts = slices.Clone(req.ExposedPorts)
	c.DistributionScope = slices.Clone(req.DistributionScope)
	return NormalizedRequest{req: &c}, nil
}

func normalize(req *FromImageRequest, newHex IDGenerator) error {
	if req == nil {
		return fieldErr("body", "request is empty")
	}
	if err := ValidateRequestID(req.RequestID); err != nil {
		return err
	}
	req.SourceImageRef = strings.TrimSpace(req.SourceImageRef)
	if err := ValidateImageRef(req.SourceImageRef); err != nil {
		return err
	}
	req.WritableLayerSize = strings.TrimSpace(req.WritableLayerSize)
	if err := validateWritableLayerSize(req.WritableLayerSize); err != nil {
		return err
	}
	req.TemplateID = strings.TrimSpace(req.TemplateID)
	if req.TemplateID == "" {
		if newHex == nil {
			return ErrTemplateIDRequired
		}
		h := newHex()
		if len(h) < 24 {
			return fmt.Errorf("template id generator returned %d hex chars, need 24", len(h))
		}
		req.TemplateID = "tpl-" + h[:24]
	}
	if err := ValidateTemplateID(req.TemplateID); err != nil {
		return err
	}
	if req.Alias != "" {
		if err := ValidateNewAlias(req.Alias); err != nil {
			return err
		}
	}
	if req.InstanceType == "" {
		req.InstanceType = DefaultInstanceType
	}
	if err := validateName("instance_type", req.InstanceType); err != nil {
		return err
	}
	if req.NetworkType == "" {
		req.NetworkType = DefaultNetworkType
	}
	if err := validateName("network_type", req.NetworkType); err != nil {
		return err
	}
	if req.Platform == "" {
		req.Platform = DefaultPlatform
	}
	if err := ValidatePlatform(req.Platform); err != nil {
		return err
	}
	ports, err := normalizePorts(req.ExposedPorts)
	if err != nil {
		return err
	}
	req.ExposedPorts = ports
	if req.Backend != "" {
		if req.Backend, err = NormalizeBackend(req.Backend); err != nil {
			return err
		}
	}
	// As upstream: false means the default, so it is not stored (and two
	// requests differing only in an explicit false are the same request).
	if req.EnableIvshmem != nil && !*req.EnableIvshmem {
		req.EnableIvshmem = nil
	}
	if req.WithCubeCA != nil && *req.WithCubeCA {
		req.WithCubeCA = nil
	}
	return NormalizeScope(req.DistributionScope)
}

// Limits of NormalizeFromImageRequest, the widths of the job columns the
// values are stored in.
const (
	// MaxNameLen bounds instance_type, network_type and platform.
	MaxNameLen = 64
	// MaxWritableLayerGi is the largest writable layer, 1 PiB.
	MaxWritableLayerGi = 1 << 20
)

// ValidateRequestID checks a caller's request id: at most MaxRequestIDLen
// characters (the request_id column), without control characters.
func ValidateRequestID(id string) error {
	if len(id) > MaxRequestIDLen {
		return fieldErr("requestID", "longer than %d characters", MaxRequestIDLen)
	}
	for _, r := range id {
		if r < ' ' || r == 0x7f || unicode.IsControl(r) {
			return fieldErr("requestID", "holds control characters")
		}
	}
	return nil
}

// validateName checks an instance or network type: at most MaxNameLen of
// letters, digits, '.', '_' and '-'.
func validateName(field, v string) error {
	if len(v) > MaxNameLen || !templateIDPattern.MatchString(v) {
		return fieldErr(field, "%q must be at most %d of letters, digits, '.', '_' and '-'", clip(v), MaxNameLen)
	}
	return nil
}

// validateWritableLayerSize checks a size such as 20Gi: a quantity above
// zero and at most MaxWritableLayerGi GiB.
func validateWritableLayerSize(q string) error {
	if q == "" {
		return fieldErr("writable_layer_size", "is required (for example 20Gi)")
	}
	if len(q) > MaxNameLen || !quantityPattern.MatchString(q) {
		return fieldErr("writable_layer_size", "%q is not a size such as 20Gi or 512Mi", clip(q))
	}
	num := strings.TrimRight(q, "KMGTkmgti")
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f <= 0 {
		return fieldErr("writable_layer_size", "%q is not a size above zero", q)
	}
	gi := f // a bare number is GiB, as the node reads it
	switch strings.ToLower(strings.TrimPrefix(q, num)) {
	case "ti", "t":
		gi = f * 1024
	case "mi", "m":
		gi = f / 1024
	case "ki", "k":
		gi = f / (1024 * 1024)
	}
	if gi > MaxWritableLayerGi {
		return fieldErr("writable_layer_size", "%q is larger than %d Ti", q, MaxWritableLayerGi/1024)
	}
	return nil
}

func hasControlOrSpace(s string) bool {
	for _, r := range s {
		if r <= ' ' || r == 0x7f || unicode.IsSpace(r) || unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// clip shortens a value quoted back in an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func normalizePorts(in []int32) ([]int32, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := slices.Clone(in)
	for _, p := range out {
		if p < 1 || p > 65535 {
			return nil, fieldErr("exposed_ports", "port %d is outside 1..65535", p)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	custom := 0
	for _, p := range out {
		if !slices.Contains(reservedPorts, p) {
			custom++
		}
	}
	if custom > MaxCustomExposedPorts {
		return nil, fieldErr("exposed_ports", "%d custom ports, at most %d allowed", custom, MaxCustomExposedPorts)
	}
	return out, nil
}

// ValidateTemplateID checks a template id.
func ValidateTemplateID(id string) error {
	if id == "" {
		return ErrTemplateIDRequired
	}
	if len(id) > MaxTemplateIDLen {
		return fieldErr("template_id", "longer than %d characters", MaxTemplateIDLen)
	}
	if !templateIDPattern.MatchString(id) {
		return fieldErr("template_id", "%q may hold only letters, digits, '.', '_' and '-'", id)
	}
	return nil
}

// CanonicalRequestJSON is the stored request snapshot and idempotency key:
// the normalized request without registry_password and requestID, marshaled
// with a fixed field order (struct order; map keys sorted by encoding/json).
func CanonicalRequestJSON(n NormalizedRequest) (string, error) {
	if n.IsZero() {
		return "", fieldErr("request", "is empty")
	}
	c := *n.req
	c.RegistryPassword = ""
	c.RequestID = ""
	c.Wait = false
	b, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("marshal request: %w", err)
	}
	return string(b), nil
}

// DecodeRequestJSON parses a stored request snapshot.
func DecodeRequestJSON(s string) (*FromImageRequest, error) {
	var r FromImageRequest
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("decode request_json: %w", err)
	}
	return &r, nil
}
