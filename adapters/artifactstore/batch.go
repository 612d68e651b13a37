package artifactstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"

	"github.com/cubesandbox/templatecenter/ports"
)

// Many small objects at once (the chunk store's chunks, adapters/chunkstore):
// PutUnsynced publishes one held to the same checks as Put, but on the file
// backend without syncing it or its directory, and SyncAll then makes every
// such object durable with one syncfs(2). A thousand chunks then cost one
// flush, not a thousand (an fsync, a rename and a directory fsync each:
// milliseconds apiece on a virtual disk). A crash before SyncAll may leave
// some of them empty or missing; a caller that publishes nothing pointing
// at them until SyncAll returns, and checks the size of an object it finds
// already there, is not misled. On S3 and GCS the server makes an
// acknowledged upload durable; there PutUnsynced is a Put without the read
// back, and SyncAll does nothing.

// PutUnsynced publishes b under key once it is want (see above).
func (s *Store) PutUnsynced(ctx context.Context, key string, b []byte, want ports.ObjectInfo) error {
	full, err := s.fullKey(key)
	if err != nil {
		return fmt.Errorf("put object: %w", err)
	}
	if err := checkWant(want); err != nil {
		return fmt.Errorf("put object %s: %w", key, err)
	}
	src := newVerifier(bytes.NewReader(b), want)
	if d, ok := s.be.(*dirBackend); ok {
		err = d.putUnsynced(ctx, full, src, want)
	} else {
		err = s.be.put(ctx, full, src, want)
	}
	if err != nil {
		return fmt.Errorf("put object %s: %w", key, err)
	}
	return nil
}

// SyncAll makes the objects PutUnsynced published durable.
func (s *Store) SyncAll(ctx context.Context) error {
	d, ok := s.be.(*dirBackend)
	if !ok {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := d.root.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syncFS(f); err != nil {
		return fmt.Errorf("sync the store's filesystem: %w", err)
	}
	return nil
}

// putUnsynced is put without the fsyncs of the file and its directory.
func (d *dirBackend) putUnsynced(ctx context.Context, key string, src *verifier, want ports.ObjectInfo) (err error) {
	dir := path.Dir(key)
	if err := d.mkdirAll(dir); err != nil {
		return err
	}
	tmp := path.Join(dir, tmpPrefix+randomHex())
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = f.Close()
			_ = d.root.Remove(tmp)
		}
	}()
	if _, err := f.ReadFrom(ctxReader{ctx, src}); err != nil {
		return err
	}
	if err := setXattr(f, shaXattr, want.SHA256); err != nil {
		return fmt.Errorf("record sha256: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.root.Rename(tmp, key); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	renamed = true
	return nil
}
