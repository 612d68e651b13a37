package pipeline

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// The artifact goes to the chunk store too, under the same key and with
// the same promise; a chunk store that fails leaves the build and the
// whole file published, and says why.
func TestRunPublishesChunks(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"published as chunks", nil},
		{"chunk store fails", errors.New("chunk store down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var mu sync.Mutex
			var got map[string]ports.ObjectInfo
			f.pipeline.Chunks = &portsmock.ChunkStoreMock{
				PutFunc: func(ctx context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
					if _, err := io.Copy(io.Discard, r); err != nil {
						return err
					}
					mu.Lock()
					got = map[string]ports.ObjectInfo{key: want}
					mu.Unlock()
					return tc.err
				},
			}
			res, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := core.ArtifactObjectKey(res.ArtifactID)
			if _, ok := f.put[key]; !ok {
				t.Fatal("the whole file was not published")
			}
			if w, ok := got[key]; !ok || w.SHA256 != res.SHA256 || w.Size != res.SizeBytes {
				t.Fatalf("chunk store got %v, want %s with the artifact's size and sha256", got, key)
			}
			if (res.ChunksErr != nil) != (tc.err != nil) || (tc.err != nil && !errors.Is(res.ChunksErr, tc.err)) {
				t.Fatalf("ChunksErr = %v, want %v", res.ChunksErr, tc.err)
			}
			assertEmptyDir(t, f.pipeline.ScratchDir)
		})
	}
}
