//go:build !linux

package layers

import (
	"context"
	"fmt"
	"io"

	"github.com/cubesandbox/templatecenter/core"
)

// Extract needs Linux (openat2, *at syscalls without following symlinks).
func Extract(ctx context.Context, tree io.Reader, root string, opt ExtractOptions) (ExtractResult, error) {
	return ExtractResult{}, fmt.Errorf("extract: only on linux: %w", core.ErrUnsupported)
}
