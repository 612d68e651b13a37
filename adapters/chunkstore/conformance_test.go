package chunkstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/url"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/chunkstoretest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// recorder is an artifactstore.Store that remembers the keys written
// through it, so the harness can remove them from a shared bucket. It
// embeds the store, so the chunk store still finds PutUnsynced.
type recorder struct {
	*artifactstore.Store
	mu   sync.Mutex
	keys map[string]bool
}

func (r *recorder) note(key string) {
	r.mu.Lock()
	r.keys[key] = true
	r.mu.Unlock()
}

func (r *recorder) Put(ctx context.Context, key string, src io.Reader, want ports.ObjectInfo) error {
	r.note(key)
	return r.Store.Put(ctx, key, src, want)
}

func (r *recorder) PutUnsynced(ctx context.Context, key string, b []byte, want ports.ObjectInfo) error {
	r.note(key)
	return r.Store.PutUnsynced(ctx, key, b, want)
}

// harness opens one base store (by URL, or with open) shared by the chunk
// stores it makes.
type harness struct {
	base *recorder
}

func newHarness(ctx context.Context, open func(context.Context) (*artifactstore.Store, error)) (*harness, error) {
	s, err := open(ctx)
	if err != nil {
		return nil, err
	}
	return &harness{base: &recorder{Store: s, keys: map[string]bool{}}}, nil
}

func (h *harness) MakeStore(context.Context) (ports.ChunkStore, error) { return New(h.base), nil }

func (h *harness) Corrupt(ctx context.Context, id string, b []byte) error {
	s := sha256.Sum256(b)
	return h.base.Store.Put(ctx, ChunkKey(id), bytes.NewReader(b), ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(s[:])})
}

func (h *harness) Close() {
	ctx := context.Background()
	for k := range h.base.keys {
		_ = h.base.Store.Delete(ctx, k)
	}
	_ = h.base.Close()
}

func byURL(u string) func(context.Context) (*artifactstore.Store, error) {
	return func(ctx context.Context) (*artifactstore.Store, error) { return artifactstore.Open(ctx, u) }
}

func run(t *testing.T, open func(t *testing.T) func(context.Context) (*artifactstore.Store, error)) {
	chunkstoretest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (chunkstoretest.Harness, error) {
		return newHarness(ctx, open(t))
	})
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openers open a fresh store of each kind artifactstore registers.
var openers = map[string]func(t *testing.T) func(context.Context) (*artifactstore.Store, error){
	artifactstore.BackendFile: func(t *testing.T) func(context.Context) (*artifactstore.Store, error) {
		return byURL("file://" + t.TempDir())
	},
	artifactstore.BackendMem: func(*testing.T) func(context.Context) (*artifactstore.Store, error) {
		return byURL("mem://?prefix=p")
	},
	artifactstore.BackendS3: func(t *testing.T) func(context.Context) (*artifactstore.Store, error) {
		cfg := artifactstore.S3Config{
			Endpoint:     testenv.Get(t, testenv.S3Endpoint),
			Bucket:       testenv.Get(t, testenv.S3Bucket),
			AccessKey:    testenv.Get(t, testenv.S3AccessKey),
			SecretKey:    testenv.Get(t, testenv.S3SecretKey),
			UsePathStyle: true,
			Prefix:       "chunkstore-test-" + randomHex(),
		}
		return func(ctx context.Context) (*artifactstore.Store, error) { return artifactstore.OpenS3(ctx, cfg) }
	},
	artifactstore.BackendGCS: func(t *testing.T) func(context.Context) (*artifactstore.Store, error) {
		endpoint, err := url.Parse(testenv.Get(t, testenv.GCSEndpoint))
		if err != nil {
			t.Fatal(err)
		}
		// gcsblob then talks to the emulator with no Google credentials.
		t.Setenv("STORAGE_EMULATOR_HOST", endpoint.Host)
		return byURL("gs://" + testenv.Get(t, testenv.GCSBucket) + "?prefix=chunkstore-test-" + randomHex())
	},
}

// TestConformance runs the chunk store suite (the artifact-store suite
// included) over every kind of store artifactstore registers: a kind
// added without an opener here fails, so none goes untested.
func TestConformance(t *testing.T) {
	for _, name := range artifactstore.Schemes() {
		t.Run(name, func(t *testing.T) {
			open, ok := openers[name]
			if !ok {
				t.Fatalf("artifact store kind %q has no opener in this test: add one", name)
			}
			run(t, open)
		})
	}
}
