package buildertest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/cubesandbox/templatecenter/ports"
)

// writeOCILayout writes an OCI image layout at dir holding one image, tag,
// made of the given layer files (plain tar or gzip, as their media types
// say), so that `umoci unpack --image dir:tag` can unpack exactly the
// blobs the flattener reads. Layer blobs are hard-linked when possible.
func writeOCILayout(dir, tag string, layers []ports.FlattenLayer) error {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	put := func(b []byte) (string, error) {
		sum := sha256.Sum256(b)
		d := hex.EncodeToString(sum[:])
		return "sha256:" + d, os.WriteFile(filepath.Join(blobs, d), b, 0o644)
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	var descs []desc
	var diffIDs []string
	for _, l := range layers {
		digest, size, diffID, err := layerDigests(l)
		if err != nil {
			return err
		}
		dst := filepath.Join(blobs, strings.TrimPrefix(digest, "sha256:"))
		if err := os.Link(l.Path, dst); err != nil && !os.IsExist(err) {
			if err := copyFile(l.Path, dst); err != nil {
				return err
			}
		}
		descs = append(descs, desc{MediaType: l.MediaType, Digest: digest, Size: size})
		diffIDs = append(diffIDs, diffID)
	}
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	cfgDigest, err := put(cfg)
	if err != nil {
		return err
	}
	man, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc{MediaType: "application/vnd.oci.image.config.v1+json", Digest: cfgDigest, Size: int64(len(cfg))},
		"layers": descs,
	})
	manDigest, err := put(man)
	if err != nil {
		return err
	}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []desc{{
		MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: manDigest, Size: int64(len(man)),
		Annotations: map[string]string{"org.opencontainers.image.ref.name": tag},
	}}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

// layerDigests returns a layer blob's digest and size and its DiffID (the
// digest of the uncompressed tar).
func layerDigests(l ports.FlattenLayer) (digest string, size int64, diffID string, err error) {
	f, err := os.Open(l.Path)
	if err != nil {
		return "", 0, "", err
	}
	defer f.Close()
	blob, raw := sha256.New(), sha256.New()
	tee := io.TeeReader(f, blob)
	var r io.Reader = tee
	if strings.HasSuffix(l.MediaType, "+gzip") {
		zr, err := gzip.NewReader(tee)
		if err != nil {
			return "", 0, "", fmt.Errorf("%s: %w", l.Path, err)
		}
		r = zr
	}
	if _, err := io.Copy(raw, r); err != nil {
		return "", 0, "", fmt.Errorf("%s: %w", l.Path, err)
	}
	if _, err := io.Copy(io.Discard, tee); err != nil { // the blob digest covers trailing bytes too
		return "", 0, "", err
	}
	fi, err := f.Stat()
	if err != nil {
		return "", 0, "", err
	}
	return "sha256:" + hex.EncodeToString(blob.Sum(nil)), fi.Size(), "sha256:" + hex.EncodeToString(raw.Sum(nil)), nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
