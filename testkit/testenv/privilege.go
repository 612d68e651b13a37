package testenv

import (
	"os"
	"testing"
)

// euid is the effective user id the privilege checks see (a seam for the
// package's own tests).
var euid = os.Geteuid

// IsRoot reports whether the tests run as root. Use Root for a test that
// cannot run otherwise; IsRoot is for choices that are not preconditions.
func IsRoot() bool { return euid() == 0 }

// Root skips the test unless it runs as root, or fails it when servers are
// required (CUBE_TEST_REQUIRE_SERVERS=1: CI runs as root, so a missing
// privilege there is a broken setup, not a reason to pass). why says what
// needs root.
func Root(t testing.TB, why string) {
	t.Helper()
	if !IsRoot() {
		missing(t, "not root: "+why)
	}
}

// SharedTempDir returns a fresh directory anyone may enter and write
// (mode 1777, removed after the test), for programs a root process starts
// as another user: t.TempDir()'s directories are private to root.
func SharedTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "cube-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o1777); err != nil {
		t.Fatal(err)
	}
	return d
}
