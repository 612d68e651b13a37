package chunkstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// beforeIndex is a base store that runs hook once, just before the first
// index is written: the moment after a publisher has found or stored
// every chunk and before anything names them.
type beforeIndex struct {
	*artifactstore.Store
	hook func()
}

func (b *beforeIndex) Put(ctx context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
	if strings.HasPrefix(key, indexPrefix) && b.hook != nil {
		h := b.hook
		b.hook = nil
		h()
	}
	return b.Store.Put(ctx, key, r, want)
}

// TestCollectionBetweenChunksAndIndex runs a whole collection at the worst
// moment of a publish: its chunks are all stored (those of a deleted
// object found there, the rest written), none is named by an index yet,
// so the collection deletes every one of them. The publish must notice
// and store them again (or, unable to read its object again, fail and
// leave no index); it must never leave an index naming deleted chunks.
func TestCollectionBetweenChunksAndIndex(t *testing.T) {
	for _, rereadable := range []bool{true, false} {
		name := map[bool]string{true: "ReaderAt", false: "Reader"}[rereadable]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mem, err := artifactstore.Open(ctx, "mem://")
			if err != nil {
				t.Fatal(err)
			}
			base := &beforeIndex{Store: mem}
			s := New(base)
			rnd := mrand.NewChaCha8([32]byte{7})
			old := make([]byte, 2<<20)
			_, _ = rnd.Read(old)
			put := func(key string, b []byte, r io.Reader) error {
				sum := sha256.Sum256(b)
				return s.Put(ctx, key, r, ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])})
			}
			if err := put("old", old, bytes.NewReader(old)); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, "old"); err != nil {
				t.Fatal(err)
			}
			fresh := make([]byte, 1<<20)
			_, _ = rnd.Read(fresh)
			next := append(bytes.Clone(old), fresh...)
			var rep ports.ChunkCollection
			base.hook = func() {
				if rep, err = s.Collect(ctx, 0); err != nil {
					t.Errorf("Collect: %v", err)
				}
			}
			var r io.Reader = bytes.NewReader(next)
			if !rereadable {
				r = struct{ io.Reader }{r}
			}
			perr := put("next", next, r)
			if rep.Deleted == 0 {
				t.Fatalf("the collection deleted nothing (%+v): the test did not hit the race", rep)
			}
			if !rereadable {
				if !errors.Is(perr, ErrCollected) {
					t.Fatalf("Put that cannot store deleted chunks again: %v, want ErrCollected", perr)
				}
				if _, err := s.Index(ctx, "next"); !errors.Is(err, core.ErrNotFound) {
					t.Fatalf("the failed Put left its index: %v", err)
				}
				return
			}
			if perr != nil {
				t.Fatalf("Put: %v", perr)
			}
			rc, err := s.Open(ctx, "next", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatalf("reading the object published across a collection: %v", err)
			}
			if !bytes.Equal(got, next) {
				t.Fatal("the object published across a collection reads back wrong")
			}
		})
	}
}
