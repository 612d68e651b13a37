package layers

import (
	"archive/tar"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// whiteout kinds an entry can be.
type whKind uint8

const (
	whNone   whKind = iota
	whFile          // dir/.wh.name: hide name of lower layers
	whOpaque        // dir/.wh..wh..opq: hide every lower child of dir
)

const (
	whPrefix = ".wh."
	whOpq    = ".wh..wh..opq"
	// ext4 stores times up to 2446-05-10; clamp later ones so every builder
	// agrees, and earlier than the epoch to the epoch.
	maxMtime = 1<<34 - 1<<31 - 1
	// Linux dev_t as ext4 stores it: 12-bit major, 20-bit minor.
	maxMajor = 1<<12 - 1
	maxMinor = 1<<20 - 1
	// kernel limits for one xattr
	xattrNameMax  = 255
	xattrValueMax = 64 << 10
	paxXattr      = "SCHILY.xattr."
)

type xattr struct{ name, value string }

// entry is one validated tar header, reduced to what the tree needs.
type entry struct {
	name     string // clean and relative; "." is the root
	raw      string // name as found in the archive, for messages
	typ      byte   // TypeReg, TypeLink, TypeSymlink, TypeChar, TypeBlock, TypeDir, TypeFifo
	link     string // symlink target verbatim, or the clean hard link target
	size     int64  // regular files only
	mode     int64  // permission bits including setuid, setgid and sticky
	uid, gid int
	mtime    int64 // unix seconds, clamped
	major    int64
	minor    int64
	xattrs   []xattr // sorted by name
	sparse   bool
	wh       whKind
	whName   string // the name a whFile entry hides

	// Where Flatten finds the content of a regular file, and its all-zero
	// 4 KiB blocks when known (runs of [first, count], see
	// ports.TreeEntry.Zero).
	src       *os.File
	off       int64
	zero      [][2]uint32
	zeroKnown bool
}

// rejection is a rule plus optional detail, turned into a *RejectError by
// the caller who knows the layer.
type rejection struct{ rule, detail string }

func reject(rule, format string, args ...any) *rejection {
	return &rejection{rule: rule, detail: fmt.Sprintf(format, args...)}
}

// parseHeader validates hdr against every per-entry rule. It returns nil,
// nil for headers that carry no entry (PAX global headers).
func parseHeader(hdr *tar.Header, lim Limits) (*entry, *rejection) {
	e := &entry{raw: hdr.Name}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil, nil
	case tar.TypeReg, tar.TypeGNUSparse:
		e.typ = tar.TypeReg
		e.sparse = hdr.Typeflag == tar.TypeGNUSparse
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		e.typ = hdr.Typeflag
	default:
		return nil, reject(RuleUnsupportedType, "typeflag %q", hdr.Typeflag)
	}

	name, rj := cleanName(hdr.Name, lim)
	if rj != nil {
		return nil, rj
	}
	e.name = name
	if rj := e.classifyWhiteout(); rj != nil {
		return nil, rj
	}
	if e.wh != whNone {
		// A whiteout is a marker: its type, size and metadata mean nothing.
		return e, nil
	}

	if hdr.Mode < 0 || hdr.Mode > 1<<32-1 {
		return nil, reject(RuleBadMode, "mode %#o", hdr.Mode)
	}
	e.mode = hdr.Mode & 0o7777
	// (uid_t)-1 means "leave unchanged" to chown, so it is refused too.
	if hdr.Uid < 0 || hdr.Uid >= 1<<32-1 || hdr.Gid < 0 || hdr.Gid >= 1<<32-1 {
		return nil, reject(RuleBadOwner, "uid %d gid %d", hdr.Uid, hdr.Gid)
	}
	e.uid, e.gid = hdr.Uid, hdr.Gid
	e.mtime = hdr.ModTime.Unix()
	if hdr.ModTime.IsZero() || e.mtime < 0 {
		e.mtime = 0
	} else if e.mtime > maxMtime {
		e.mtime = maxMtime
	}

	switch e.typ {
	case tar.TypeReg:
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				e.sparse = true
			}
		}
		if hdr.Size > lim.MaxFileBytes {
			return nil, reject(RuleFileTooLarge, "declared size %d > %d", hdr.Size, lim.MaxFileBytes)
		}
		e.size = hdr.Size
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 || len(hdr.Linkname) >= lim.MaxPathLen {
			return nil, reject(RuleSymlinkTarget, "target of %d bytes", len(hdr.Linkname))
		}
		e.link = hdr.Linkname
	case tar.TypeLink:
		link, rj := cleanLinkTarget(hdr.Linkname, lim)
		if rj != nil {
			return nil, rj
		}
		if link == e.name {
			return nil, reject(RuleHardlinkSelf, "links to itself")
		}
		e.link = link
	case tar.TypeChar, tar.TypeBlock:
		if hdr.Devmajor < 0 || hdr.Devmajor > maxMajor || hdr.Devminor < 0 || hdr.Devminor > maxMinor {
			return nil, reject(RuleBadDevice, "device %d:%d", hdr.Devmajor, hdr.Devminor)
		}
		e.major, e.minor = hdr.Devmajor, hdr.Devminor
	}
	if e.name == "." && e.typ != tar.TypeDir {
		return nil, reject(RuleRootNotDir, "root entry of type %q", e.typ)
	}

	if rj := e.parseXattrs(hdr, lim); rj != nil {
		return nil, rj
	}
	return e, nil
}

// cleanName turns an archive name into a clean relative path, or refuses it.
// A leading "/" is dropped (layers written with absolute names mean the image
// root), but a ".." component anywhere is refused even where it would clean
// away: no legitimate layer needs one and lexical cleaning disagrees with the
// filesystem once symlinks are involved.
func cleanName(raw string, lim Limits) (string, *rejection) {
	if raw == "" {
		return "", reject(RuleEmptyName, "empty name")
	}
	if strings.IndexByte(raw, 0) >= 0 {
		return "", reject(RuleNulInName, "NUL byte in name")
	}
	p := strings.TrimLeft(raw, "/")
	for rest := p; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if c == ".." {
			return "", reject(RulePathTraversal, "\"..\" component")
		}
	}
	p = path.Clean(p)
	if p == "." {
		return ".", nil
	}
	if len(p) > lim.MaxPathLen {
		return "", reject(RulePathTooLong, "%d bytes > %d", len(p), lim.MaxPathLen)
	}
	depth := 0
	for rest := p; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if len(c) > lim.MaxNameLen {
			return "", reject(RuleNameTooLong, "component of %d bytes > %d", len(c), lim.MaxNameLen)
		}
		depth++
	}
	if depth > lim.MaxPathDepth {
		return "", reject(RulePathTooDeep, "%d components > %d", depth, lim.MaxPathDepth)
	}
	return p, nil
}

// checkTreeName holds a name of a flattened tree (Extract's input) to the
// BuildSpec.Tree contract, stricter than a layer: it must already be clean
// and relative (one trailing "/" is tolerated, "." and "./" are the root)
// and no component may be a whiteout. Hard link targets (link) follow the
// same rules, with their own rule for "..".
func checkTreeName(raw string, link bool) *rejection {
	what := "name"
	if link {
		what = "hard link target"
	}
	switch {
	case raw == "" && link:
		return reject(RuleHardlinkMissing, "empty hard link target")
	case raw == "":
		return reject(RuleEmptyName, "empty name")
	case strings.IndexByte(raw, 0) >= 0:
		return reject(RuleNulInName, "NUL byte in %s", what)
	}
	for rest := raw; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if c == ".." && link {
			return reject(RuleHardlinkEscape, "target %q leaves the root", raw)
		}
		if c == ".." {
			return reject(RulePathTraversal, "\"..\" component")
		}
	}
	if strings.HasPrefix(raw, "/") {
		return reject(RuleAbsoluteName, "absolute %s %q in a flattened tree", what, raw)
	}
	n := strings.TrimSuffix(raw, "/")
	if n == "." || n == "" {
		return nil
	}
	if path.Clean(n) != n {
		return reject(RuleUncleanName, "%s %q is not clean (%q)", what, raw, path.Clean(n))
	}
	for rest := n; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if strings.HasPrefix(c, whPrefix) {
			return reject(RuleWhiteoutInTree, "a flattened tree has no whiteouts")
		}
	}
	return nil
}

// cleanLinkTarget cleans a hard link target. Absolute targets mean the
// image root, as tar writers such as kaniko emit them.
func cleanLinkTarget(raw string, lim Limits) (string, *rejection) {
	p, rj := cleanName(raw, lim)
	switch {
	case rj == nil && p == ".":
		return "", reject(RuleHardlinkDir, "hard link to the root")
	case rj == nil:
		return p, nil
	case rj.rule == RuleEmptyName:
		return "", reject(RuleHardlinkMissing, "empty hard link target")
	case rj.rule == RulePathTraversal:
		return "", reject(RuleHardlinkEscape, "target %q leaves the root", raw)
	}
	rj.detail = "hard link target: " + rj.detail
	return "", rj
}

// classifyWhiteout recognises ".wh." names. Names under a ".wh." directory
// cannot come from a real filesystem diff and are refused.
func (e *entry) classifyWhiteout() *rejection {
	if e.name == "." || !strings.Contains(e.name, whPrefix) {
		return nil
	}
	dir, base := path.Split(e.name)
	for rest := strings.TrimSuffix(dir, "/"); rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if strings.HasPrefix(c, whPrefix) {
			return reject(RuleWhiteoutInPath, "component %q", c)
		}
	}
	if !strings.HasPrefix(base, whPrefix) {
		return nil
	}
	if base == whOpq {
		e.wh = whOpaque
		return nil
	}
	x := base[len(whPrefix):]
	if x == "" || x == "." || x == ".." || strings.HasPrefix(x, whPrefix) {
		return reject(RuleWhiteoutInvalid, "whiteout %q", base)
	}
	e.wh, e.whName = whFile, x
	return nil
}

// parseXattrs keeps SCHILY.xattr.* records that pass the namespace
// allow-list (control characters in a name included) and budgets.
// Values may hold any byte: builders store them as data, never as text.
func (e *entry) parseXattrs(hdr *tar.Header, lim Limits) *rejection {
	if e.typ == tar.TypeLink {
		return nil // a hard link shares its target's inode and xattrs
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, paxXattr); ok {
			e.xattrs = append(e.xattrs, xattr{name: name, value: v})
		}
	}
	// Sorted first so that the same input always trips the same rule.
	sort.Slice(e.xattrs, func(i, j int) bool { return e.xattrs[i].name < e.xattrs[j].name })
	total := 0
	for _, x := range e.xattrs {
		name, v := x.name, x.value
		if len(name) > xattrNameMax || len(v) > xattrValueMax {
			return reject(RuleXattrTooLarge, "xattr %q: name %d bytes, value %d bytes", name, len(name), len(v))
		}
		total += len(name) + len(v)
		if total > lim.MaxXattrBytes {
			return reject(RuleXattrTooLarge, "xattrs of %d+ bytes > %d", total, lim.MaxXattrBytes)
		}
		if !core.XattrNameClean(name) {
			return reject(RuleXattrForbidden, "xattr %q: a control character in the name", name)
		}
		if !core.XattrAllowed(name, e.typ) {
			return reject(RuleXattrForbidden, "xattr %q", name)
		}
	}
	return nil
}

// header rebuilds a tar header from a validated entry.
func (e *entry) header() *tar.Header {
	h := &tar.Header{
		Typeflag: e.typ,
		Name:     e.name,
		Mode:     e.mode,
		Uid:      e.uid,
		Gid:      e.gid,
		ModTime:  time.Unix(e.mtime, 0),
		Size:     e.size,
	}
	switch e.typ {
	case tar.TypeSymlink, tar.TypeLink:
		h.Linkname = e.link
	case tar.TypeChar, tar.TypeBlock:
		h.Devmajor, h.Devminor = e.major, e.minor
	}
	if len(e.xattrs) > 0 && e.typ != tar.TypeLink {
		h.PAXRecords = make(map[string]string, len(e.xattrs))
		for _, x := range e.xattrs {
			h.PAXRecords[paxXattr+x.name] = x.value
		}
		h.Format = tar.FormatPAX
	}
	return h
}
