package chunk

import (
	"context"
	"crypto/sha256"
	"io"
)

// Build splits r into an index, the object's sha256 included; keep, when
// set, sees every chunk (as Split's emit) before Build goes on.
func Build(ctx context.Context, r io.Reader, keep func(Chunk) error) (*Index, error) {
	h := sha256.New()
	x := &Index{}
	size, err := Split(ctx, io.TeeReader(r, h), func(c Chunk) error {
		x.Chunks = append(x.Chunks, c.Entry)
		if keep != nil {
			return keep(c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	x.Size = size
	copy(x.SHA256[:], h.Sum(nil))
	return x, nil
}
