// Package flattenertest is the conformance suite every ports.TreeFlattener
// runs, and the hostile corpus every consumer of a flattened tree
// (BuildSpec.Tree) is held to.
//
// RunConformanceTests checks a flattener against:
//
//   - the hostile corpus (Cases; security reference §6a): path traversal,
//     absolute and over-long names, symlink and hard link escapes, loops,
//     malformed whiteouts, forbidden xattrs, bad owners and devices,
//     truncated archives, budgets and compression bombs, media type lies.
//     Each case is refused with its rule (RuleOf reads it from the error
//     message, which must also wrap core.ErrInvalidArgument), or accepted
//     with everything kept inside the root; either way a victim sentinel
//     beside the root (Victim) stays untouched and no scratch file
//     outlives the call. Layer cases run plain, gzip and zstd (sniffed).
//   - the positive semantics (Semantics): whiteouts and opaque markers
//     hide lower layers only, replacement of files by directories and
//     back, symlinks stored verbatim, hard links sharing an inode and
//     surviving whiteouts, implied parents, and the order of the output
//     (parents first, siblings sorted by name bytes).
//   - metadata, stats, determinism, compression formats, empty input,
//     error messages and cancellation.
//
// RunTreeCorpus runs the tree-level part of the same corpus (entries a
// hostile or buggy flattener could emit: "..", absolute or unclean names,
// entries under a symlink or a file, hard links to missing, later or
// non-regular targets, duplicates, leftover whiteouts, bad devices and
// xattrs) against a tree consumer such as a builder or a staging
// extractor, so flattener, streaming feed and staging are checked by one
// list. Device nodes must never appear on the host.
//
// Adapters run both through short harness tests; Seeds, TreeOps and
// CheckTree serve their fuzz targets.
package flattenertest
