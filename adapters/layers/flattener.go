package layers

import (
	"context"
	"io"

	"github.com/cubesandbox/templatecenter/ports"
)

// Flattener is Flatten as a ports.TreeFlattener. A zero Limits field takes
// the DefaultLimits value.
type Flattener struct {
	Limits Limits
}

var _ ports.TreeFlattener = Flattener{}

// Flatten implements ports.TreeFlattener.
func (f Flattener) Flatten(ctx context.Context, layers []ports.FlattenLayer, w io.Writer) (ports.TreeStats, error) {
	ls := make([]Layer, len(layers))
	for i, l := range layers {
		ls[i] = Layer{Path: l.Path, MediaType: l.MediaType, Digest: l.Digest, Size: l.Size, Blob: l.Blob, DiffID: l.DiffID, Derived: l.Derived}
	}
	st, err := Flatten(ctx, ls, w, f.Limits)
	return ports.TreeStats{Entries: st.Entries, ContentBytes: st.ContentBytes}, err
}
