package data_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
)

func TestUploadRecorder(t *testing.T) {
	ctx := context.Background()
	st, err := entstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "tc.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	sha := strings.Repeat("ab", 32)
	for _, a := range []*core.Artifact{
		{ArtifactID: "rfs-known", Fingerprint: strings.Repeat("01", 32), Ext4SHA256: sha, Ext4SizeBytes: 10, Ext4Path: "/old/rfs-known.ext4", StorageBackend: "local", Status: core.ArtifactReady},
		{ArtifactID: "rfs-blank", Fingerprint: strings.Repeat("02", 32), Status: core.ArtifactReady},
	} {
		if err := st.Artifacts().Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	rec := data.UploadRecorder{Artifacts: st.Artifacts()}
	up := core.UploadedArtifact{ArtifactID: "rfs-known", ObjectKey: "rfs-known/rfs-known.ext4", StorageBackend: "s3", SHA256: sha, SizeBytes: 10}
	for range 2 { // idempotent
		if err := rec.RecordUpload(ctx, up); err != nil {
			t.Fatal(err)
		}
	}
	a, err := st.Artifacts().Get(ctx, "rfs-known")
	if err != nil {
		t.Fatal(err)
	}
	if a.ObjectKey != up.ObjectKey || a.StorageBackend != "s3" || a.Ext4Path != "/old/rfs-known.ext4" {
		t.Fatalf("row after upload = %+v", a)
	}

	for name, bad := range map[string]core.UploadedArtifact{
		"other sha":  {ArtifactID: "rfs-known", ObjectKey: "k", StorageBackend: "s3", SHA256: strings.Repeat("cd", 32), SizeBytes: 10},
		"other size": {ArtifactID: "rfs-known", ObjectKey: "k", StorageBackend: "s3", SHA256: sha, SizeBytes: 11},
	} {
		if err := rec.RecordUpload(ctx, bad); !errors.Is(err, core.ErrConflict) {
			t.Errorf("%s: err = %v, want ErrConflict", name, err)
		}
	}
	if a, _ := st.Artifacts().Get(ctx, "rfs-known"); a.ObjectKey != up.ObjectKey {
		t.Fatalf("a refused upload changed the row: %+v", a)
	}

	// A row without sha/size takes them from the verified upload.
	if err := rec.RecordUpload(ctx, core.UploadedArtifact{ArtifactID: "rfs-blank", ObjectKey: "kb", StorageBackend: "s3", SHA256: sha, SizeBytes: 7}); err != nil {
		t.Fatal(err)
	}
	if b, _ := st.Artifacts().Get(ctx, "rfs-blank"); b.Ext4SHA256 != sha || b.Ext4SizeBytes != 7 || b.ObjectKey != "kb" {
		t.Fatalf("blank row after upload = %+v", b)
	}
	if err := rec.RecordUpload(ctx, core.UploadedArtifact{ArtifactID: "rfs-none", SHA256: sha, SizeBytes: 1}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("unknown artifact: %v", err)
	}
}
