package layers

import (
	"context"

	"github.com/cubesandbox/templatecenter/ports"
)

// Flattener is Flatten as a ports.TreeFlattener. A zero Limits field takes
// the DefaultLimits value; Gunzip, when set, decodes gzip layers (see
// GzipProgram).
type Flattener struct {
	Limits Limits
	Gunzip *GzipProgram
}

var _ ports.TreeFlattener = Flattener{}

func (f Flattener) layersOf(layers []ports.FlattenLayer) []Layer {
	ls := make([]Layer, len(layers))
	for i, l := range layers {
		ls[i] = Layer{Path: l.Path, MediaType: l.MediaType, Digest: l.Digest, Size: l.Size, Blob: l.Blob, DiffID: l.DiffID, Derived: l.Derived, Gunzip: f.Gunzip}
	}
	return ls
}

// Flatten implements ports.TreeFlattener.
func (f Flattener) Flatten(ctx context.Context, layers []ports.FlattenLayer, use func(ports.Tree) error) (ports.TreeStats, error) {
	st, err := Flatten(ctx, f.layersOf(layers), f.Limits, use)
	return ports.TreeStats{Entries: st.Entries, ContentBytes: st.ContentBytes}, err
}
