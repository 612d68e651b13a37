package chunkstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/artifactstoretest"
)

// Harness makes chunk stores for one adapter.
type Harness interface {
	// MakeStore returns a chunk store. Stores of one harness share their
	// base store.
	MakeStore(ctx context.Context) (ports.ChunkStore, error)
	// Corrupt overwrites the stored bytes of the chunk id in the base
	// store with b (a rotted disk, a tampered bucket).
	Corrupt(ctx context.Context, id string, b []byte) error
	// Close releases what the harness opened and removes what it stored.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

const testTimeout = 2 * time.Minute

// RunConformanceTests runs the ArtifactStore suite and the chunk checks.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	t.Run("ArtifactStore", func(t *testing.T) {
		artifactstoretest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (artifactstoretest.Harness, error) {
			h, err := newHarness(ctx, t)
			if err != nil {
				return nil, err
			}
			return asArtifactHarness{h}, nil
		})
	})
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"IndexMatchesTheChunking", testIndex},
		{"SharedChunkOutlivesOneObject", testShared},
		{"FailedPutLeavesNoIndex", testFailedPut},
		{"RottedChunkFailsOpen", testRotted},
		{"ChunkIDs", testChunkIDs},
		{"CollectDeletesOnlyUnusedChunks", testCollect},
		{"CollectKeepsYoungChunks", testCollectGrace},
		{"PublishRacingCollect", testPublishRacingCollect},
	}
	run := randomHex(4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			t.Cleanup(cancel)
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			s, err := h.MakeStore(ctx)
			if err != nil {
				t.Fatalf("MakeStore: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, s: s, prefix: "chunks-" + run + "/" + strings.ToLower(tc.name) + "/"})
		})
	}
}

type asArtifactHarness struct{ h Harness }

func (a asArtifactHarness) MakeStore(ctx context.Context) (ports.ArtifactStore, error) {
	return a.h.MakeStore(ctx)
}
func (asArtifactHarness) SupportsSignedURL() bool { return false }
func (a asArtifactHarness) Close()                { a.h.Close() }

type env struct {
	ctx    context.Context
	h      Harness
	s      ports.ChunkStore
	prefix string
}

func (e *env) key(name string) string { return e.prefix + name }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// object is seeded data with long zero runs, so it has data and zero
// chunks: parts of random bytes and zeros, in turn.
func object(seed uint64, parts ...int) []byte {
	r := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 0xc4})
	var out []byte
	for i, n := range parts {
		b := make([]byte, n)
		if i%2 == 0 {
			_, _ = r.Read(b)
		}
		out = append(out, b...)
	}
	return out
}

func infoOf(b []byte) ports.ObjectInfo {
	s := sha256.Sum256(b)
	return ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(s[:])}
}

func put(t *testing.T, e *env, key string, b []byte) {
	t.Helper()
	if err := e.s.Put(e.ctx, key, bytes.NewReader(b), infoOf(b)); err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
}

func readAll(t *testing.T, open func() (io.ReadCloser, error)) []byte {
	t.Helper()
	rc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testIndex(t *testing.T, e *env) {
	data := object(1, 3<<20, 1<<20, 2<<20+123)
	key := e.key("a")
	put(t, e, key, data)
	got, err := e.s.Index(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want, err := chunk.Build(e.ctx, bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := got.Marshal()
	wb, _ := want.Marshal()
	if !bytes.Equal(gb, wb) {
		t.Fatalf("the stored index differs from core/chunk's (%d and %d chunks)", len(got.Chunks), len(want.Chunks))
	}
	zero := false
	for _, c := range got.Chunks {
		if c.Zero {
			zero = true
			continue
		}
		b := readAll(t, func() (io.ReadCloser, error) { return e.s.OpenChunk(e.ctx, c.ID()) })
		if !bytes.Equal(b, data[c.Offset:c.End()]) {
			t.Fatalf("chunk %s does not hold its bytes", c.ID())
		}
	}
	if !zero {
		t.Fatal("no zero chunk in an object with a megabyte of zeros")
	}
}

func testShared(t *testing.T, e *env) {
	common := object(2, 2<<20)
	a := append(append([]byte(nil), common...), object(3, 1<<20)...)
	b := append(append([]byte(nil), common...), object(4, 1<<20)...)
	put(t, e, e.key("a"), a)
	put(t, e, e.key("b"), b)
	if err := e.s.Delete(e.ctx, e.key("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Index(e.ctx, e.key("a")); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Index after Delete: %v, want core.ErrNotFound", err)
	}
	if got := readAll(t, func() (io.ReadCloser, error) { return e.s.Open(e.ctx, e.key("b"), 0, -1) }); !bytes.Equal(got, b) {
		t.Fatal("the object sharing chunks with a deleted one no longer reads back")
	}
}

func testFailedPut(t *testing.T, e *env) {
	data := object(5, 1<<20)
	bad := infoOf(data)
	bad.SHA256 = strings.Repeat("0", 64)
	key := e.key("bad")
	if err := e.s.Put(e.ctx, key, bytes.NewReader(data), bad); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Put with a wrong sha256: %v, want core.ErrInvalidArgument", err)
	}
	if _, err := e.s.Index(e.ctx, key); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Index after a failed Put: %v, want core.ErrNotFound", err)
	}
}

func testRotted(t *testing.T, e *env) {
	data := object(6, 1<<20)
	key := e.key("rot")
	put(t, e, key, data)
	x, err := e.s.Index(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c := x.Chunks[0]
	rotten := bytes.Clone(data[c.Offset:c.End()])
	rotten[100] ^= 0xff
	if err := e.h.Corrupt(e.ctx, c.ID(), rotten); err != nil {
		t.Fatal(err)
	}
	rc, err := e.s.Open(e.ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, chunk.ErrCorrupt) {
		t.Fatalf("reading an object with a rotted chunk: %v, want chunk.ErrCorrupt", err)
	}
	// A Put of the same object finds the chunk's size right and keeps it:
	// readers still catch it. (Size is all a Put checks of a stored chunk.)
}

func testChunkIDs(t *testing.T, e *env) {
	if _, err := e.s.OpenChunk(e.ctx, strings.Repeat("ab", 32)); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("unknown chunk: %v, want core.ErrNotFound", err)
	}
	for _, id := range []string{"", "../x", strings.Repeat("AB", 32), strings.Repeat("a", 63), strings.Repeat("a", 65)} {
		if _, err := e.s.OpenChunk(e.ctx, id); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("OpenChunk(%q): %v, want core.ErrInvalidArgument", id, err)
		}
	}
	if _, err := e.s.Index(e.ctx, e.key("none")); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Index of a missing object: %v, want core.ErrNotFound", err)
	}
}

// dataIDs are the ids of the data chunks of the object at key.
func dataIDs(t *testing.T, e *env, key string) map[string]bool {
	t.Helper()
	x, err := e.s.Index(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, c := range x.Chunks {
		if !c.Zero {
			ids[c.ID()] = true
		}
	}
	return ids
}

func chunkExists(t *testing.T, e *env, id string) bool {
	t.Helper()
	rc, err := e.s.OpenChunk(e.ctx, id)
	if errors.Is(err, core.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("OpenChunk %s: %v", id, err)
	}
	rc.Close()
	return true
}

func collect(t *testing.T, e *env, grace time.Duration) ports.ChunkCollection {
	t.Helper()
	rep, err := e.s.Collect(e.ctx, grace)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rep
}

func testCollect(t *testing.T, e *env) {
	common := object(20, 2<<20)
	a := append(append([]byte(nil), common...), object(21, 1<<20, 1<<20, 1<<20)...)
	b := append(append([]byte(nil), common...), object(22, 1<<20)...)
	put(t, e, e.key("a"), a)
	put(t, e, e.key("b"), b)
	idsA, idsB := dataIDs(t, e, e.key("a")), dataIDs(t, e, e.key("b"))
	onlyA := 0
	for id := range idsA {
		if !idsB[id] {
			onlyA++
		}
	}
	if onlyA == 0 || len(idsA) == onlyA {
		t.Fatalf("the objects share %d of a's %d chunks; the test needs some shared and some not", len(idsA)-onlyA, len(idsA))
	}
	if rep := collect(t, e, 0); rep.Deleted != 0 || rep.Indexes != 2 {
		t.Fatalf("Collect with every chunk in use: %+v, want 2 indexes read and nothing deleted", rep)
	}
	if err := e.s.Delete(e.ctx, e.key("a")); err != nil {
		t.Fatal(err)
	}
	rep := collect(t, e, 0)
	if rep.Deleted != onlyA || rep.Indexes != 1 || rep.DeletedBytes <= 0 {
		t.Fatalf("Collect after a was deleted: %+v, want a's %d own chunks deleted", rep, onlyA)
	}
	for id := range idsA {
		if chunkExists(t, e, id) != idsB[id] {
			t.Errorf("chunk %s (used by b: %v) exists: %v", id, idsB[id], !idsB[id])
		}
	}
	if got := readAll(t, func() (io.ReadCloser, error) { return e.s.Open(e.ctx, e.key("b"), 0, -1) }); !bytes.Equal(got, b) {
		t.Fatal("b no longer reads back after the collection")
	}
	if err := e.s.Delete(e.ctx, e.key("b")); err != nil {
		t.Fatal(err)
	}
	if rep := collect(t, e, 0); rep.Deleted != len(idsB) {
		t.Fatalf("Collect after b was deleted too: %+v, want b's %d chunks deleted", rep, len(idsB))
	}
	if rep := collect(t, e, 0); rep.Chunks != 0 || rep.Indexes != 0 {
		t.Fatalf("Collect of an emptied store: %+v, want no chunk and no index left", rep)
	}
	// A publish after collections finds nothing missing.
	put(t, e, e.key("a"), a)
	if got := readAll(t, func() (io.ReadCloser, error) { return e.s.Open(e.ctx, e.key("a"), 0, -1) }); !bytes.Equal(got, a) {
		t.Fatal("a published again after its chunks were collected does not read back")
	}
}

func testCollectGrace(t *testing.T, e *env) {
	a := object(23, 1<<20)
	put(t, e, e.key("a"), a)
	ids := dataIDs(t, e, e.key("a"))
	if err := e.s.Delete(e.ctx, e.key("a")); err != nil {
		t.Fatal(err)
	}
	if rep := collect(t, e, time.Hour); rep.Deleted != 0 || rep.Young != len(ids) {
		t.Fatalf("Collect with an hour's grace: %+v, want a's %d chunks kept as young", rep, len(ids))
	}
	for id := range ids {
		if !chunkExists(t, e, id) {
			t.Fatalf("chunk %s younger than the grace was deleted", id)
		}
	}
}

// onlyReader hides every method of r but Read (a reader the chunk store
// cannot read again).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// testPublishRacingCollect publishes objects made of the chunks of a
// deleted object (so the publisher finds them stored and unused) while
// collections run without grace, and checks that every publish either
// reads back whole or failed leaving no index.
func testPublishRacingCollect(t *testing.T, e *env) {
	const rounds = 6
	for i := range rounds {
		old := object(uint64(30+i), 1<<20, 1<<20, 1<<20)
		put(t, e, e.key(fmt.Sprintf("old%d", i)), old)
		if err := e.s.Delete(e.ctx, e.key(fmt.Sprintf("old%d", i))); err != nil {
			t.Fatal(err)
		}
		next := append(append([]byte(nil), old...), object(uint64(60+i), 256<<10)...)
		// A few collections, one after another (a collector that never
		// stops would keep a publisher checking for ever).
		collected := make(chan error, 1)
		go func() {
			var err error
			for n := 0; n < 3 && err == nil; n++ {
				_, err = e.s.Collect(e.ctx, 0)
			}
			collected <- err
		}()
		var r io.Reader = bytes.NewReader(next) // an io.ReaderAt: deleted chunks are stored again
		if i%2 == 1 {
			r = onlyReader{bytes.NewReader(next)}
		}
		key := e.key(fmt.Sprintf("new%d", i))
		perr := e.s.Put(e.ctx, key, r, infoOf(next))
		if err := <-collected; err != nil {
			t.Fatalf("round %d: Collect: %v", i, err)
		}
		if perr != nil {
			if i%2 == 0 || !strings.Contains(perr.Error(), "collection") {
				t.Fatalf("round %d: Put: %v", i, perr)
			}
			if _, err := e.s.Index(e.ctx, key); !errors.Is(err, core.ErrNotFound) {
				t.Fatalf("round %d: a Put that failed left its index: %v", i, err)
			}
			t.Logf("round %d: the publish failed as it should when it cannot store a deleted chunk again: %v", i, perr)
			continue
		}
		for id := range dataIDs(t, e, key) {
			if !chunkExists(t, e, id) {
				t.Fatalf("round %d: the published index names chunk %s, which a collection deleted", i, id)
			}
		}
		if got := readAll(t, func() (io.ReadCloser, error) { return e.s.Open(e.ctx, key, 0, -1) }); !bytes.Equal(got, next) {
			t.Fatalf("round %d: the object published during collections does not read back", i)
		}
	}
}
