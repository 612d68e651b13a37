package hostfiles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// CubeCAFile is ports.CubeCASource for one file: upstream's
// /etc/cube/ca/cube-root-ca.crt unless configured otherwise. It is read
// at each use, so a rotated CA needs no restart.
type CubeCAFile struct {
	Path string
}

var _ ports.CubeCASource = CubeCAFile{}

// CubeCA implements ports.CubeCASource.
func (c CubeCAFile) CubeCA(context.Context) ([]byte, error) {
	if c.Path == "" {
		return nil, fmt.Errorf("no CubeEgress root CA is configured: %w", core.ErrNotFound)
	}
	f, err := os.Open(c.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CubeEgress root CA %s: %w", c.Path, core.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read the CubeEgress root CA: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, core.MaxCubeCABytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the CubeEgress root CA %s: %w", c.Path, err)
	}
	if _, err := core.ParseCubeCA(b); err != nil {
		return nil, fmt.Errorf("CubeEgress root CA %s: %w", c.Path, err)
	}
	return b, nil
}
