// Package diskio writes large files, rootfs images and artifacts, to disk
// the way a build or a download wants them: with direct I/O where the
// filesystem takes it, several writes in flight, and through the page
// cache, with the write-back started at once, where it does not.
//
// Why direct: an image is written once and then read back in order (by
// the artifact store's check, a node's verification), so filling a
// gigabyte of page cache on the way is work that buys nothing; on virtual
// machines whose host hands out memory lazily it is most of a copy's time.
// Why several writes at once: one direct write waits for the disk before
// the next is issued; with four 4 MiB writes in flight the disk and the
// producer overlap (a 1 GB image from tmpfs to ext4 on a 2-core VM: 1.4 s
// with one in flight, 0.7–1.0 s with four, 2.1–2.3 s through the page
// cache).
//
// Buffers hands out the pieces to write from, backed by transparent huge
// pages where the kernel gives them: pinning a piece for a direct write
// then costs two pages, not a thousand.
//
// A Writer is positional: every piece names its offset, so pieces may
// complete in any order. A piece whose address, length or offset is not
// a multiple of Align goes through the page cache; so does everything
// once the filesystem refuses a direct write (EINVAL, EOPNOTSUPP).
package diskio
