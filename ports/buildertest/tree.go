package buildertest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Type is the kind of a tree entry.
type Type string

// Entry types.
const (
	TypeReg     Type = "file"
	TypeDir     Type = "dir"
	TypeSymlink Type = "symlink"
	TypeChar    Type = "char"
	TypeBlock   Type = "block"
	TypeFIFO    Type = "fifo"
)

// Entry is one path of a root filesystem as the suite compares it.
type Entry struct {
	Path string // slash-separated, relative; "." is the root
	Type Type
	// Mode holds the permission bits with setuid, setgid and sticky
	// (07777). Symlinks are always 0777.
	Mode     uint32
	UID, GID uint32
	MTime    int64  // unix seconds
	Size     int64  // regular files
	SHA256   string // regular files, lowercase hex
	Target   string // symlinks
	Major    uint32 // devices
	Minor    uint32
	Xattrs   map[string]string
	// Inode identifies the inode within one Tree; entries sharing it are
	// hard links of each other. Its value only matters within a Tree.
	Inode uint64
	// Blocks is the space the entry takes in 512-byte units, when the
	// reader knows it (images); 0 otherwise.
	Blocks int64
}

// Tree maps Entry.Path to its Entry.
type Tree map[string]*Entry

// Paths returns the paths of t, sorted.
func (t Tree) Paths() []string { return slices.Sorted(maps.Keys(t)) }

// links returns, for every path, the sorted other paths sharing its inode
// (non-directories only).
func (t Tree) links() map[string][]string {
	byIno := map[uint64][]string{}
	for p, e := range t {
		if e.Type != TypeDir && e.Inode != 0 {
			byIno[e.Inode] = append(byIno[e.Inode], p)
		}
	}
	out := map[string][]string{}
	for _, ps := range byIno {
		if len(ps) < 2 {
			continue
		}
		sort.Strings(ps)
		for _, p := range ps {
			var others []string
			for _, q := range ps {
				if q != p {
					others = append(others, q)
				}
			}
			out[p] = others
		}
	}
	return out
}

// DiffOptions relaxes Diff.
type DiffOptions struct {
	// IgnoreRootMTime skips the root directory's mtime (builders choose
	// it; trees from Flatten have no root entry).
	IgnoreRootMTime bool
	// AllowExtra lists paths that got may hold and want may lack
	// ("lost+found", which mke2fs always creates).
	AllowExtra []string
	// IgnoreMTime lists paths whose mtime is not compared (directories an
	// unpacker creates at extraction time).
	IgnoreMTime []string
}

// Diff lists every difference between want and got, one line each, sorted
// by path. It compares type, mode, owner, mtime, size, content, symlink
// target, device numbers, xattrs and hard link groups.
func Diff(want, got Tree, opt DiffOptions) []string {
	var out []string
	add := func(p, f string, args ...any) { out = append(out, fmt.Sprintf("%s: ", p)+fmt.Sprintf(f, args...)) }
	extra := map[string]bool{}
	for _, p := range opt.AllowExtra {
		extra[p] = true
	}
	wl, gl := want.links(), got.links()
	for _, p := range want.Paths() {
		w, g := want[p], got[p]
		if g == nil {
			add(p, "missing (want %s)", w.Type)
			continue
		}
		if w.Type != g.Type {
			add(p, "type %s, want %s", g.Type, w.Type)
			continue
		}
		if w.Mode != g.Mode {
			add(p, "mode %04o, want %04o", g.Mode, w.Mode)
		}
		if w.UID != g.UID || w.GID != g.GID {
			add(p, "owner %d:%d, want %d:%d", g.UID, g.GID, w.UID, w.GID)
		}
		if w.MTime != g.MTime && !(p == "." && opt.IgnoreRootMTime) && !slices.Contains(opt.IgnoreMTime, p) {
			add(p, "mtime %d, want %d", g.MTime, w.MTime)
		}
		switch w.Type {
		case TypeReg:
			if w.Size != g.Size {
				add(p, "size %d, want %d", g.Size, w.Size)
			} else if w.SHA256 != g.SHA256 {
				add(p, "content sha256 %s, want %s", g.SHA256, w.SHA256)
			}
		case TypeSymlink:
			if w.Target != g.Target {
				add(p, "target %q, want %q", g.Target, w.Target)
			}
		case TypeChar, TypeBlock:
			if w.Major != g.Major || w.Minor != g.Minor {
				add(p, "device %d:%d, want %d:%d", g.Major, g.Minor, w.Major, w.Minor)
			}
		}
		if !maps.Equal(nonNil(w.Xattrs), nonNil(g.Xattrs)) {
			add(p, "xattrs %s, want %s", fmtXattrs(g.Xattrs), fmtXattrs(w.Xattrs))
		}
		if !slices.Equal(wl[p], gl[p]) {
			add(p, "hard links %q, want %q", gl[p], wl[p])
		}
	}
	for _, p := range got.Paths() {
		if want[p] == nil && !extra[p] && !underExtra(p, extra) {
			add(p, "unexpected %s", got[p].Type)
		}
	}
	return out
}

func underExtra(p string, extra map[string]bool) bool {
	for e := range extra {
		if strings.HasPrefix(p, e+"/") {
			return true
		}
	}
	return false
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func fmtXattrs(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
