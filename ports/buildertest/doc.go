// Package buildertest is the fidelity suite every ports.RootfsBuilder runs.
//
// RunConformanceTests takes a HarnessMaker (gocloud drivertest style): a
// Harness makes the builder under test, the flattener that feeds it in
// production, and reports the builder's optional Capabilities.
//
// The suite builds images from a multi-layer input (three layers, gzip,
// plain tar and zstd, passed through the harness's flattener) that holds
// regular, empty, large (20 MiB) and sparse files, directories with odd
// modes, fast and slow, relative, absolute and dangling symlinks, hard links
// (also across layers), character and block devices (old and new device
// number encodings), a FIFO, setuid and setgid files, user.*, trusted.*
// and security.* xattrs (security.capability included, and one set large
// enough to need an xattr block), non-root and 32-bit owners, 255-byte and
// non-ASCII names, whiteouts and opaque directories, files replaced by
// directories and back, and 3000 files in one directory.
//
// Every image is read back with e2fsprogs (debugfs, dumpe2fs, e2fsck), never
// with our own ext4 parser, into a Tree that is compared entry for entry
// with the Tree the suite derives from the layers by its own, deliberately
// simple model of OCI layer semantics. When the suite runs as root with loop
// devices available, the image is also mounted read-only and read back
// through the kernel's ext4 driver.
//
// The suite also checks: e2fsck -fn is clean, 4 KiB blocks, a size that is a
// multiple of 2 MiB and within a documented bound of the content, byte
// reproducibility, headroom (or core.ErrUnsupported when the builder says it
// has none), that an image over MaxSizeBytes fails with
// core.ErrInvalidArgument and a cancelled build with context.Canceled, that
// a failed or cancelled build leaves nothing behind, and
// (TreeCorpus) that the builder refuses, with the contract's rule, every
// tree of the tree-level hostile corpus of ports/flattenertest.
//
// HostileLayers runs every layer-level case of ports/flattenertest's
// hostile corpus end to end, the flattener streaming into the builder as in
// a build (a harness implementing LimitsHarness also runs the budget
// cases): a refused case fails the build with the flattener's rule and
// leaves nothing behind; an accepted one (writes through symlinks,
// contained in the root) builds an image holding exactly the flattened
// tree, read back with debugfs. The victim files outside the output
// directory never change and no device node appears on the host.
//
// Injected builds images as the data plane adds to them (core/pipeline):
// the envd layer after the image's own, then the CubeEgress root CA baked
// into the flattened tree, and checks with debugfs that envd is at
// upstream's path with upstream's mode and that the CA is appended to the
// image's trust bundle and anchor directory, or seeded as the only bundle
// of an image that had none.
//
// RunUpstreamCorpus is the realistic part, run once for all builders by
// adapters/builder/fidelity: images that umoci unpacks (a debootstrap
// merged-/usr Debian base with a layer writing through lib/, bin/ and
// var/run/, a busybox-style hard link farm, more than 25,000 entries,
// sparse files, odd names, a directory replaced by a symlink before writes
// beneath it), each compared entry by entry with `umoci unpack` (or GNU
// tar, for the old GNU sparse format umoci refuses). It is skipped with
// -short.
//
// The pieces are exported for other tests: FidelityInput gives the layers
// and the expected Tree, ReadImage and ReadDir read an ext4 image and a
// directory into a Tree, TreeOf reads a flattened tree into the Tree a
// builder must make of it, and Diff compares two Trees.
package buildertest
