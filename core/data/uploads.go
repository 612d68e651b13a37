package data

import (
	"context"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// UploadRecorder records a migrate upload on the artifact row: where the
// bytes now live (object_key, storage_backend). Bytes that disagree with
// the row's recorded sha256 or size are refused (core.ErrConflict), and
// recording the same upload twice changes nothing.
type UploadRecorder struct {
	Artifacts ports.ArtifactRepository
}

// RecordUpload applies the rule to u's artifact row.
func (r UploadRecorder) RecordUpload(ctx context.Context, u core.UploadedArtifact) error {
	_, err := r.Artifacts.Update(ctx, u.ArtifactID, func(a *core.Artifact) error {
		if a.Ext4SHA256 != "" && !strings.EqualFold(a.Ext4SHA256, u.SHA256) {
			return fmt.Errorf("artifact %s records sha256 %s, the upload has %s: %w", a.ArtifactID, a.Ext4SHA256, u.SHA256, core.ErrConflict)
		}
		if a.Ext4SizeBytes > 0 && a.Ext4SizeBytes != u.SizeBytes {
			return fmt.Errorf("artifact %s records %d bytes, the upload has %d: %w", a.ArtifactID, a.Ext4SizeBytes, u.SizeBytes, core.ErrConflict)
		}
		a.ObjectKey, a.StorageBackend = u.ObjectKey, u.StorageBackend
		if a.Ext4SHA256 == "" {
			a.Ext4SHA256 = strings.ToLower(u.SHA256)
		}
		if a.Ext4SizeBytes == 0 {
			a.Ext4SizeBytes = u.SizeBytes
		}
		return nil
	})
	return err
}
