//go:build !linux

package artifactstore

import "os"

// syncFS falls back to syncing f alone: the file store opens only on
// Linux (xattr_other.go), so this only keeps the package building.
func syncFS(f *os.File) error { return f.Sync() }
