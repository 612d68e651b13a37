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
// agent lands in the image and with which mode, and the largest agent
// accepted.
const (
	InjectEnvdAnnotation = "cube.master.inject_envd"
	EnvdInImagePath      = core.EnvdInImagePath
	EnvdMode             = 0o755
	MaxEnvdBytes         = core.MaxEnvdBytes
)

// Injection is content added to the image at build time. Whatever is
// injected is part of the fingerprint.
type Injection struct {
	// Envd is the agent binary; EnvdClaimedSHA256, if set, must match the
	// recomputed digest (the caller's value is never trusted on its own).
	Envd              []byte
	EnvdClaimedSHA256 string
	// CA is the CubeEgress root CA (one PEM certificate) baked into the
	// image's trust stores as upstream bakes it (cabake.go); its
	// fingerprint (sha256 of the DER) is part of the artifact's.
	CA []byte
}

// WantsEnvd reports whether the request opted in to envd injection.
func WantsEnvd(req *core.FromImageRequest) bool {
	return req != nil && req.ContainerOverrides != nil &&
		req.ContainerOverrides.Annotations[InjectEnvdAnnotation] == "true"
}

type injected struct {
	envdSHA256 string
	ca         *core.CubeCA
}

// caFingerprint is the CA's fingerprint, "" without one.
func (in injected) caFingerprint() string {
	if in.ca == nil {
		return ""
	}
	return in.ca.Fingerprint
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
	if in.CA != nil {
		ca, err := core.ParseCubeCA(in.CA)
		if err != nil {
			return out, err
		}
		out.ca = ca
	}
	return out, nil
}

// appendLayer adds the injected envd, if any, as the last layer.
func (in Injection) appendLayer(layers []ports.FlattenLayer, scratch string, mtime time.Time) ([]ports.FlattenLayer, error) {
	if len(in.Envd) == 0 {
		return layers, nil
	}
	l, err := EnvdLayer(in.Envd, scratch, mtime)
	if err != nil {
		return nil, err
	}
	return append(layers, l), nil
}

// EnvdLayer writes the envd binary as a layer of its own in dir: applied
// after the image's layers, it puts the agent at EnvdInImagePath with
// EnvdMode, owned by root, whatever the image held there.
func EnvdLayer(envd []byte, dir string, mtime time.Time) (ports.FlattenLayer, error) {
	f := filepath.Join(dir, "inject.tar")
	if err := writeEnvdLayer(f, envd, mtime); err != nil {
		return ports.FlattenLayer{}, err
	}
	return ports.FlattenLayer{Path: f, MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: "injected"}, nil
}

// writeEnvdLayer writes envd as an uncompressed tar layer. It holds no
// directory entries: parents the image already has keep their owner, mode
// and mtime, and missing ones are synthesized by the flattener (0755, as
// upstream creates them).
func writeEnvdLayer(file string, envd []byte, mtime time.Time) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rel := strings.TrimPrefix(EnvdInImagePath, "/")
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: EnvdMode, Size: int64(len(envd)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return fmt.Errorf("inject envd: %w", err)
	}
	if _, err := tw.Write(envd); err != nil {
		return fmt.Errorf("inject envd: %w", err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o600)
}
