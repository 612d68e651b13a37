package buildertest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// shm is where scratch trees go when the host has a tmpfs there: the
// corpus writes tens of thousands of small files, which tmpfs takes an
// order of magnitude faster than a disk filesystem.
const shm = "/dev/shm"

// fastScratch returns the parent for scratch directories: shm when it is a
// writable tmpfs, else "" (os.TempDir).
func fastScratch() string {
	var st unix.Statfs_t
	if unix.Statfs(shm, &st) != nil || st.Type != unix.TMPFS_MAGIC || unix.Access(shm, unix.W_OK) != nil {
		return ""
	}
	return shm
}

// FastTempDir is t.TempDir on tmpfs when the host has one (see shm),
// removed when t ends.
func FastTempDir(t testing.TB) string {
	t.Helper()
	parent := fastScratch()
	if parent == "" {
		return t.TempDir()
	}
	d, err := os.MkdirTemp(parent, "buildertest-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
