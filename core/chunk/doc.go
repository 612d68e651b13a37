// Package chunk cuts an artifact into content-defined chunks and describes
// them in an index: the format the data plane publishes next to every
// artifact and nodes read to build a new artifact from chunks they already
// hold, fetching only the others.
//
// # Chunking
//
// Boundaries fall only between 4 KiB blocks. An ext4 image places every
// file's data on block boundaries, so content that moved between two
// builds moved by whole blocks: a boundary rule that looks at blocks finds
// it again as well as a byte-wise rolling hash would, at a fraction of the
// cost. A block ends a chunk when the chunk holds at least MinBlocks and a
// hash of eight words sampled from the block has its low bits set (one
// block in AvgBlocks on average), or when the chunk reached MaxBlocks. The
// rule depends on the block alone, so a boundary found in one build is
// found in the next wherever that block still is. A run of at least
// MinBlocks all-zero blocks (free space, the headroom, holes) is a chunk of
// its own marked zero: it is neither hashed, stored nor sent. The object's
// last block may be short.
//
// A chunk's id is the sha256 of its bytes (lower-case hex). Why not a
// library: restic/chunker (Rabin fingerprints) and desync (buzhash) roll
// a hash over every byte, which on this kind of input buys nothing the
// block rule does not find and costs a second pass over the image as long
// as its sha256; see docs/benchmarks.md for the figures.
//
// # Index
//
// An index (Marshal, Unmarshal) lists every chunk of the object in order
// with its offset, length, kind and sha256, after the object's size and
// sha256, and ends with the sha256 of everything before it. Unmarshal
// refuses an index that is truncated, carries trailing bytes, fails its
// checksum, or whose chunks overlap, leave gaps, run past the object's
// end, or break the size rules: a node never writes from such an index.
package chunk
