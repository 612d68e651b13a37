//go:build !linux

package diskio

import "os"

// openDirect: direct I/O is only used on Linux.
func openDirect(*os.File) *os.File { return nil }

func isDirectRefused(error) bool { return false }

// writeBehind does nothing where sync_file_range(2) does not exist.
func writeBehind(*os.File, int64, int64) {}

// mapBuffers: the pieces come from the Go heap elsewhere.
func mapBuffers(int, int) *Buffers { return nil }

// OpenDirectReader: direct I/O is only used on Linux.
func OpenDirectReader(string) *os.File { return nil }
