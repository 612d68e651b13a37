//go:build !linux

package artifactstore

import "os"

// linkInto needs linkat and /proc; elsewhere the file store copies.
func linkInto(src *os.File, dir *os.File, name string) error { return errNoLink }
