//go:build !linux

package artifactstore

import (
	"errors"
	"fmt"
	"os"

	"github.com/cubesandbox/templatecenter/core"
)

var errNoXattr = errors.New("no such extended attribute")

// The file store keeps checksums in Linux user xattrs; elsewhere it refuses
// to open (the probe in openDir fails) instead of running without them.
func setXattr(*os.File, string, string) error {
	return fmt.Errorf("extended attributes on this OS: %w", core.ErrUnsupported)
}

func getXattr(*os.File, string) (string, error) {
	return "", fmt.Errorf("extended attributes on this OS: %w", core.ErrUnsupported)
}
