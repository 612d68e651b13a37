//go:build !linux

package artifactstore

import "os"

// openDirect: direct I/O is only used on Linux.
func openDirect(*os.File) *os.File { return nil }

func isDirectRefused(error) bool { return false }
