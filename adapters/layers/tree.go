package layers

import (
	"archive/tar"
	"path"
	"slices"
)

// node is one path of the tree. Hard links are TypeReg nodes sharing an inode.
type node struct {
	typ  byte
	e    *entry           // metadata; nil for a directory nobody declared
	ino  *inode           // TypeReg
	kids map[string]*node // TypeDir
	// layer is the layer that created the node or, for a directory
	// declared again, last set its metadata. Whiteouts and opaque markers
	// of layer L hide exactly what layers below L put there.
	layer int
}

// inode is the file a regular entry and its hard links share. Content and
// metadata come from e; emitted is the first name written, which later
// names link to.
type inode struct {
	e       *entry
	emitted string
	layer   int // the layer of the content
}

func newDir(e *entry, layer int) *node {
	return &node{typ: tar.TypeDir, e: e, kids: map[string]*node{}, layer: layer}
}

type tree struct {
	root  *node
	lim   Limits
	nodes int64 // entries plus implied directories, against MaxEntries
	steps int64 // resolution budget left (resolveStepsPerEntry per entry)
}

func newTree(lim Limits, entries int64) *tree {
	return &tree{root: newDir(nil, -1), lim: lim, nodes: entries, steps: resolveStepsPerEntry * (entries + 1024)}
}

// grow accounts for a layer of entries about to be applied: they count
// against MaxEntries and bring their share of the resolution budget.
func (t *tree) grow(entries int64) {
	t.nodes += entries
	t.steps += resolveStepsPerEntry * entries
}

// apply replays one layer's entries in archive order onto the tree. Every
// entry is placed where its directory resolves (resolve.go); a later
// duplicate wins, a directory over a directory merges (later metadata
// wins) and anything else replaces the path and its subtree. Whiteouts and
// opaque markers hide only what lower layers put at their resolved place,
// so they never hit entries of their own layer, wherever those stand in
// the archive (image-spec).
func (t *tree) apply(idx int, digest string, entries []*entry) error {
	for _, e := range entries {
		if rj := t.place(idx, e); rj != nil {
			return &RejectError{Layer: idx, Digest: digest, Entry: e.raw, Rule: rj.rule, Detail: rj.detail}
		}
	}
	return nil
}

func (t *tree) place(idx int, e *entry) *rejection {
	if e.name == "." {
		t.root.e = e // parseHeader refused a root that is not a directory
		return nil
	}
	dir, base := path.Split(e.name)
	r, rj := t.resolveDir(dir)
	if rj != nil {
		return rj
	}
	switch e.wh {
	case whOpaque:
		// "dir/.wh..wh..opq" hides the lower children of dir.
		if r.dir != nil {
			hideKids(r.dir, idx)
		}
		return nil
	case whFile:
		if r.dir != nil {
			if k := r.dir.kids[e.whName]; k != nil && hide(k, idx) {
				delete(r.dir.kids, e.whName)
			}
		}
		return nil
	}

	var target *node
	var targetDir resolved
	if e.typ == tar.TypeLink {
		var rj *rejection
		if target, targetDir, rj = t.linkTarget(e); rj != nil {
			return rj
		}
	}
	parent, rj := t.mkdirs(r, base, idx)
	if rj != nil {
		return rj
	}
	old := parent.kids[base]
	if target != nil && old != nil && slices.ContainsFunc(targetDir.path, func(s step) bool { return s.n == old }) {
		// Replacing old removes the target with it, as it would on disk.
		return reject(RuleHardlinkMissing, "target %q lies below %q, which the link replaces", e.link, base)
	}
	switch e.typ {
	case tar.TypeDir:
		if old != nil && old.typ == tar.TypeDir {
			old.e, old.layer = e, idx // directory over directory: merge
			return nil
		}
		parent.kids[base] = newDir(e, idx)
	case tar.TypeReg:
		parent.kids[base] = &node{typ: tar.TypeReg, e: e, ino: &inode{e: e, layer: idx}, layer: idx}
	case tar.TypeLink:
		if target == old {
			return reject(RuleHardlinkSelf, "target %q resolves to the link itself", e.link)
		}
		parent.kids[base] = &node{typ: tar.TypeReg, e: e, ino: target.ino, layer: idx}
	default:
		parent.kids[base] = &node{typ: e.typ, e: e, layer: idx}
	}
	return nil
}

// linkTarget finds the regular file a hard link names, and its resolved
// directory: the directory resolves like any other, the last component is
// not followed.
func (t *tree) linkTarget(e *entry) (*node, resolved, *rejection) {
	dir, base := path.Split(e.link)
	r, rj := t.resolveDir(dir)
	if rj != nil {
		return nil, r, rj
	}
	var target *node
	if r.dir != nil {
		target = r.dir.kids[base]
	}
	switch {
	case target == nil:
		return nil, r, reject(RuleHardlinkMissing, "target %q does not exist earlier in this or a lower layer", e.link)
	case target.typ == tar.TypeDir:
		return nil, r, reject(RuleHardlinkDir, "target %q is a directory", e.link)
	case target.typ != tar.TypeReg:
		return nil, r, reject(RuleHardlinkNotRegular, "target %q is of type %q", e.link, target.typ)
	}
	return target, r, nil
}

// hide removes from n what layers below idx put there and reports whether
// n itself goes. A lower directory that still holds entries of layer idx
// stays as an implied directory of idx: the lower one is hidden, the new
// entries need a parent.
func hide(n *node, idx int) bool {
	if n.layer == idx && n.typ != tar.TypeDir {
		return false
	}
	if n.typ != tar.TypeDir {
		return true
	}
	hideKids(n, idx)
	switch {
	case n.layer == idx:
		return false
	case len(n.kids) > 0:
		n.e, n.layer = nil, idx
		return false
	}
	return true
}

func hideKids(n *node, idx int) {
	for name, k := range n.kids {
		if hide(k, idx) {
			delete(n.kids, name)
		}
	}
}

func sortedKeys(m map[string]*node) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func cutSlash(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
