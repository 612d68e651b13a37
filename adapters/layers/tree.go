package layers

import (
	"archive/tar"
	"os"
	"path"
	"slices"
	"strings"
)

// node is one path of the tree. Hard links are TypeReg nodes sharing a
// meta (the inode). A node keeps no name: its parent's map holds it under
// its last component.
type node struct {
	typ byte
	// layer is the layer that created the node or, for a directory
	// declared again, last set its metadata. Whiteouts and opaque markers
	// of layer L hide exactly what layers below L put there.
	layer int32
	m     *meta            // metadata; nil for a directory nobody declared
	kids  map[string]*node // TypeDir
}

// meta is what the tree keeps of a placed entry: its metadata and
// content, not its names (the entry, with its names as found in the
// archive, is dropped once placed). A regular file's meta is its inode,
// shared by its hard links.
type meta struct {
	size, mtime, off int64
	src              *os.File
	ext              *metaExt // what few entries have
	mode, uid, gid   uint32
	layer            int32 // TypeReg: the layer of the content
	zeroKnown        bool
	linked           bool // TypeReg: a hard link names it too
}

// metaExt holds the rarer metadata: a symlink's target, device numbers,
// xattrs, zero runs.
type metaExt struct {
	link         string
	major, minor int64
	xattrs       []xattr
	zero         [][2]uint32
}

// metaOf keeps what the tree needs of e, placed by layer idx.
func metaOf(e *entry, idx int) *meta {
	m := &meta{size: e.size, mtime: e.mtime, off: e.off, src: e.src,
		mode: uint32(e.mode), uid: uint32(e.uid), gid: uint32(e.gid), layer: int32(idx), zeroKnown: e.zeroKnown}
	if e.typ == tar.TypeSymlink || e.major != 0 || e.minor != 0 || len(e.xattrs) > 0 || len(e.zero) > 0 {
		m.ext = &metaExt{major: e.major, minor: e.minor, xattrs: e.xattrs, zero: e.zero}
		if e.typ == tar.TypeSymlink {
			m.ext.link = e.link
		}
	}
	return m
}

// link is a symlink's target.
func (m *meta) link() string {
	if m.ext == nil {
		return ""
	}
	return m.ext.link
}

func (m *meta) xattrs() []xattr {
	if m.ext == nil {
		return nil
	}
	return m.ext.xattrs
}

func (m *meta) zero() [][2]uint32 {
	if m.ext == nil {
		return nil
	}
	return m.ext.zero
}

func newDir(e *entry, layer int) *node {
	n := &node{typ: tar.TypeDir, kids: map[string]*node{}, layer: int32(layer)}
	if e != nil {
		n.m = metaOf(e, layer)
	}
	return n
}

// key is a name to store in a map of kids: a copy, so that the entry's
// whole path, which base is part of, is not kept alive by it.
func key(base string) string { return strings.Clone(base) }

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
// The layer's entry log is released as it is applied.
func (t *tree) apply(idx int, digest string, d *layerData) error {
	return d.log.each(d, true, func(e *entry) error {
		if rj := t.place(idx, e); rj != nil {
			return &RejectError{Layer: idx, Digest: digest, Entry: e.raw, Rule: rj.rule, Detail: rj.detail}
		}
		return nil
	})
}

func (t *tree) place(idx int, e *entry) *rejection {
	if e.name == "." {
		t.root.m = metaOf(e, idx) // parseHeader refused a root that is not a directory
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
			old.m, old.layer = metaOf(e, idx), int32(idx) // directory over directory: merge
			return nil
		}
		parent.kids[key(base)] = newDir(e, idx)
	case tar.TypeReg:
		parent.kids[key(base)] = &node{typ: tar.TypeReg, m: metaOf(e, idx), layer: int32(idx)}
	case tar.TypeLink:
		if target == old {
			return reject(RuleHardlinkSelf, "target %q resolves to the link itself", e.link)
		}
		target.m.linked = true
		parent.kids[key(base)] = &node{typ: tar.TypeReg, m: target.m, layer: int32(idx)}
	default:
		parent.kids[key(base)] = &node{typ: e.typ, m: metaOf(e, idx), layer: int32(idx)}
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
	if int(n.layer) == idx && n.typ != tar.TypeDir {
		return false
	}
	if n.typ != tar.TypeDir {
		return true
	}
	hideKids(n, idx)
	switch {
	case int(n.layer) == idx:
		return false
	case len(n.kids) > 0:
		n.m, n.layer = nil, int32(idx)
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
