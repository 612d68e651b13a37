package hostfiles

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestEnvdFile(t *testing.T) {
	dir := t.TempDir()
	if _, ok := NewEnvdFile(dir); ok {
		t.Fatal("source for a directory without envd")
	}
	if _, ok := NewEnvdFile(""); ok {
		t.Fatal("source for an empty directory setting")
	}
	if err := os.Mkdir(filepath.Join(dir, "envd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := NewEnvdFile(dir); ok {
		t.Fatal("source for a directory named envd")
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "envd"), []byte("\x7fELF v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, ok := NewEnvdFile(other)
	if !ok {
		t.Fatal("no source for an existing envd binary")
	}
	if b, err := src.Envd(t.Context()); err != nil || string(b) != "\x7fELF v1" {
		t.Fatalf("Envd = %q, %v", b, err)
	}
	// Read at each use: a replaced binary needs no restart.
	if err := os.WriteFile(filepath.Join(other, "envd"), []byte("\x7fELF v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, _ := src.Envd(t.Context()); string(b) != "\x7fELF v2" {
		t.Fatalf("after replacing: %q", b)
	}
	// Removed or emptied: typed errors, never stale bytes.
	if err := os.WriteFile(filepath.Join(other, "envd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Envd(t.Context()); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("empty binary: %v", err)
	}
	if err := os.Remove(filepath.Join(other, "envd")); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Envd(t.Context()); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("removed binary: %v", err)
	}
}
