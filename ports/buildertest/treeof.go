package buildertest

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"
)

// TreeOf reads a flattened tree (a BuildSpec.Tree stream) into the Tree a
// faithful builder must produce from it: the root is 0755 root:root
// unless the stream has a "." entry, implied parents are 0755 root:root
// with mtime 0, hard links share their target's inode.
func TreeOf(r io.Reader) (Tree, error) {
	tree := Tree{".": {Path: ".", Type: TypeDir, Mode: 0o755, Inode: 1}}
	next := uint64(2)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tree, nil
		}
		if err != nil {
			return nil, err
		}
		p := strings.TrimSuffix(h.Name, "/")
		if p == "" {
			p = "."
		}
		for d := path.Dir(p); d != "." && tree[d] == nil && p != "."; d = path.Dir(d) {
			tree[d] = &Entry{Path: d, Type: TypeDir, Mode: 0o755, Inode: next}
			next++
		}
		if h.Typeflag == tar.TypeLink {
			t := tree[h.Linkname]
			if t == nil {
				return nil, fmt.Errorf("%s: hard link to missing %s", p, h.Linkname)
			}
			e := *t
			e.Path = p
			tree[p] = &e
			continue
		}
		e := &Entry{Path: p, Mode: uint32(h.Mode & 0o7777), UID: uint32(h.Uid), GID: uint32(h.Gid), MTime: h.ModTime.Unix(), Inode: next}
		next++
		if p == "." {
			e.Inode = 1
		}
		for k, v := range h.PAXRecords {
			if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if e.Xattrs == nil {
					e.Xattrs = map[string]string{}
				}
				e.Xattrs[name] = v
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Type = TypeDir
		case tar.TypeReg, tar.TypeGNUSparse:
			hash := sha256.New()
			n, err := io.Copy(hash, tr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			e.Type, e.Size, e.SHA256 = TypeReg, n, hex.EncodeToString(hash.Sum(nil))
		case tar.TypeSymlink:
			e.Type, e.Target, e.Mode = TypeSymlink, h.Linkname, 0o777
		case tar.TypeChar, tar.TypeBlock:
			e.Type = TypeChar
			if h.Typeflag == tar.TypeBlock {
				e.Type = TypeBlock
			}
			e.Major, e.Minor = uint32(h.Devmajor), uint32(h.Devminor)
		case tar.TypeFifo:
			e.Type = TypeFIFO
		default:
			return nil, fmt.Errorf("%s: unsupported type %q", p, h.Typeflag)
		}
		tree[p] = e
	}
}
