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
// Chunks no index names any more stay: collecting them needs a listing the
// ArtifactStore port does not offer (see docs/operations.md).
package chunkstore
