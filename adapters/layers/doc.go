// Package layers turns the layers of an OCI image into one flattened tar
// stream (Flatten) and writes such a stream safely under a staging directory
// (Extract). Both treat their input as hostile and refuse it, never clamp
// it: anything suspicious fails with a *RejectError naming the layer, the
// entry and one of the Rule* constants; errors.Is(err, ErrRejected) and
// errors.Is(err, core.ErrInvalidArgument) hold for it. I/O errors of the host
// are returned as they are.
//
// Flatten touches the host only to read layer blobs and to spool their
// content, and the tree it hands over, into unlinked temporary files
// ($TMPDIR). The tree is one record per entry in such a file (spilled.go);
// the in-memory tree it was made from is released before use runs, so a
// builder holds only 12 bytes per entry of it. Its output satisfies the
// ports.Tree contract: no whiteouts, clean relative names (the root itself
// is not emitted), parents before children, siblings sorted by name, hard
// links after the name carrying the content, xattrs as SCHILY.xattr.* PAX
// records, mode (with setuid/setgid/sticky), uid, gid, mtime (whole seconds)
// and device numbers kept. Uname/Gname are dropped: the image stores numbers.
//
// Policies, chosen where the specs leave room:
//
//   - Names: a leading "/" is dropped (it means the image root); a ".."
//     component anywhere is refused, even one that would clean away. NUL,
//     empty names, components over MaxNameLen, paths over MaxPathLen or
//     MaxPathDepth are refused. Other bytes (non-UTF-8, "\", newlines) are
//     kept verbatim; messages quote them.
//   - Symlinks may point anywhere (var/run -> /run must work in the guest)
//     and are stored verbatim. An entry below a symlink is placed where its
//     parent resolves with the image as the root (resolve.go, the one
//     placement rule for every builder): symlinks in parent components are
//     followed, absolute targets restart at the image root, ".." stops at
//     it, missing directories are created there (0755, root:root, mtime 0),
//     more than 40 symlinks are a loop (symlink-loop); the last component
//     is never followed, so an entry replaces a symlink of its name. So
//     "var/run/app.pid" over "var/run -> /run" is emitted as "run/app.pid",
//     as umoci, containerd and Docker unpack it, and nothing is ever placed
//     outside the root. A parent that is a file, device or FIFO is refused
//     (parent-not-dir). The output is therefore resolved: no entry lies
//     below a symlink.
//   - Layers apply in order with overlay semantics: a directory over a
//     directory merges (later metadata wins), anything else replaces the
//     path and its subtree. Within a layer entries replay in archive order,
//     so duplicates end with the last one and each entry resolves against
//     the entries before it. Whiteouts and opaque markers act on their
//     resolved directory and only hide what lower layers put there
//     (image-spec), wherever their own layer's entries stand in the
//     archive; they are refused when malformed (".wh.", ".wh..", ".wh...",
//     ".wh..wh.x", ".wh." parent components).
//   - Hard links share an inode. The target (its directory resolved like
//     any parent, its last component not followed) must be a regular file
//     named earlier in the same layer or present in a lower one; directories,
//     symlinks, devices, FIFOs, missing or later targets, ".." targets and
//     self links are refused. If the target name is later whited out or
//     replaced, the link keeps the old content (as on any filesystem), so it
//     is emitted as a regular file.
//   - Budgets are on declared sizes (tar headers, including the logical size
//     of sparse files), per file, per layer and for the result; decompressed
//     bytes beyond what entries declare plus a metadata allowance are a bomb.
//     zstd windows are capped by MaxZstdWindow.
//   - Xattrs: user.* (files and directories only), security.*, trusted.*
//     and POSIX ACLs; overlay control attributes (trusted.overlay.*,
//     user.overlay.*), unknown namespaces and names with a control
//     character (below 0x20, or DEL; a newline would end an argument of
//     the mkfs builder's debugfs script) are refused.
//   - Type flags other than regular, directory, symlink, hard link, char,
//     block and FIFO are refused by name (PAX global headers are skipped).
//   - A declared media type must match the magic bytes.
//   - Gzip is decoded in Go, or by an external program (GzipProgram: ISA-L's
//     igzip, about 2.5 times faster) in a child process with no environment
//     and, under root, the uid of nobody. Its output goes through the same
//     tar reader, budgets and DiffID check; a broken download stays the
//     download's error, and a decoder that dies by a signal is a host error.
//
// Extract takes a flattened tree, not a layer, and holds it to the
// BuildSpec.Tree contract: every entry is re-validated with the same
// rules, names and hard link targets must already be clean and relative
// (absolute-name, unclean-name), whiteouts and duplicate names are
// refused, an entry below a symlink is refused (parent-symlink: the tree
// must be resolved already), and a stream without the end-of-archive
// marker is truncated (corrupt-archive). It creates nothing through
// symlinks: every operation is relative to a directory handle opened with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV) (an O_NOFOLLOW
// walk on old kernels) and names a single component without following it.
// os.Root is not used because it follows symlinks inside the root and lacks
// mknod and xattr calls. Devices are created on the host only when
// ExtractOptions.SkipDevices is false. The staging directory should still
// live on a nosuid,nodev mount private to the build: Extract faithfully
// creates setuid files and, if asked, device nodes.
package layers
