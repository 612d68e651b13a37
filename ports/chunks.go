package ports

import (
	"context"
	"io"
	"time"

	"github.com/cubesandbox/templatecenter/core/chunk"
)

// ChunkStore keeps objects as content-defined chunks and an index
// (core/chunk), each chunk stored once however many objects share it. It
// is an ArtifactStore, held to the same contract and suite
// (ports/artifactstoretest): Put verifies size and sha256 and publishes
// nothing otherwise (no index; chunks already written stay, unreferenced,
// as they are content-addressed); Stat and Open answer from the index and
// the chunks (Open verifies each chunk before passing it on); Delete
// removes the object's index, not the chunks other objects may share
// (Collect deletes the chunks no index names); SignedURL is unsupported. ports/chunkstoretest is its own suite.
type ChunkStore interface {
	ArtifactStore
	// Index returns the index of the object at key, checked
	// (chunk.Unmarshal), or an error wrapping core.ErrNotFound.
	Index(ctx context.Context, key string) (*chunk.Index, error)
	// OpenChunk reads the data chunk whose id is its sha256 in lower-case
	// hex, or fails with core.ErrNotFound (no such chunk) or
	// core.ErrInvalidArgument (not an id). The bytes are as stored: the
	// reader checks them against the id.
	OpenChunk(ctx context.Context, id string) (io.ReadCloser, error)
	// Collect deletes the chunks no index names that were stored at least
	// grace before the collection started (by the store's clock), and
	// reports what it found. A Put that runs at the same time never ends
	// with an index naming a deleted chunk: it stores the chunk again or
	// fails without an index. The caller runs one Collect at a time over
	// a store, across every process that shares it (a Locker); a failed
	// Collect may have deleted some of the chunks, never one in use.
	Collect(ctx context.Context, grace time.Duration) (ChunkCollection, error)
}

// ChunkCollection is what one ChunkStore.Collect found and did.
type ChunkCollection struct {
	// Indexes is how many indexes were read; BadIndexes how many did not
	// check (their chunks count as unused: no node takes such an index).
	Indexes, BadIndexes int
	// Chunks is how many chunks were listed; Young how many unused ones
	// were kept as too recent; Deleted how many were deleted, with
	// DeletedBytes bytes.
	Chunks, Young, Deleted int
	DeletedBytes           int64
}
