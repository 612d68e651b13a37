// Package chunkstoretest is the conformance suite every ports.ChunkStore
// adapter runs: the whole ArtifactStore suite (ports/artifactstoretest)
// against the chunk store, then what chunks add: the index of a stored
// object is the one core/chunk computes and its chunks read back with
// their ids; a chunk two objects share outlives the deletion of one; a
// failed Put leaves no index; a chunk that rotted in the base store fails
// Open instead of passing wrong bytes on; unknown and malformed chunk ids
// are told apart.
package chunkstoretest
