//go:build !linux

package registry

import "os"

// dropCached does nothing where posix_fadvise(2) is not at hand.
func dropCached(*os.File, int64, int64) {}
