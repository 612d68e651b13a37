package artifactstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// flipper is a remote backend that acknowledges uploads and then holds
// other bytes (one flipped), as a faulty S3 server would.
type flipper struct{ backend }

func (f flipper) put(ctx context.Context, key string, src io.Reader, want ports.ObjectInfo) error {
	b, err := io.ReadAll(src)
	if err != nil {
		return err
	}
	b[len(b)/2] ^= 0xff
	return f.backend.put(ctx, key, bytes.NewReader(b), ports.ObjectInfo{Size: int64(len(b)), SHA256: sum(b)})
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
