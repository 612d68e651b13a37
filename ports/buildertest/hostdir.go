package buildertest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadDir reads the tree under root (for example a loop-mounted image, or
// an unpacked bundle) through the host kernel, without following symlinks.
// Entries whose relative path is in skip (and everything below them) are
// left out.
func ReadDir(root string, skip ...string) (Tree, error) {
	tree := Tree{}
	skipSet := map[string]bool{}
	for _, s := range skip {
		skipSet[s] = true
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skipSet[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := &Entry{
			Path:  rel,
			Mode:  st.Mode & 0o7777,
			UID:   st.Uid,
			GID:   st.Gid,
			MTime: st.Mtim.Sec,
			Inode: st.Ino,
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type, e.Size = TypeReg, st.Size
			if e.SHA256, err = FileSHA256(p); err != nil {
				return err
			}
		case unix.S_IFDIR:
			e.Type = TypeDir
		case unix.S_IFLNK:
			e.Type = TypeSymlink
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFCHR, unix.S_IFBLK:
			e.Type = TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				e.Type = TypeBlock
			}
			e.Major, e.Minor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
		case unix.S_IFIFO:
			e.Type = TypeFIFO
		default:
			return fmt.Errorf("%s: unsupported file type %o", rel, st.Mode&unix.S_IFMT)
		}
		if e.Xattrs, err = hostXattrs(p); err != nil {
			return err
		}
		tree[rel] = e
		return nil
	})
	return tree, err
}

func hostXattrs(p string) (map[string]string, error) {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		if err == unix.ENOTSUP {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, sz)
	if sz, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range strings.Split(string(buf[:sz]), "\x00") {
		if n == "" {
			continue
		}
		vs, err := unix.Lgetxattr(p, n, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", p, n, err)
		}
		v := make([]byte, vs)
		if vs, err = unix.Lgetxattr(p, n, v); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", p, n, err)
		}
		out[n] = string(v[:vs])
	}
	return out, nil
}
