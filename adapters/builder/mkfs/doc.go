// Package mkfs is the RootfsBuilder that runs e2fsprogs: it extracts the
// flattened tree into a private staging directory and formats an ext4 image
// from it with `mkfs.ext4 -d`.
//
// # Steps
//
//  1. layers.ExtractEntries writes the tree under <WorkDir>/mkfs-*/root
//     (the parent is mode 0700). Device nodes are never created on the
//     host (SkipDevices); they come back as deferred headers. The kernel
//     copies each file's content from the flattener's spool or layer
//     file, and the zero blocks the flattener found while decoding stay
//     holes, so no content byte is copied through this process.
//  2. A walk of the staging tree sets atime = mtime = min(mtime, spec.Time)
//     on every entry (so nothing the host did while staging reaches the
//     image) and measures what the image must hold; files of 64 KiB or more
//     are read once to count the all-zero blocks mke2fs will leave out.
//  3. The size is chosen (see Sizing), checked against spec.MaxSizeBytes,
//     and `mkfs.ext4 -d` formats <OutPath>.tmp.<random> (in the work
//     directory when that is a tmpfs) with a pinned mke2fs.conf written
//     into the work directory, without metadata_csum; `tune2fs -O
//     metadata_csum` then turns the checksums on and `e2fsck -fyD` (with a
//     pinned e2fsck.conf) rebuilds the directories to make room for the
//     checksum tail of each block, indexing every directory of more than
//     one block. The result has the same features as a format with
//     checksums on, in half the time: mke2fs -d with metadata_csum
//     verifies a file's extent tree block again for every data block it
//     appends and every directory block again for each name it adds,
//     which was half of its time on a tree of 30,000 files.
//  4. One `debugfs -w` script adds the deferred devices inside the image
//     (mknod plus set_inode_field for mode, owner, times and device number,
//     ea_set for their xattrs), gives the root directory the tree's root
//     attributes (mode and owner of the staged root, which Extract sets from
//     a "." entry if there is one; mtime spec.Time), rewrites the xattrs of
//     entries that have several in sorted order, and sets ctime to
//     spec.Time on every used inode.
//  5. dumpe2fs must report 4 KiB blocks, the pinned features and the
//     requested free blocks and inodes, and `e2fsck -fn` must exit 0; then
//     the file is renamed onto OutPath or, made on tmpfs, copied there with
//     its sha256 computed on the way (BuildResult.SHA256: the image's data
//     is read 4 MiB at a time into a few buffers, each hashed and, unless
//     all zeros, written out with direct I/O, several at once where the
//     filesystem takes it: adapters/diskio; holes are hashed, not read).
//     The copy runs alongside the read-only e2fsck -fn and is
//     renamed onto OutPath only once that passed. It is not fsynced again:
//     the artifact store makes the published copy durable. The staging
//     tree and every temporary file are removed on every path.
//
// FastWorkDir picks /dev/shm for the work directory when it can: staging
// tens of thousands of files and deleting them is far cheaper on tmpfs.
//
// # Filesystem choice
//
// The image is the read-only base under a sandbox's writable layer, so it is
// formatted without a journal (it would cost at least 4 MiB and protect no
// write) and without resize_inode (no reserved GDT blocks; resize2fs can
// still grow the image offline). Features: ext_attr, dir_index, filetype,
// extent, flex_bg, sparse_super, large_file, huge_file, dir_nlink,
// extra_isize and metadata_csum; 256-byte inodes (in-inode xattrs and
// timestamps past 2038), 4 KiB blocks, no reserved blocks (-m 0),
// half_md4 directory hashing. It mounts read-write as plain ext4 too; there
// is then simply no crash consistency.
//
// # Reproducibility
//
// Same tree + same spec.UUID + same spec.Time gives byte-identical images:
//
//   - the child environment is rebuilt from scratch: LC_ALL=C (mke2fs -d
//     visits directories with scandir+alphasort, which then sorts by bytes,
//     not by the host's readdir order or locale), TZ=UTC, MKE2FS_CONFIG
//     pointing at our own mke2fs.conf and E2FSCK_CONFIG at our own
//     e2fsck.conf (the host's /etc/mke2fs.conf and /etc/e2fsck.conf cannot
//     change output; ours leaves no slack in indexed directories),
//     E2FSPROGS_FAKE_TIME=spec.Time (superblock times and every time mke2fs
//     invents) and E2FSCK_TIME=spec.Time (the last check time e2fsck -D
//     writes);
//   - -U <uuid> and -E hash_seed=<uuid>;
//   - -E nodiscard,assume_storage_prezeroed=1 on a freshly truncated (all
//     zero) file, so the result does not depend on whether the host
//     filesystem can punch holes;
//   - mke2fs copies atime and ctime from the staged files; atime is set in
//     the walk and ctime, which no one can set on the host, is overwritten
//     in the debugfs pass;
//   - mke2fs allocates hard links by (st_dev, st_ino) of the staged files
//     and skips all-zero blocks itself, so neither the host's inode numbers
//     nor its hole layout reach the image;
//   - mke2fs stores xattrs in the order llistxattr returns them, which is
//     insertion order on ext4 and not on tmpfs; entries with two or more
//     are found in the image (debugfs ls, checked against the staging
//     directory) and get them removed and set again in sorted order;
//   - the size is a function of the staged tree only.
//
// Not covered: xattrs the host filesystem adds on its own (SELinux labels,
// inherited default ACLs on WorkDir) are copied like any other xattr; use a
// WorkDir without them.
//
// # The debugfs script
//
// debugfs runs its command file one line at a time, as root, and goes on
// after a failed command; a line starting with "!" runs a shell. A string
// that ended a line early would therefore run the rest as a command on the
// host. Every string the script interpolates (device paths, xattr names,
// the work directory) is checked first: one holding a newline, a carriage
// return or a NUL, or a command line longer than 1022 bytes (debugfs
// reads a line into a BUFSIZ buffer, 1024 bytes with musl, and runs the
// excess as the next command), fails the build with core.ErrUnsupported
// before debugfs runs. Xattr values never enter it (ea_set -f reads them
// from files), and entries other than devices are named by inode, so a
// file name with a newline is fine. The flattener and Extract already
// refuse xattr names with control characters (core.XattrAllowed); this is
// the second line.
//
// The builder needs root: staging keeps owners, setuid bits and trusted.*
// and security.* xattrs, which only root can set. Without root Build fails
// with core.ErrUnsupported.
//
// # Sizing
//
// Let B = 4096. From the staged tree (hard-linked files counted once):
//
//	data     = Σ over regular files of their non-zero B-blocks (files from
//	           64 KiB on are read to find the all-zero blocks mke2fs leaves
//	           out, and zero runs of 256 KiB or more are punched out of the
//	           staged copy so mke2fs skips them; smaller files count
//	           ceil(size/B)), plus extent tree blocks: none while
//	           runs + data/32768 + ceil(data/32768) ≤ 4, else one per 340
//	           extents
//	dirs     = Σ over directories of dirBlocks(Σ rec_len of ".", ".." and
//	           every child), dirBlocks(n) = 1 if n ≤ 4084 else, as e2fsck
//	           -D indexes it, 1 root + L = ceil(n/3820) leaves (+ceil(L/510)
//	           index blocks when L > 508; +1 extent block per 340 when over
//	           4 blocks), rec_len(name) = (8+len(name)+3) &^ 3
//	symlinks = 1 block per target of 60 bytes or more
//	xattrs   = 1 block per inode whose xattrs exceed the 92 in-inode bytes
//	inodes   = 11 reserved + every inode of the tree + HeadroomInodes
//	need     = data + dirs + symlinks + xattrs + ceil(HeadroomBytes/B)
//
// The smallest size S (a multiple of 2 MiB) is searched for whose empty
// filesystem, made with the same options and inode count (a dry mke2fs of a
// sparse file, a few milliseconds), has at least `need` free blocks;
// metadata overhead (bitmaps, inode tables, superblock backups, root and
// lost+found) is therefore measured, not modelled. The real build happens
// at S. If mke2fs still runs out of blocks or inodes (it exits 1 and names
// which), the size or inode count grows by a quarter (at least 2 MiB or 256
// inodes) and the image is rebuilt; if the finished image has fewer free
// blocks or inodes than the headroom, it grows by the shortfall. At most
// maxAttempts (6) formats are tried, and every size is checked against
// MaxSizeBytes first, so the loop ends with an image or a clear error.
package mkfs
