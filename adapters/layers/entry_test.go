package layers

import (
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

func TestRejectErrorMessage(t *testing.T) {
	e := &RejectError{Layer: -1, Entry: "a\nb", Rule: RulePathTraversal, Detail: "x"}
	if got := e.Error(); got != `tree: entry "a\nb" rejected: path-traversal: x` {
		t.Fatalf("%q", got)
	}
}
