package buildertest

import (
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// shm is where scratch trees go when the host has a tmpfs there: the
// corpus writes tens of thousands of small files, which tmpfs takes an
// order of magnitude faster than a disk filesystem.
const shm = "/dev/shm"

var (
	shmOnce sync.Once
	shmOK   bool
)

// fastScratch returns the parent for scratch directories: shm when it is a
// writable tmpfs that keeps user.* xattrs (Linux 6.6 and later; staged
// trees and unpacked images carry them), else "" (os.TempDir).
func fastScratch() string {
	shmOnce.Do(func() {
		var st unix.Statfs_t
		if unix.Statfs(shm, &st) != nil || st.Type != unix.TMPFS_MAGIC {
			return
		}
		d, err := os.MkdirTemp(shm, "buildertest-probe-")
		if err != nil {
			return
		}
		defer os.Remove(d)
		shmOK = unix.Setxattr(d, "user.buildertest", []byte("1"), 0) == nil
	})
	if shmOK {
		return shm
	}
	return ""
}

// FastTempDir is t.TempDir on tmpfs when the host has a suitable one (see
// fastScratch), removed when t ends.
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
