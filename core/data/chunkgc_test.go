package data_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/chunkstore"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestDeletedArtifactsChunksAreCollected deletes an artifact published
// whole and as chunks: the deleter removes both and kicks the collector,
// which deletes the chunks only it used, so the store is left with the
// other artifact and the collector's state alone.
func TestDeletedArtifactsChunksAreCollected(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem, err := artifactstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	chunks := chunkstore.New(mem)
	r := mrand.NewChaCha8([32]byte{3})
	img := func(id string) {
		b := make([]byte, 3<<20)
		_, _ = r.Read(b)
		sum := sha256.Sum256(b)
		want := ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
		key := id + "/" + id + ".ext4"
		if err := mem.Put(ctx, key, bytes.NewReader(b), want); err != nil {
			t.Fatal(err)
		}
		if err := chunks.Put(ctx, key, bytes.NewReader(b), want); err != nil {
			t.Fatal(err)
		}
	}
	img("rfs-1")
	img("rfs-2")
	d := newDB(t0)
	d.addArtifact(t, "rfs-1", core.ArtifactCleanupPending, t0)
	gc := data.NewChunkCollector(chunks, memlock.New(), data.ChunkGCConfig{Interval: time.Hour})
	del := &data.Deleter{Store: d, Artifacts: mem, Chunks: chunks, ChunkGC: gc}
	done := make(chan error, 1)
	go func() { done <- gc.Run(ctx) }()

	if err := del.Delete(ctx, "rfs-1"); err != nil {
		t.Fatal(err)
	}
	keys := func() map[string]bool {
		out := map[string]bool{}
		if err := mem.List(ctx, "", func(k string, _ ports.ObjectInfo) error { out[k] = true; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := map[string]bool{}
	x, err := chunks.Index(ctx, "rfs-2/rfs-2.ext4")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range x.Chunks {
		if !c.Zero {
			want[chunkstore.ChunkKey(c.ID())] = true
		}
	}
	want["rfs-2/rfs-2.ext4"], want["_chunks/index/rfs-2/rfs-2.ext4"], want["_chunks/gc/state"] = true, true, true
	// The kick's collection runs on its own goroutine: wait for it.
	for !equalSets(keys(), want) {
		select {
		case err := <-done:
			t.Fatalf("collector stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// A collection asked for while another holds the lock is refused with
// core.ErrLocked, not run beside it.
func TestChunkCollectionIsExclusive(t *testing.T) {
	ctx := context.Background()
	mem, err := artifactstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	locker := memlock.New()
	lk, err := locker.Lock(ctx, data.ChunkGCLockName)
	if err != nil {
		t.Fatal(err)
	}
	gc := data.NewChunkCollector(chunkstore.New(mem), locker, data.ChunkGCConfig{})
	if _, err := gc.RunOnce(ctx); !errors.Is(err, core.ErrLocked) {
		t.Fatalf("RunOnce while another collection holds the lock: %v, want core.ErrLocked", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.RunOnce(ctx); err != nil {
		t.Fatalf("RunOnce once the lock is free: %v", err)
	}
}
