package flattenertest

import (
	"errors"
	"regexp"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// Rules a flattener or a tree consumer names when it refuses input. The
// names are the contract (ports.TreeFlattener, ports.BuildSpec): an error
// wraps core.ErrInvalidArgument and its message holds
// `entry "<name>" rejected: <rule>`.
const (
	RuleNulInName          = "nul-in-name"
	RuleEmptyName          = "empty-name"
	RulePathTraversal      = "path-traversal"
	RuleNameTooLong        = "name-too-long"
	RulePathTooLong        = "path-too-long"
	RulePathTooDeep        = "path-too-deep"
	RuleUnsupportedType    = "unsupported-type"
	RuleBadOwner           = "bad-owner"
	RuleBadMode            = "bad-mode"
	RuleBadDevice          = "bad-device"
	RuleFileTooLarge       = "file-too-large"
	RuleLayerTooLarge      = "layer-too-large"
	RuleImageTooLarge      = "image-too-large"
	RuleTooManyEntries     = "too-many-entries"
	RuleDecompressionBomb  = "decompression-bomb"
	RuleXattrTooLarge      = "xattr-too-large"
	RuleXattrForbidden     = "xattr-forbidden"
	RuleSymlinkTarget      = "symlink-target"
	RuleSymlinkLoop        = "symlink-loop"
	RuleParentSymlink      = "parent-symlink"
	RuleParentNotDir       = "parent-not-dir"
	RuleRootNotDir         = "root-not-dir"
	RuleHardlinkEscape     = "hardlink-escape"
	RuleHardlinkMissing    = "hardlink-target-missing"
	RuleHardlinkDir        = "hardlink-target-dir"
	RuleHardlinkNotRegular = "hardlink-target-not-regular"
	RuleHardlinkSelf       = "hardlink-self"
	RuleWhiteoutInvalid    = "whiteout-invalid"
	RuleWhiteoutInPath     = "whiteout-in-path"
	RuleWhiteoutInTree     = "whiteout-in-tree"
	RuleDuplicateEntry     = "duplicate-entry"
	RuleAbsoluteName       = "absolute-name"
	RuleUncleanName        = "unclean-name"
	RuleCorruptArchive     = "corrupt-archive"
	RuleMediaType          = "media-type"
	RuleMediaTypeMismatch  = "media-type-mismatch"
	RuleZstdWindow         = "zstd-window"
)

// ruleText finds the rule in a refusal message. The entry name before it
// is quoted with %q, so a name holding `" rejected: ` cannot fool it.
var ruleText = regexp.MustCompile(`(?:^|[^\\])" rejected: ([a-z][a-z0-9-]*)`)

// RuleOf returns the rule err names, or "" if it names none.
func RuleOf(err error) string {
	if err == nil {
		return ""
	}
	m := ruleText.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	return m[1]
}

// WantRule fails t unless err is a refusal by rule: it wraps
// core.ErrInvalidArgument and its message names rule.
func WantRule(t testing.TB, err error, rule string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want a refusal by %s", rule)
	}
	if got := RuleOf(err); got != rule {
		t.Fatalf("want rule %s, got %q from: %v", rule, got, err)
	}
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("refusal by %s does not wrap core.ErrInvalidArgument: %v", rule, err)
	}
}
