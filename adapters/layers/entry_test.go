package layers

import (
	"archive/tar"
	"strings"
	"testing"
)

func TestCleanName(t *testing.T) {
	lim := DefaultLimits()
	cases := []struct{ in, want, rule string }{
		{"a", "a", ""},
		{"/a/b/", "a/b", ""},
		{"./a//./b", "a/b", ""},
		{"///", ".", ""},
		{"./", ".", ""},
		{".", ".", ""},
		{`..\..\evil`, `..\..\evil`, ""}, // backslash is a byte, not a separator
		{"C:\\x", "C:\\x", ""},
		{"Etc", "Etc", ""}, // no case folding
		{"", "", RuleEmptyName},
		{"a\x00b", "", RuleNulInName},
		{"..", "", RulePathTraversal},
		{"a/..", "", RulePathTraversal},
		{"a/../b", "", RulePathTraversal},
		{"/../x", "", RulePathTraversal},
		{strings.Repeat("x", 255), strings.Repeat("x", 255), ""},
		{strings.Repeat("x", 256), "", RuleNameTooLong},
		{strings.Repeat("a/", 127) + "b", strings.Repeat("a/", 127) + "b", ""},
		{strings.Repeat("a/", 128) + "b", "", RulePathTooDeep},
	}
	for _, c := range cases {
		got, rj := cleanName(c.in, lim)
		rule := ""
		if rj != nil {
			rule = rj.rule
		}
		if got != c.want || rule != c.rule {
			t.Errorf("cleanName(%q) = %q, %q; want %q, %q", c.in, got, rule, c.want, c.rule)
		}
	}
}

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
		if got := xattrAllowed(c.name, c.typ); got != c.ok {
			t.Errorf("xattrAllowed(%q, %q) = %v", c.name, c.typ, got)
		}
	}
}

func TestRejectErrorMessage(t *testing.T) {
	e := &RejectError{Layer: -1, Entry: "a\nb", Rule: RulePathTraversal, Detail: "x"}
	if got := e.Error(); got != `tree: entry "a\nb" rejected: path-traversal: x` {
		t.Fatalf("%q", got)
	}
}
