package pipeline

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Injection facts shared with upstream: the opt-in annotation, where the
// agent lands in the image, and the largest agent accepted.
const (
	InjectEnvdAnnotation = "cube.master.inject_envd"
	EnvdInImagePath      = "/usr/local/bin/envd"
	MaxEnvdBytes         = core.MaxEnvdBytes
	// CAInImagePath is where an injected CA bundle is written.
	CAInImagePath = "/usr/local/share/ca-certificates/cube-egress-ca.crt"
	maxCABytes    = 1 << 20
)

// Injection is content added to the image at build time. Whatever is
// injected is part of the fingerprint.
type Injection struct {
	// Envd is the agent binary; EnvdClaimedSHA256, if set, must match the
	// recomputed digest (the caller's value is never trusted on its own).
	Envd              []byte
	EnvdClaimedSHA256 string
	// CABundle is a PEM bundle to trust inside the image.
	CABundle []byte
}

// WantsEnvd reports whether the request opted in to envd injection.
func WantsEnvd(req *core.FromImageRequest) bool {
	return req != nil && req.ContainerOverrides != nil &&
		req.ContainerOverrides.Annotations[InjectEnvdAnnotation] == "true"
}

type injected struct {
	envdSHA256 string
	caSHA256   string
}

func (in Injection) digests() (injected, error) {
	var out injected
	if len(in.Envd) > 0 {
		if len(in.Envd) > MaxEnvdBytes {
			return out, &core.FieldError{Field: "envd_data", Reason: fmt.Sprintf("%d bytes, at most %d", len(in.Envd), MaxEnvdBytes)}
		}
		sum := sha256.Sum256(in.Envd)
		out.envdSHA256 = hex.EncodeToString(sum[:])
		if c := strings.ToLower(strings.TrimSpace(in.EnvdClaimedSHA256)); c != "" && c != out.envdSHA256 {
			return out, &core.FieldError{Field: "envd_sha256", Reason: "does not match the sha256 of envd_data"}
		}
	} else if in.EnvdClaimedSHA256 != "" {
		return out, &core.FieldError{Field: "envd_data", Reason: "envd_sha256 given without envd_data"}
	}
	if len(in.CABundle) > 0 {
		if len(in.CABundle) > maxCABytes {
			return out, &core.FieldError{Field: "ca_bundle", Reason: fmt.Sprintf("%d bytes, at most %d", len(in.CABundle), maxCABytes)}
		}
		if !bytes.Contains(in.CABundle, []byte("-----BEGIN CERTIFICATE-----")) {
			return out, &core.FieldError{Field: "ca_bundle", Reason: "holds no PEM certificate"}
		}
		sum := sha256.Sum256(in.CABundle)
		out.caSHA256 = hex.EncodeToString(sum[:])
	}
	return out, nil
}

func (in Injection) empty() bool { return len(in.Envd) == 0 && len(in.CABundle) == 0 }

// appendLayer adds the injected files, if any, as the last layer.
func (in Injection) appendLayer(layers []ports.FlattenLayer, scratch string, mtime time.Time) ([]ports.FlattenLayer, error) {
	if in.empty() {
		return layers, nil
	}
	f := filepath.Join(scratch, "inject.tar")
	if err := in.writeLayer(f, mtime); err != nil {
		return nil, err
	}
	return append(layers, ports.FlattenLayer{Path: f, MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: "injected"}), nil
}

// writeLayer writes the injected files as an uncompressed tar layer, applied
// after the image's own layers so it overrides whatever the image holds at
// those paths. It holds no directory entries: parents the image already has
// keep their owner, mode and mtime, and missing ones are synthesized by the
// flattener.
func (in Injection) writeLayer(file string, mtime time.Time) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(p string, mode int64, data []byte) error {
		rel := strings.TrimPrefix(p, "/")
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if len(in.Envd) > 0 {
		if err := add(EnvdInImagePath, 0o755, in.Envd); err != nil {
			return fmt.Errorf("inject envd: %w", err)
		}
	}
	if len(in.CABundle) > 0 {
		if err := add(CAInImagePath, 0o644, in.CABundle); err != nil {
			return fmt.Errorf("inject ca bundle: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o600)
}
