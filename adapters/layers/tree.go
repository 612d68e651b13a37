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
// Its 48 bytes (a size class of Go's allocator) are why the content file
// is a number (tree.files) and the mode 16 bits (parseHeader keeps 12).
type meta struct {
	size, mtime, off int64
	ext              *metaExt // what few entries have
	uid, gid         uint32
	src              uint32 // tree.files[src-1] holds the content; 0: none
	mode             uint16
	zeroKnown        bool
	// linked: a hard link names this file too, and ext.layer is the layer
	// of its content (otherwise the layer of its only node).
	linked bool
}

// metaExt holds the rarer metadata: a symlink's target, device numbers,
// xattrs, zero runs, the content layer of a hard-linked file.
type metaExt struct {
	link         string
	major, minor int64
	xattrs       []xattr
	zero         [][2]uint32
	layer        int32
}

// metaOf keeps what the tree needs of e.
func (t *tree) metaOf(e *entry) *meta {
	m := &meta{size: e.size, mtime: e.mtime, off: e.off, src: t.fileNumber(e.src),
		mode: uint16(e.mode), uid: uint32(e.uid), gid: uint32(e.gid), zeroKnown: e.zeroKnown}
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

// fileNumber numbers a content file for meta.src.
func (t *tree) fileNumber(f *os.File) uint32 {
	if f == nil {
		return 0
	}
	n, ok := t.fileNums[f]
	if !ok {
		t.files = append(t.files, f)
		n = uint32(len(t.files))
		t.fileNums[f] = n
	}
	return n
}

// file is the content file of m, or nil.
func (t *tree) file(m *meta) *os.File {
	if m.src == 0 {
		return nil
	}
	return t.files[m.src-1]
}

// link marks the regular file target as named by a hard link too,
// keeping the layer of its content.
func (t *tree) link(target *node) {
	m := target.m
	if m.linked {
		return
	}
	if m.ext == nil {
		m.ext = &metaExt{}
	}
	// target is the node that made the file: only it exists yet.
	m.ext.layer, m.linked = target.layer, true
}

// contentLayer is the layer of the content of the regular file n.
func contentLayer(n *node) int32 {
	if n.m.linked {
		return n.m.ext.layer
	}
	return n.layer
}

func (t *tree) newDir(e *entry, layer int) *node {
	n := &node{typ: tar.TypeDir, kids: map[string]*node{}, layer: int32(layer)}
	if e != nil {
		n.m = t.metaOf(e)
	}
	return n
}

// key is a name to store in a map of kids: a copy, so that the entry's
// whole path, which base is part of, is not kept alive by it.
func key(base string) string { return strings.Clone(base) }

type tree struct {
	root     *node
	files    []*os.File // content files, by meta.src - 1
	fileNums map[*os.File]uint32
	lim      Limits
	nodes    int64 // entries plus implied directories, against MaxEntries
	steps    int64 // resolution budget left (resolveStepsPerEntry per entry)
}

func newTree(lim Limits, entries int64) *tree {
	t := &tree{lim: lim, nodes: entries, steps: resolveStepsPerEntry * (entries + 1024), fileNums: map[*os.File]uint32{}}
	t.root = t.newDir(nil, -1)
	return t
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
		t.root.m = t.metaOf(e) // parseHeader refused a root that is not a directory
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
			old.m, old.layer = t.metaOf(e), int32(idx) // directory over directory: merge
			return nil
		}
		parent.kids[key(base)] = t.newDir(e, idx)
	case tar.TypeReg:
		parent.kids[key(base)] = &node{typ: tar.TypeReg, m: t.metaOf(e), layer: int32(idx)}
	case tar.TypeLink:
		if target == old {
			return reject(RuleHardlinkSelf, "target %q resolves to the link itself", e.link)
		}
		t.link(target)
		parent.kids[key(base)] = &node{typ: tar.TypeReg, m: target.m, layer: int32(idx)}
	default:
		parent.kids[key(base)] = &node{typ: e.typ, m: t.metaOf(e), layer: int32(idx)}
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
