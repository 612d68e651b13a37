package core

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// BuilderFormatVersion is folded into the fingerprint so that a change in how
// this service lays out an ext4 never reuses an artifact made the old way.
// Bump it whenever a builder's output for the same input changes.
const BuilderFormatVersion = "1"

// SpecInput is everything that determines an artifact's bytes.
type SpecInput struct {
	SourceImageDigest  string
	WritableLayerSize  string
	ExposedPorts       []int32
	InstanceType       string
	NetworkType        string
	ContainerOverrides *ContainerOverrides
	// CAFingerprint and EnvdSHA256 describe injected content (upstream's
	// cube_egress_ca_fingerprint and envd_binary_sha256).
	CAFingerprint string
	EnvdSHA256    string
	// Platform is the resolved OS/ARCH; the default (linux/amd64) is left
	// out so fingerprints of default-platform specs keep upstream's value.
	Platform string
	// BuilderFormat is BuilderFormatVersion; "" keeps upstream's value.
	BuilderFormat string
	// Builder is the builder's Format (ports.RootfsBuilder): which
	// builder, at which output version, writes the bytes.
	Builder string
}

// fingerprintShape is upstream's marshaled struct: field order and tags must
// not change, or existing rows stop matching. New fields go at the end and
// are omitempty.
type fingerprintShape struct {
	SourceImageDigest  string              `json:"source_image_digest"`
	WritableLayerSize  string              `json:"writable_layer_size"`
	ExposedPorts       []int32             `json:"exposed_ports,omitempty"`
	InstanceType       string              `json:"instance_type"`
	NetworkType        string              `json:"network_type"`
	ContainerOverrides *ContainerOverrides `json:"container_overrides,omitempty"`
	CAFingerprint      string              `json:"cube_egress_ca_fingerprint,omitempty"`
	EnvdSHA256         string              `json:"envd_binary_sha256,omitempty"`
	Platform           string              `json:"target_platform,omitempty"`
	BuilderFormat      string              `json:"builder_format_version,omitempty"`
	Builder            string              `json:"builder,omitempty"`
}

// Fingerprint returns the template spec fingerprint: lowercase hex sha256 of
// the JSON of fingerprintShape. Credentials, template id, distribution scope,
// network policy and the image reference (only its digest counts) are not
// part of it.
func Fingerprint(in SpecInput) (string, error) {
	if !strings.HasPrefix(in.SourceImageDigest, "sha256:") || len(in.SourceImageDigest) != len("sha256:")+64 {
		return "", fieldErr("source_image_digest", "%q is not a sha256 digest", in.SourceImageDigest)
	}
	platform := in.Platform
	if platform == DefaultPlatform {
		platform = ""
	}
	b, err := json.Marshal(fingerprintShape{
		SourceImageDigest:  in.SourceImageDigest,
		WritableLayerSize:  in.WritableLayerSize,
		ExposedPorts:       in.ExposedPorts,
		InstanceType:       in.InstanceType,
		NetworkType:        in.NetworkType,
		ContainerOverrides: in.ContainerOverrides,
		CAFingerprint:      in.CAFingerprint,
		EnvdSHA256:         in.EnvdSHA256,
		Platform:           platform,
		BuilderFormat:      in.BuilderFormat,
		Builder:            in.Builder,
	})
	if err != nil {
		return "", fmt.Errorf("marshal fingerprint: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ArtifactIDFor is "rfs-" + the first 24 hex characters of the fingerprint.
func ArtifactIDFor(fingerprint string) (string, error) {
	if len(fingerprint) < 24 {
		return "", fieldErr("template_spec_fingerprint", "%q is too short", fingerprint)
	}
	return "rfs-" + fingerprint[:24], nil
}

// SpecInputFor collects the fingerprint input from a normalized request,
// what the build resolved and the builder's format. n must hold a request.
func SpecInputFor(n NormalizedRequest, digest, caFingerprint, envdSHA256, builderFormat string) SpecInput {
	req := n.req
	return SpecInput{
		SourceImageDigest:  digest,
		WritableLayerSize:  req.WritableLayerSize,
		ExposedPorts:       req.ExposedPorts,
		InstanceType:       req.InstanceType,
		NetworkType:        req.NetworkType,
		ContainerOverrides: req.ContainerOverrides,
		CAFingerprint:      caFingerprint,
		EnvdSHA256:         envdSHA256,
		Platform:           req.Platform,
		BuilderFormat:      BuilderFormatVersion,
		Builder:            builderFormat,
	}
}

// BuildInputs are the fingerprint inputs a build decides beyond its
// request: the digest the image resolved to, the digests of what it
// injected and the builder's formats. A BUILT report carries them, so the
// control plane can recompute the fingerprint from the job's own request
// (FingerprintOf) and bind only the artifact of that spec.
type BuildInputs struct {
	SourceImageDigest string
	CAFingerprint     string
	EnvdSHA256        string
	// BuilderFormat is BuilderFormatVersion for this service's builds.
	BuilderFormat string
	// Builder is the builder's Format (ports.RootfsBuilder).
	Builder string
}

// FingerprintOf is the fingerprint of a build of req made
// from in: the one fingerprint every build and every check computes.
func FingerprintOf(req NormalizedRequest, in BuildInputs) (string, error) {
	spec := SpecInputFor(req, in.SourceImageDigest, in.CAFingerprint, in.EnvdSHA256, in.Builder)
	spec.BuilderFormat = in.BuilderFormat
	return Fingerprint(spec)
}
