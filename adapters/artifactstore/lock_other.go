//go:build !linux

package artifactstore

import (
	"fmt"
	"os"

	"github.com/cubesandbox/templatecenter/core"
)

// The file store opens only on Linux (see xattr_other.go); these keep the
// package building elsewhere.
func tryLockExclusive(*os.File) error { return fmt.Errorf("flock: %w", core.ErrUnsupported) }
func lockShared(*os.File) error       { return fmt.Errorf("flock: %w", core.ErrUnsupported) }
