//go:build !linux

package layers

import (
	"fmt"
	"io"

	"github.com/cubesandbox/templatecenter/core"
)

// The decoder process needs Linux (a parent-death signal, dropping to
// nobody); elsewhere the built-in decoder is used.
const gzipProgramSupported = false

func (p *GzipProgram) open(io.Reader) (io.ReadCloser, error) {
	return nil, &gzipHostError{fmt.Errorf("a gzip program needs linux: %w", core.ErrUnsupported)}
}
