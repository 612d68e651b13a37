//go:build !linux

package ext4build

import "os"

// writeBehind does nothing where sync_file_range(2) does not exist.
func writeBehind(*os.File, int64, int64) {}

// openDirect: direct I/O is only used on Linux.
func openDirect(*os.File) *os.File { return nil }

func isDirectRefused(error) bool { return false }
