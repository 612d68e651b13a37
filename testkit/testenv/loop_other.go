//go:build !linux

package testenv

import "testing"

// LoopMount mounts an ext4 image through a loop device; only Linux has
// them, so elsewhere the test is skipped (or failed when servers are
// required).
func LoopMount(t testing.TB, img, dir string) {
	t.Helper()
	missing(t, "loop mounts need Linux")
}
