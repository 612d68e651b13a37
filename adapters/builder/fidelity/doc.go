// Package fidelity compares every builder with `umoci unpack` on the
// upstream corpus of ports/buildertest (RunUpstreamCorpus): a merged-/usr
// Debian base with a layer writing through its symlinks, a hard link farm,
// more than 25,000 entries, sparse files, odd names, and a directory
// replaced by a symlink before writes beneath it. The package holds only
// that test; it builds the ext4stream plugin and runs it the way
// production does, next to the mkfs builder.
package fidelity
