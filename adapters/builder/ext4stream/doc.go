// Package ext4stream is the ext4stream builder: a pure-Go ext4 writer
// that needs no root, no mount and no e2fsprogs. It is the default builder
// of templatecenter, linked into the binary, and the same code is served
// as an out-of-process plugin by plugins/ext4stream.
//
// # Two steps, one pass over the content
//
// Every entry of the tree is held to the ports.TreeEntry contract with the
// staging extractor's rules and rule names (tree.go, reject.go): clean
// relative names, nothing below a symlink or a file, no duplicates or
// whiteouts, hard links to earlier regular files, the xattr allow-list,
// owner and device ranges; ports/flattenertest's tree corpus checks it.
// The whole tree is placed first (writer.go): inodes, directories and
// each file's data blocks, its all-zero blocks left out as holes (known
// from TreeEntry.Zero, or found by reading the content once). Then the
// metadata is written (finish.go: directories, extent tree blocks, xattr
// blocks, inode tables and bitmaps, the superblock and group descriptors)
// and the content is copied into place in one sequential pass while a
// second goroutine hashes the image in order (content.go). Until the
// metadata is written the writer holds the whole tree's layout, compactly:
// a fixed-size record per inode, names in one arena found by (directory,
// hash of name), pointer-free copy jobs; about 130 bytes per entry for a
// tree of small files (TestPlanHeapPerEntry holds it to 180).
//
// # The file system
//
// 4 KiB blocks, 256-byte inodes (timestamps with nanoseconds and epoch
// bits, so 1901..2446; in-inode xattrs), features ext_attr, dir_index,
// sparse_super2 (no backup superblocks), filetype, extent, flex_bg,
// large_file, huge_file, dir_nlink, extra_isize; no journal, no
// resize_inode. It is sized to the content: exactly the blocks and inodes
// the tree needs plus BuildSpec.HeadroomBytes and HeadroomInodes, rounded
// up to a multiple of 2 MiB. It mounts read-write, so the headroom is
// usable; directories are linear when written and the kernel indexes them
// as they grow (dir_index). All-zero blocks of regular files are left out
// (holes), as mke2fs -d does. POSIX ACLs are stored in ext4's own
// encoding; other xattrs go in the inode while they fit, the rest in one
// xattr block (sorted, hashed, as the kernel searches it).
//
// Times: mtime, and atime/ctime when the tree carries them, are kept
// (clamped to what ext4 stores); atime and ctime the tree lacks, creation
// times, the root and lost+found unless the tree declares them, and the
// superblock times are BuildSpec.Time.
//
// # Reproducibility
//
// The bytes are a function of the tree and the spec: entries are placed
// lowest layer first, each layer's in tree order (ports.TreeEntry.Layer),
// and inodes are numbered, data placed and directory entries listed in
// that order, so that a rebuild whose upper layers changed leaves the
// lower layers' inodes, data and directory entries in place (a node then
// fetches little of it: core/chunk); the UUID and directory hash seed are BuildSpec.UUID, and
// group descriptor blocks are reserved for max(MaxSizeBytes,
// DefaultMaxSize) so that any cap up to DefaultMaxSize gives the same
// image.
//
// # Durability
//
// The image is not fsynced: a build's image is hashed and published to the
// artifact store, which makes its own copy durable, and a caller that keeps
// OutPath syncs it if it must survive a crash.
//
// Limits, reported with core.ErrUnsupported: files up to 1 TiB, xattrs of
// one entry up to the in-inode space plus one 4 KiB block (no ea_inode),
// 65000 names per file, images up to 16 TiB (DefaultMaxSize unless
// MaxSizeBytes asks for more).
package ext4stream
