package ext4stream

import (
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
)

// Rules the feed names when it refuses a tree: the vocabulary of the
// BuildSpec.Tree contract, shared with the staging extractor (see
// ports/flattenertest, which holds both to one corpus).
const (
	ruleNulInName          = "nul-in-name"
	ruleEmptyName          = "empty-name"
	rulePathTraversal      = "path-traversal"
	ruleNameTooLong        = "name-too-long"
	rulePathTooLong        = "path-too-long"
	ruleUnsupportedType    = "unsupported-type"
	ruleBadOwner           = "bad-owner"
	ruleBadMode            = "bad-mode"
	ruleBadDevice          = "bad-device"
	ruleXattrTooLarge      = "xattr-too-large"
	ruleXattrForbidden     = "xattr-forbidden"
	ruleSymlinkTarget      = "symlink-target"
	ruleParentSymlink      = "parent-symlink"
	ruleParentNotDir       = "parent-not-dir"
	ruleRootNotDir         = "root-not-dir"
	ruleHardlinkEscape     = "hardlink-escape"
	ruleHardlinkMissing    = "hardlink-target-missing"
	ruleHardlinkDir        = "hardlink-target-dir"
	ruleHardlinkNotRegular = "hardlink-target-not-regular"
	ruleHardlinkSelf       = "hardlink-self"
	ruleWhiteoutInTree     = "whiteout-in-tree"
	ruleDuplicateEntry     = "duplicate-entry"
	ruleAbsoluteName       = "absolute-name"
	ruleUncleanName        = "unclean-name"
	ruleCorruptArchive     = "corrupt-archive"
	// ruleReservedName is this builder's own: lost+found is a directory
	// the builder makes.
	ruleReservedName = "reserved-name"
)

// rejectError is a tree the builder refuses. Its message has the
// contract's shape, `tree: entry "<name>" rejected: <rule>: <detail>`.
type rejectError struct {
	entry, rule, detail string
}

func reject(entry, rule, format string, args ...any) *rejectError {
	return &rejectError{entry: entry, rule: rule, detail: fmt.Sprintf(format, args...)}
}

func (e *rejectError) Error() string {
	return fmt.Sprintf("tree: entry %q rejected: %s: %s", e.entry, e.rule, e.detail)
}

// Is makes errors.Is(err, core.ErrInvalidArgument) hold.
func (e *rejectError) Is(target error) bool { return target == core.ErrInvalidArgument }
