// Package chunkstore implements ports.ChunkStore over any
// ports.ArtifactStore (file, S3, GCS, memory): an object is kept as its
// index (core/chunk) under _chunks/index/<key> and its data chunks under
// _chunks/sha256/<first two hex digits>/<sha256>, each chunk once however
// many objects share it. No artifact id can start with '_', so the chunk
// store and the whole-file artifacts share a bucket and its prefix.
//
// Put reads the object once: its sha256 is computed on one goroutine while
// it is split on another; a chunk the store lacks is written by a small
// pool of workers (remote stores answer one upload at a time per request).
// The index is written last, and only once every chunk is stored and the
// object is the one promised: before that nothing names the new chunks.
// When the base store offers it (artifactstore.Store does), chunks are
// written with their directories synced once, before the index, rather
// than once per chunk (PutUnsynced, SyncAll): sixteen workers' file syncs
// are merged by the kernel, a directory sync per chunk would serialise
// thousands of them. A chunk found already stored is not written again when its
// size is right (a chunk torn by a crash before the sync has the wrong
// size and is written again); one whose bytes rotted is caught by whoever
// reads it, since every read checks the chunk against its id.
//
// # Collection
//
// Delete removes an object's index only. Collect deletes the chunks no
// index names (mark and sweep over the store's listing): it lists every
// index and the chunks they name, then lists the chunks and deletes those
// named by none and stored at least the grace before the collection
// started (by the store's clock). The race to get right is a publish
// running meanwhile: its chunks are stored, or found stored, before its
// index names them, so a collection in between sees them unused.
//
// The fence the two share is one small object, _chunks/gc/state, a
// sequence lock: a collection writes it as {its random token, running}
// before it lists any index and as {token, ended} after its last delete.
// Put reads it before it looks for any chunk and again after it wrote the
// index. The same ended state both times proves that no collection
// deleted anything in between (a collection that started later lists the
// index and keeps its chunks; one that ended before had deleted all it
// would). Otherwise Put waits for the collection to end, checks every
// chunk of the index, stores again those that were deleted (reading them
// from its reader when that is an io.ReaderAt, as the data plane's files
// are) and reads the state again, until it is unchanged over a check; if
// it cannot store a chunk again, or collections keep running, it deletes
// its index and fails with ErrCollected: the object then stays whole
// only, and a node given no index falls back to the whole file. So no
// Put that succeeds leaves an index naming a deleted chunk. This holds
// with one collection at a time over a store (the data plane takes a
// Locker lock for it) and a store whose reads see every completed write
// (file, S3 and GCS do). The state object is the one object the chunk
// store keeps that no artifact owns.
package chunkstore
