package artifactstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// flipper is a remote backend that acknowledges uploads and then holds
// other bytes (one flipped) under the metadata it was sent, as a faulty S3
// server would.
type flipper struct{ Driver }

func (f flipper) Put(ctx context.Context, key string, src io.Reader, want ports.ObjectInfo) error {
	b, err := io.ReadAll(src)
	if err != nil {
		return err
	}
	b[len(b)/2] ^= 0xff
	return f.Driver.Put(ctx, key, bytes.NewReader(b), want)
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// An upload a remote store acknowledged but holds differently is refused
// and removed: Put never reports bytes the store does not have.
func TestPutReadsRemoteObjectsBack(t *testing.T) {
	inner := &bucketBackend{b: memblob.OpenBucket(nil), partSize: DefaultPartSize}
	s := &Store{kind: BackendS3, be: flipper{inner}}
	data := bytes.Repeat([]byte("cube"), 4096)
	err := s.Put(context.Background(), "a/a.ext4", bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sum(data)})
	if !errors.Is(err, ErrStoredMismatch) {
		t.Fatalf("Put into a store that corrupts: %v, want ErrStoredMismatch", err)
	}
	if _, err := s.Stat(context.Background(), "a/a.ext4"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("the corrupt object is still there: %v", err)
	}
	good := &Store{kind: BackendS3, be: inner}
	if err := good.Put(context.Background(), "b/b.ext4", bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sum(data)}); err != nil {
		t.Fatalf("Put into a sound store: %v", err)
	}
}

// pausedReadBack holds the first read-back until released.
type pausedReadBack struct {
	Driver
	opened          atomic.Bool
	paused, release chan struct{}
}

func (p *pausedReadBack) Open(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if !p.opened.Swap(true) {
		close(p.paused)
		<-p.release
	}
	return p.Driver.Open(ctx, key, off, n)
}

// TestReadBackLeavesAnotherUploadInPlace: a read-back that finds another
// Put's bytes under the key (two uploads of one key at once) fails, but
// does not remove the other upload's object, which its Put reported.
func TestReadBackLeavesAnotherUploadInPlace(t *testing.T) {
	be := &pausedReadBack{Driver: &bucketBackend{b: memblob.OpenBucket(nil), partSize: DefaultPartSize},
		paused: make(chan struct{}), release: make(chan struct{})}
	s := &Store{kind: BackendS3, be: be}
	ctx := context.Background()
	a, b := []byte("bytes of upload A"), []byte("bytes of upload B, other")
	errA := make(chan error, 1)
	go func() {
		errA <- s.Put(ctx, "k", bytes.NewReader(a), ports.ObjectInfo{Size: int64(len(a)), SHA256: sum(a)})
	}()
	<-be.paused // A is uploaded and about to read back
	if err := s.Put(ctx, "k", bytes.NewReader(b), ports.ObjectInfo{Size: int64(len(b)), SHA256: sum(b)}); err != nil {
		t.Fatalf("Put B: %v", err)
	}
	close(be.release)
	if err := <-errA; !errors.Is(err, ErrStoredMismatch) {
		t.Fatalf("Put A = %v, want ErrStoredMismatch (the key holds B's bytes)", err)
	}
	got, err := s.Stat(ctx, "k")
	if err != nil || got.SHA256 != sum(b) {
		t.Fatalf("after A's failed read-back: Stat = %+v, %v; want B's object", got, err)
	}
}
