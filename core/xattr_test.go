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
		// Control characters are refused in any namespace: a newline
		// would end a debugfs argument and start a command.
		{"user.x\ndump -p /payload /tmp/x\n", tar.TypeReg, false},
		{"security.x\ndump -p /payload /tmp/x\n", tar.TypeChar, false},
		{"trusted.x\r", tar.TypeDir, false},
		{"security.\x00x", tar.TypeReg, false},
		{"user.tab\tx", tar.TypeReg, false},
		{"user.del\x7f", tar.TypeReg, false},
		{"user.sp ace \"q\"", tar.TypeReg, true},
		{"user.utf8-\u00e9", tar.TypeReg, true},
	} {
		if got := XattrAllowed(c.name, c.typ); got != c.ok {
			t.Errorf("XattrAllowed(%q, %q) = %v", c.name, c.typ, got)
		}
	}
}

func TestXattrNameClean(t *testing.T) {
	for name, ok := range map[string]bool{
		"user.x":                      true,
		"security.capability":         true,
		`user.sp ace "q" \`:           true,
		"user.\u00e9\xff":             true, // bytes from 0x80 are not control characters
		"user.x\ndump -p /payload /x": false,
		"user.x\r":                    false,
		"user.\x00":                   false,
		"user.\t":                     false,
		"user.\x1f":                   false,
		"user.\x7f":                   false,
		"\nuser.x":                    false,
	} {
		if got := XattrNameClean(name); got != ok {
			t.Errorf("XattrNameClean(%q) = %v, want %v", name, got, ok)
		}
	}
}
