package core

import (
	"archive/tar"
	"testing"
)

func TestXattrAllowed(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  byte
		ok   bool
	}{
		{"user.x", tar.TypeReg, true},
		{"user.x", tar.TypeDir, true},
		{"user.x", tar.TypeSymlink, false},
		{"user.overlay.opaque", tar.TypeDir, false},
		{"trusted.overlay.opaque", tar.TypeDir, false},
		{"trusted.x", tar.TypeSymlink, true},
		{"security.capability", tar.TypeReg, true},
		{"security.selinux", tar.TypeFifo, true},
		{"system.posix_acl_access", tar.TypeReg, true},
		{"system.posix_acl_default", tar.TypeReg, false},
		{"system.posix_acl_default", tar.TypeDir, true},
		{"system.nfs4_acl", tar.TypeReg, false},
		{"user.", tar.TypeReg, false},
		{"noname", tar.TypeReg, false},
	} {
		if got := XattrAllowed(c.name, c.typ); got != c.ok {
			t.Errorf("XattrAllowed(%q, %q) = %v", c.name, c.typ, got)
		}
	}
}
