package layers

import (
	"archive/tar"
	"strings"
)

// The placement rule, in one place for every builder: Flatten resolves
// here, and its output (BuildSpec.Tree) is already resolved, so builders
// and Extract only ever see entries whose parents are real directories.
//
// An entry "dir/base" is placed by resolving dir from the image root the
// way the kernel would inside a chroot of the image:
//
//   - a directory component is descended;
//   - a symlink component is followed: an absolute target restarts at the
//     image root, a relative one continues from the directory holding the
//     link; its components are resolved by the same rule;
//   - ".." goes to the parent of the directory resolved so far (not of the
//     name as written), and at the root stays at the root, so nothing ever
//     resolves outside the image;
//   - a missing component is a directory to be: the rest of the walk
//     continues below it (a later ".." may leave it again), and directories
//     still missing at the end are created (implied) when the entry writes;
//   - any other component (a file, device, FIFO) is refused: parent-not-dir;
//   - following more than maxSymlinkHops symlinks (Linux's MAXSYMLINKS) is
//     refused as a loop: symlink-loop.
//
// base itself is never followed: an entry named like an existing symlink
// replaces the symlink. Whiteouts, opaque markers and hard link targets
// resolve their directory with the same rule (without creating anything).
// The resolved path must still meet MaxPathLen and MaxPathDepth, and its
// created components MaxNameLen and the whiteout-prefix rule.

// maxSymlinkHops is the number of symlinks one resolution may follow.
const maxSymlinkHops = 40

// resolveStepsPerEntry bounds the total work of resolution: a hostile
// image can make every entry follow maxSymlinkHops long targets, so the
// walk is budgeted at this many components per entry on average.
const resolveStepsPerEntry = 64

// step is one component of a resolved path; n is nil while the component
// does not exist (yet).
type step struct {
	name string
	n    *node
}

// resolved is a directory found by resolveDir.
type resolved struct {
	path []step // from the root; empty for the root itself
	dir  *node  // the directory, or nil when some component is missing
}

// String is the resolved path, "." for the root.
func (r resolved) String() string {
	if len(r.path) == 0 {
		return "."
	}
	var b strings.Builder
	for i, s := range r.path {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(s.name)
	}
	return b.String()
}

// resolveDir resolves the directory dir (a clean relative path, "" or "."
// for the root) under the placement rule.
func (t *tree) resolveDir(dir string) (resolved, *rejection) {
	var stack []step
	// todo holds the components still to resolve, the next one last, so a
	// symlink's target is spliced in front of the rest with appends.
	todo := reverseComponents(nil, dir)
	hops := 0
	for len(todo) > 0 {
		c := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if t.steps--; t.steps < 0 {
			return resolved{}, reject(RuleSymlinkBudget, "resolving symlinks costs more than %d steps per entry", resolveStepsPerEntry)
		}
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		cur := t.root
		if len(stack) > 0 {
			cur = stack[len(stack)-1].n
		}
		var k *node
		if cur != nil {
			k = cur.kids[c]
		}
		switch {
		case k == nil || k.typ == tar.TypeDir:
			stack = append(stack, step{c, k})
		case k.typ == tar.TypeSymlink:
			if hops++; hops > maxSymlinkHops {
				return resolved{}, reject(RuleSymlinkLoop, "more than %d symlinks resolving %q", maxSymlinkHops, strings.TrimSuffix(dir, "/"))
			}
			if strings.HasPrefix(k.m.link(), "/") {
				stack = stack[:0]
			}
			todo = reverseComponents(todo, k.m.link())
		default:
			return resolved{}, reject(RuleParentNotDir, "%q is not a directory", resolved{path: append(stack, step{c, k})}.String())
		}
		if len(stack) > t.lim.MaxPathDepth {
			return resolved{}, reject(RulePathTooDeep, "%q resolves deeper than %d components", strings.TrimSuffix(dir, "/"), t.lim.MaxPathDepth)
		}
	}
	r := resolved{path: stack, dir: t.root}
	if len(stack) > 0 {
		r.dir = stack[len(stack)-1].n
	}
	return r, nil
}

// reverseComponents appends the slash-separated components of p to todo
// in reverse order.
func reverseComponents(todo []string, p string) []string {
	for p != "" {
		i := strings.LastIndexByte(p, '/')
		todo = append(todo, p[i+1:])
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return todo
}

// mkdirs creates the missing components of r as implied directories of
// layer idx and returns the directory, checking the resolved path with
// base appended against the name budgets.
func (t *tree) mkdirs(r resolved, base string, idx int) (*node, *rejection) {
	n, depth := len(base), len(r.path)+1
	for _, s := range r.path {
		n += len(s.name) + 1
	}
	if depth > t.lim.MaxPathDepth {
		return nil, reject(RulePathTooDeep, "resolves through symlinks to %d components > %d", depth, t.lim.MaxPathDepth)
	}
	if n > t.lim.MaxPathLen {
		return nil, reject(RulePathTooLong, "resolves through symlinks to %d bytes > %d", n, t.lim.MaxPathLen)
	}
	cur := t.root
	for i, s := range r.path {
		if s.n != nil {
			cur = s.n
			continue
		}
		// Only symlink targets can bring names that were never checked.
		switch {
		case len(s.name) > t.lim.MaxNameLen:
			return nil, reject(RuleNameTooLong, "symlink target component of %d bytes > %d", len(s.name), t.lim.MaxNameLen)
		case strings.HasPrefix(s.name, whPrefix):
			return nil, reject(RuleWhiteoutInPath, "symlink target component %q", s.name)
		}
		if t.nodes++; t.nodes > int64(t.lim.MaxEntries) {
			return nil, reject(RuleTooManyEntries, "more than %d entries with implied directories", t.lim.MaxEntries)
		}
		k := t.newDir(nil, idx)
		cur.kids[key(s.name)] = k
		r.path[i].n = k
		cur = k
	}
	return cur, nil
}
