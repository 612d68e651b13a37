//go:build !linux

package layers

import (
	"context"
	"fmt"
	"io"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Extract needs Linux (openat2, *at syscalls without following symlinks).
func Extract(ctx context.Context, tree io.Reader, root string, opt ExtractOptions) (ExtractResult, error) {
	return ExtractResult{}, fmt.Errorf("extract: only on linux: %w", core.ErrUnsupported)
}

// ExtractEntries needs Linux, as Extract does.
func ExtractEntries(ctx context.Context, tree ports.Tree, root string, opt ExtractOptions) (ExtractResult, error) {
	return ExtractResult{}, fmt.Errorf("extract: only on linux: %w", core.ErrUnsupported)
}
