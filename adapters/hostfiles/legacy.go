package hostfiles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// LegacyArtifacts is ports.LegacyArtifacts: legacy artifacts on the
// master's own disk, for migrate. An artifact's
// ext4_path comes from the database, so it is only ever opened or removed
// when it lies inside one of the configured roots, and then through an
// os.Root, so neither ".." nor a symlink can lead outside.
type LegacyArtifacts struct {
	roots []string // absolute, cleaned
}

var _ ports.LegacyArtifacts = (*LegacyArtifacts)(nil)

// NewLegacyArtifacts serves the files under dirs (CUBE_MASTER_LOCAL_ARTIFACT_DIR).
func NewLegacyArtifacts(dirs []string) (*LegacyArtifacts, error) {
	l := &LegacyArtifacts{}
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("local artifact dir %q: %w", d, err)
		}
		l.roots = append(l.roots, filepath.Clean(abs))
	}
	return l, nil
}

// locate splits p into a configured root and a path local to it.
func (l *LegacyArtifacts) locate(p string) (root, rel string, ok bool) {
	if p == "" || !filepath.IsAbs(p) {
		return "", "", false
	}
	p = filepath.Clean(p)
	for _, r := range l.roots {
		rel, err := filepath.Rel(r, p)
		if err == nil && rel != "." && filepath.IsLocal(rel) {
			return r, rel, true
		}
	}
	return "", "", false
}

// Open implements ports.LegacyArtifacts.
func (l *LegacyArtifacts) Open(_ context.Context, a *core.Artifact) (io.ReadCloser, int64, error) {
	if len(l.roots) == 0 {
		return nil, 0, fmt.Errorf("no local artifact dir is configured (CUBE_MASTER_LOCAL_ARTIFACT_DIR): %w", core.ErrNotFound)
	}
	root, rel, ok := l.locate(a.Ext4Path)
	if !ok {
		return nil, 0, fmt.Errorf("ext4_path %q is not inside a local artifact dir (CUBE_MASTER_LOCAL_ARTIFACT_DIR): %w", a.Ext4Path, core.ErrNotFound)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, 0, fmt.Errorf("open local artifact dir: %w", err)
	}
	f, err := r.Open(rel)
	if err != nil {
		r.Close()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("%s: %w", a.Ext4Path, core.ErrNotFound)
		}
		return nil, 0, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file: %w", a.Ext4Path, core.ErrInvalidArgument)
	}
	if err != nil {
		f.Close()
		r.Close()
		return nil, 0, err
	}
	return &rootFile{File: f, root: r}, st.Size(), nil
}

// Remove implements ports.LegacyArtifacts. A path outside the roots
// is left alone, and so is the copy of an artifact whose store is a
// directory: its ext4_path may be the store's own object.
func (l *LegacyArtifacts) Remove(_ context.Context, a *core.Artifact) error {
	if a.StorageBackend == "file" || a.StorageBackend == "local" || a.StorageBackend == "" {
		return nil
	}
	root, rel, ok := l.locate(a.Ext4Path)
	if !ok {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// The legacy layout is <root>/<aid>/<aid>.ext4: drop the directory too
	// when nothing else is in it (Remove refuses a non-empty one).
	if dir := filepath.Dir(rel); dir != "." {
		_ = r.Remove(dir)
	}
	return nil
}

// rootFile closes its os.Root with the file.
type rootFile struct {
	*os.File
	root *os.Root
}

func (f *rootFile) Close() error {
	err := f.File.Close()
	f.root.Close()
	return err
}
