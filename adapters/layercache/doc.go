// Package layercache is a content-addressed blob store on local disk, shared
// by builds (and by several processes) to hold verified image layers.
//
// Layout under the cache directory:
//
//	blobs/<alg>/<hex>        the blob, read-only, renamed into place only after
//	                         its size and digest were verified while writing
//	                         (by the writer, or after Writer.SkipHash by the
//	                         caller's own checking reader)
//	meta/<alg>/<hex>.json    sidecar: size, digest, the blob's mtime and inode,
//	                         labels (for example a layer's DiffID); its own
//	                         mtime is the entry's last access time (LRU)
//	tmp/<alg>-<hex>.partial  an unfinished download, kept for Range resume
//	locks/<alg>-<hex>.write  held (flock, exclusive) by the one writer of a digest
//	locks/<alg>-<hex>.pin    held (flock, shared) by every lease that uses a blob
//	derived/<alg>/<hex>/     files a consumer derived from the blob (the
//	                         flattener's decoded layer, see derived.go),
//	                         counted in the blob's size and evicted with it
//
// Why a sidecar: re-hashing a multi-GB layer on every Get is too slow, so Get
// trusts an entry whose size, mtime and inode still match the sidecar and
// re-hashes only when they disagree (or the sidecar is missing). A corrupt
// entry found that way is removed and Get reports a miss, so the caller
// fetches it again. Verify re-hashes unconditionally, for callers that want
// to guard against bit rot that leaves the metadata untouched.
//
// Concurrency: writers of one digest serialise on its write lock, from
// goroutines or processes alike; a writer that gets the lock after another
// committed the blob reuses it instead of downloading again. Eviction (least
// recently used first, when the total exceeds the cap) skips every blob a
// lease pins, so a running build's layers never disappear under it.
package layercache
