package hostfiles

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// EnvdFile is ports.EnvdSource for <dir>/envd (CUBE_MASTER_ENVD_HOST_DIR).
// The file is read at each use, so replacing it needs no restart.
type EnvdFile struct {
	Path string
}

var _ ports.EnvdSource = EnvdFile{}

// NewEnvdFile returns the source for dir's envd binary, or ok=false when
// dir is empty or holds no regular file named envd (injection is then not
// available).
func NewEnvdFile(dir string) (src EnvdFile, ok bool) {
	if dir == "" {
		return EnvdFile{}, false
	}
	p := filepath.Join(dir, "envd")
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return EnvdFile{Path: p}, false
	}
	return EnvdFile{Path: p}, true
}

// Envd implements ports.EnvdSource.
func (e EnvdFile) Envd(context.Context) ([]byte, error) {
	if e.Path == "" {
		return nil, fmt.Errorf("no envd binary is configured: %w", core.ErrNotFound)
	}
	b, err := os.ReadFile(e.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("envd binary %s: %w", e.Path, core.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read envd binary: %w", err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("envd binary %s is empty: %w", e.Path, core.ErrInvalidArgument)
	}
	return b, nil
}
