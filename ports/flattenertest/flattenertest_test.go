package flattenertest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestRuleOf(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("no rule here"), ""},
		{fmt.Errorf(`layer 1 (sha256:x): entry "a/../b" rejected: path-traversal: ".." component`), RulePathTraversal},
		{fmt.Errorf(`mkfs builder: extract tree: tree: entry "" rejected: corrupt-archive`), RuleCorruptArchive},
		// A name that itself reads like a refusal does not fool it.
		{fmt.Errorf(`tree: entry "x\" rejected: bogus" rejected: duplicate-entry: again`), RuleDuplicateEntry},
	}
	for _, c := range cases {
		if got := RuleOf(c.err); got != c.want {
			t.Errorf("RuleOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestWantRuleAcceptsARefusal(t *testing.T) {
	ok := fmt.Errorf(`tree: entry "a" rejected: empty-name: x: %w`, core.ErrInvalidArgument)
	WantRule(t, ok, RuleEmptyName) // must not fail
}

func TestCorpusNamesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Cases() {
		if seen[c.Name] {
			t.Errorf("case %q twice", c.Name)
		}
		seen[c.Name] = true
		if (c.Layers == nil) == (c.Blobs == nil) {
			t.Errorf("%s: exactly one of Layers and Blobs", c.Name)
		}
		if c.Tree != "" && c.TreeOK {
			t.Errorf("%s: both a tree rule and TreeOK", c.Name)
		}
	}
	for _, s := range Semantics() {
		if seen[s.Name] {
			t.Errorf("semantic case %q twice", s.Name)
		}
		seen[s.Name] = true
	}
}

func TestCheckTreeAcceptsSortedTree(t *testing.T) {
	CheckTree(t, Tar(t, Dir("a"), Reg("a/x", "1"), Hard("a/y", "a/x"), Reg("b", "2")))
}
