package portsmock

import (
	"bytes"
	"context"
	"io"
	"os"

	"github.com/cubesandbox/templatecenter/ports"
)

// FetchFunc fetches every layer of an image before returning, the way a
// test source finds it easiest to describe.
type FetchFunc func(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error)

// Streamed turns fetch into an ImageSourceMock.StreamLayersFunc: fetch
// runs first, then each layer streams from its file (or as empty bytes
// when there is no such file: mock layers are often names only), and wait
// returns what fetch returned. A fetch error is StreamLayers' own.
func Streamed(fetch FetchFunc) func(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
	return func(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
		if progress == nil {
			progress = func(ports.PullProgress) {}
		}
		local, err := fetch(ctx, req, img, progress)
		if err != nil {
			return nil, nil, err
		}
		wait := func() ([]ports.LocalLayer, error) { return local, nil }
		streams := make([]ports.StreamedLayer, len(local))
		for i, l := range local {
			var blob io.ReadCloser = io.NopCloser(bytes.NewReader(nil))
			if f, ferr := os.Open(l.Path); ferr == nil {
				blob = f
			}
			streams[i] = ports.StreamedLayer{Descriptor: l.Descriptor, DiffID: l.DiffID, Blob: blob}
		}
		return streams, wait, nil
	}
}
