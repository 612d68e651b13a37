package ext4stream

import (
	"archive/tar"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

const xattrPAXPrefix = "SCHILY.xattr."

// maxFileSize is the largest regular file accepted: ext4's limit for 4 KiB
// blocks with extents is 16 TiB; images are far smaller, and the cap keeps
// a lying header from announcing petabytes.
const maxFileSize = 1 << 40

// item is one tree entry that passed the per-entry checks of the
// ports.TreeEntry contract; the writer checks how it relates to the entries
// before it (duplicates, parents, hard link targets).
type item struct {
	raw          string // name as found in the archive, for messages
	name         string // clean and relative; "." is the root
	typ          byte   // tar type flag (GNU sparse files are regular files)
	perm         uint16 // permission bits with setuid, setgid and sticky
	uid, gid     uint32
	size         int64
	link         string // symlink target, or the clean hard link target
	major, minor uint32
	mtime        time.Time
	atime, ctime time.Time // zero when the tar carried none
	xattrs       []*xattr
}

// convert checks one header against the per-entry rules and returns the
// entry, or nil for headers that carry no file.
func convert(in *tar.Header) (*item, error) {
	typ := in.Typeflag
	switch typ {
	case tar.TypeReg, tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
	case tar.TypeGNUSparse:
		typ = tar.TypeReg // data is read back expanded by archive/tar
	case tar.TypeXGlobalHeader:
		return nil, nil
	default:
		return nil, reject(in.Name, ruleUnsupportedType, "tar entry type %q", typ)
	}
	name, rj := treeName(in.Name, false)
	if rj != nil {
		return nil, rj
	}
	switch {
	case in.Mode < 0 || in.Mode > 1<<32-1:
		return nil, reject(in.Name, ruleBadMode, "mode %#o", in.Mode)
	case in.Uid < 0 || in.Gid < 0 || int64(in.Uid) >= 0xFFFFFFFF || int64(in.Gid) >= 0xFFFFFFFF:
		// (uid_t)-1 means "unchanged" to chown: refused like any other out-of-range id.
		return nil, reject(in.Name, ruleBadOwner, "uid %d gid %d", in.Uid, in.Gid)
	}
	it := &item{
		raw:   in.Name,
		name:  name,
		typ:   typ,
		perm:  uint16(in.Mode & 0o7777),
		uid:   uint32(in.Uid),
		gid:   uint32(in.Gid),
		mtime: in.ModTime,
		atime: in.AccessTime,
		ctime: in.ChangeTime,
	}
	switch typ {
	case tar.TypeReg:
		if in.Size < 0 {
			return nil, reject(in.Name, ruleCorruptArchive, "negative size")
		}
		if in.Size > maxFileSize {
			return nil, fmt.Errorf("tree entry %q: %d bytes; this builder writes files up to %d bytes: %w",
				in.Name, in.Size, int64(maxFileSize), core.ErrUnsupported)
		}
		it.size = in.Size
	case tar.TypeLink:
		target, rj := treeName(in.Linkname, true)
		if rj != nil {
			return nil, reject(in.Name, rj.rule, "hard link target %q: %s", in.Linkname, rj.detail)
		}
		if target == name {
			return nil, reject(in.Name, ruleHardlinkSelf, "links to itself")
		}
		it.link = target
	case tar.TypeSymlink:
		if in.Linkname == "" || len(in.Linkname) >= maxPath || strings.IndexByte(in.Linkname, 0) >= 0 {
			return nil, reject(in.Name, ruleSymlinkTarget, "target of %d bytes (1..%d without NUL)", len(in.Linkname), maxPath-1)
		}
		it.link = in.Linkname
	case tar.TypeChar, tar.TypeBlock:
		if in.Devmajor < 0 || in.Devminor < 0 || in.Devmajor > 0xFFF || in.Devminor > 0xFFFFF {
			return nil, reject(in.Name, ruleBadDevice, "device %d:%d", in.Devmajor, in.Devminor)
		}
		it.major, it.minor = uint32(in.Devmajor), uint32(in.Devminor)
	}
	if name == "." && typ != tar.TypeDir {
		return nil, reject(in.Name, ruleRootNotDir, "root entry of type %q", typ)
	}
	if typ != tar.TypeLink { // a hard link shares its target's inode and xattrs
		xs, err := xattrsOf(in, typ)
		if err != nil {
			return nil, err
		}
		it.xattrs = xs
	}
	return it, nil
}

// xattrsOf keeps the SCHILY.xattr.* records of in that pass the namespace
// allow-list and the kernel's size limits, in ext4's encoding.
func xattrsOf(in *tar.Header, typ byte) ([]*xattr, error) {
	var xs []*xattr
	for k, v := range in.PAXRecords {
		name, ok := strings.CutPrefix(k, xattrPAXPrefix)
		if !ok {
			continue
		}
		if len(name) > 255 || len(v) > 64<<10 {
			return nil, reject(in.Name, ruleXattrTooLarge, "xattr %q: name %d bytes, value %d bytes", name, len(name), len(v))
		}
		if !core.XattrAllowed(name, typ) {
			return nil, reject(in.Name, ruleXattrForbidden, "xattr %q", name)
		}
		x, err := encodeXattr(name, v)
		if err != nil {
			return nil, reject(in.Name, ruleXattrForbidden, "xattr %q: %v", name, err)
		}
		xs = append(xs, x)
	}
	return xs, nil
}

// maxPath is PATH_MAX: no longer name or symlink target can be used.
const maxPath = 4096

// treeName accepts the names the contract allows: clean and relative, one
// trailing "/" tolerated, "." (or "./") for the root, no whiteouts, no
// component over 255 bytes. Hard link targets (link) follow the same
// rules, with their own rule for "..".
func treeName(raw string, link bool) (string, *rejectError) {
	switch {
	case raw == "" && link:
		return "", reject(raw, ruleHardlinkMissing, "empty hard link target")
	case raw == "":
		return "", reject(raw, ruleEmptyName, "empty name")
	case strings.IndexByte(raw, 0) >= 0:
		return "", reject(raw, ruleNulInName, "NUL byte")
	}
	for rest := raw; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if c == ".." && link {
			return "", reject(raw, ruleHardlinkEscape, "target leaves the root")
		}
		if c == ".." {
			return "", reject(raw, rulePathTraversal, "\"..\" component")
		}
	}
	if strings.HasPrefix(raw, "/") {
		return "", reject(raw, ruleAbsoluteName, "absolute name in a flattened tree")
	}
	n := strings.TrimSuffix(raw, "/")
	if n == "." || n == "" {
		return ".", nil
	}
	if path.Clean(n) != n {
		return "", reject(raw, ruleUncleanName, "not clean (%q)", path.Clean(n))
	}
	if len(n) > maxPath {
		return "", reject(raw, rulePathTooLong, "%d bytes > %d", len(n), maxPath)
	}
	for rest := n; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if strings.HasPrefix(c, ".wh.") {
			return "", reject(raw, ruleWhiteoutInTree, "a flattened tree has no whiteouts")
		}
		if len(c) > 255 {
			return "", reject(raw, ruleNameTooLong, "component of %d bytes > 255", len(c))
		}
	}
	return n, nil
}
