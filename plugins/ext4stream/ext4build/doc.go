// Package ext4build is the ext4stream builder: a pure-Go, streaming
// tar → ext4 converter that needs no root, no mount and no e2fsprogs.
//
// The tree streams through a validating re-encoder (feed.go) into hcsshim's
// tar2ext4, which writes file data as it arrives and the metadata at the
// end into a temporary file beside BuildSpec.OutPath. The feed holds the
// tree to the BuildSpec.Tree contract with the staging extractor's rules
// and rule names (reject.go): clean relative names, nothing below a
// symlink or a file, no duplicates or whiteouts, hard links to earlier
// regular files, the xattr allow-list, owner and device ranges, the
// end-of-archive marker; ports/flattenertest's tree corpus checks it. A
// post-processing pass (fixup.go) then repairs what tar2ext4 leaves wrong
// or unset:
//
//   - the padding bits at the end of each inode bitmap, without which
//     `e2fsck -fn` exits 4;
//   - timestamps outside 1901..2038, which tar2ext4 encodes in a way the
//     kernel decodes decades off;
//   - atime/ctime of entries whose tar header had none (set to
//     BuildSpec.Time instead of 1970);
//   - the order of entries in external xattr blocks, which kernels search
//     with an early exit;
//   - the size: the last group is extended with free blocks so that the
//     image is a multiple of 2 MiB;
//   - the identity: UUID, directory hash seed and creation times come from
//     the spec, so identical input gives byte-identical images.
//
// The result is a compact file system flagged read-only (RO_COMPAT
// read-only): no journal, almost no free inodes, under 2 MiB of free
// blocks. It is meant as the read-only base under a writable layer; builds
// asking for headroom fail with core.ErrUnsupported. Small files are not
// inlined (inline_data is incompatible with DAX).
//
// Limits inherited from tar2ext4, reported with core.ErrUnsupported: files
// up to about 42 GiB (its two-level extent trees are wrong), xattrs of one
// entry up to one 4 KiB block, fewer than 65000 subdirectories per
// directory, and 128 GiB per image unless MaxSizeBytes asks for more.
// Directories are linear (no dir_index), so lookups in huge directories are
// slower than on mkfs.ext4 images.
package ext4build
