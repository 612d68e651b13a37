package hostfiles

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestLocalArtifacts(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("ext4"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inside := filepath.Join(root, "rfs-a", "rfs-a.ext4")
	write(inside)
	secret := filepath.Join(outside, "secret.ext4")
	write(secret)
	// A symlink inside the root that points outside must not be followed.
	if err := os.Symlink(secret, filepath.Join(root, "link.ext4")); err != nil {
		t.Fatal(err)
	}
	l, err := NewLegacyArtifacts([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	rc, size, err := l.Open(ctx, &core.Artifact{Ext4Path: inside})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "ext4" || size != 4 {
		t.Fatalf("read %q size %d", b, size)
	}

	for _, p := range []string{
		"", "relative/x.ext4", secret, root, filepath.Join(root, "..", filepath.Base(outside), "secret.ext4"),
		root + "-sibling/x.ext4", filepath.Join(root, "missing.ext4"),
	} {
		if _, _, err := l.Open(ctx, &core.Artifact{Ext4Path: p}); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Open(%q) = %v, want ErrNotFound", p, err)
		}
	}
	if _, _, err := l.Open(ctx, &core.Artifact{Ext4Path: filepath.Join(root, "link.ext4")}); err == nil {
		t.Error("symlink escaping the root was opened")
	}

	// Remove: never outside the root, never a file-backed store's copy.
	if err := l.Remove(ctx, &core.Artifact{Ext4Path: secret, StorageBackend: "s3"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(ctx, &core.Artifact{Ext4Path: inside, StorageBackend: "file"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{secret, inside} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s was removed: %v", p, err)
		}
	}
	if err := l.Remove(ctx, &core.Artifact{Ext4Path: inside, StorageBackend: "s3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(inside)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("artifact dir left behind: %v", err)
	}
	// Removing again is fine.
	if err := l.Remove(ctx, &core.Artifact{Ext4Path: inside, StorageBackend: "s3"}); err != nil {
		t.Fatal(err)
	}

	none, _ := NewLegacyArtifacts(nil)
	if _, _, err := none.Open(ctx, &core.Artifact{Ext4Path: inside}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("no roots: %v", err)
	}
}
