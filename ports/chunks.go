package ports

import (
	"context"
	"io"

	"github.com/cubesandbox/templatecenter/core/chunk"
)

// ChunkStore keeps objects as content-defined chunks and an index
// (core/chunk), each chunk stored once however many objects share it. It
// is an ArtifactStore, held to the same contract and suite
// (ports/artifactstoretest): Put verifies size and sha256 and publishes
// nothing otherwise (no index; chunks already written stay, unreferenced,
// as they are content-addressed); Stat and Open answer from the index and
// the chunks (Open verifies each chunk before passing it on); Delete
// removes the object's index, not the chunks other objects may share;
// SignedURL is unsupported. ports/chunkstoretest is its own suite.
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
}
