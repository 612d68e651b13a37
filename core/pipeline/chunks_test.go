package pipeline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

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

// A chunk publish slower than the build allows (ChunksWait) goes on after
// the build returns: it still reads the whole image (its scratch copy is
// gone by then), reports on ChunksLate, and drops its index again when
// the artifact was deleted meanwhile.
func TestSlowChunksFinishAfterTheBuild(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "deleted meanwhile"}[deleted], func(t *testing.T) {
			f := newFixture(t)
			f.store.StatFunc = func(ctx context.Context, key string) (ports.ObjectInfo, error) {
				if deleted {
					return ports.ObjectInfo{}, core.ErrNotFound
				}
				return ports.ObjectInfo{Size: int64(len(f.put[key]))}, nil
			}
			release := make(chan struct{})
			var read []byte
			var dropped []string
			f.pipeline.ChunksWait = 1e-9
			f.pipeline.Chunks = &portsmock.ChunkStoreMock{
				PutFunc: func(ctx context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
					<-release
					var err error
					read, err = io.ReadAll(r)
					return err
				},
				DeleteFunc: func(ctx context.Context, key string) error {
					dropped = append(dropped, key)
					return nil
				},
			}
			res, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.ChunksLate == nil || res.ChunksErr != nil {
				t.Fatalf("ChunksLate %v, ChunksErr %v: want the chunk publish going on", res.ChunksLate, res.ChunksErr)
			}
			assertEmptyDir(t, f.pipeline.ScratchDir)
			close(release)
			lerr := <-res.ChunksLate
			key := core.ArtifactObjectKey(res.ArtifactID)
			if !bytes.Equal(read, f.put[key]) {
				t.Fatalf("the late chunk publish read %d bytes, want the %d of the image", len(read), len(f.put[key]))
			}
			if deleted {
				if !errors.Is(lerr, errArtifactGone) || len(dropped) != 1 || dropped[0] != key {
					t.Fatalf("late outcome %v, indexes dropped %v; want %s dropped as its artifact is gone", lerr, dropped, key)
				}
				return
			}
			if lerr != nil || len(dropped) != 0 {
				t.Fatalf("late outcome %v, indexes dropped %v; want success", lerr, dropped)
			}
		})
	}
}

// A build waits for a chunk publish only when it looks like ending within
// its share of the build's time.
func TestChunksWaitFor(t *testing.T) {
	const took = 10 * time.Second // most: 2.5 s at a quarter
	for _, tc := range []struct {
		name       string
		elapsed    time.Duration
		read, size int64
		want       time.Duration
	}{
		{"all read: only writes and the index left", 2 * time.Second, 100, 100, 2500 * time.Millisecond},
		{"nearly read (a rebuild)", 2 * time.Second, 90, 100, 2500 * time.Millisecond},
		{"a third read (all new chunks)", 2 * time.Second, 33, 100, 0},
		{"nothing read yet", 2 * time.Second, 0, 100, 0},
	} {
		if got := ChunksWaitFor(0.25, took, tc.elapsed, tc.read, tc.size); got != tc.want {
			t.Errorf("%s: wait %v, want %v", tc.name, got, tc.want)
		}
	}
}
