package artifactstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/cubesandbox/templatecenter/ports"
)

// Many small objects at once (the chunk store's chunks, adapters/chunkstore):
// PutUnsynced publishes one held to the same checks as Put, but on the file
// backend it leaves the directory's sync to SyncAll, which syncs every
// directory such objects went into once. The object's own bytes are synced
// before its rename, as Put does: callers putting many objects at once see
// their flushes merged by the kernel (a thousand 64 KiB files fsynced from
// 32 goroutines took 0.1 s here, one after another 3.5 s), while a
// directory fsync per object would serialise them again. A crash before
// SyncAll may lose some of them; a caller that publishes nothing pointing
// at them until SyncAll returns is not misled. (syncfs(2) would sync the
// whole filesystem, other writers' gigabytes included.) On S3 and GCS the
// server makes an acknowledged upload durable; there PutUnsynced is a Put
// without the read back, and SyncAll does nothing.

// PutUnsynced publishes b under key once it is want (see above). An object
// already under key with want.Size bytes is kept as it is and b is not
// written: the callers name objects by their content (a chunk's key is
// its sha256), so a second write would only cost the disk; one torn by a
// crash has another size and is written again. Whoever reads the object
// checks it against its name.
func (s *Store) PutUnsynced(ctx context.Context, key string, b []byte, want ports.ObjectInfo) error {
	full, err := s.fullKey(key)
	if err != nil {
		return fmt.Errorf("put object: %w", err)
	}
	if err := checkWant(want); err != nil {
		return fmt.Errorf("put object %s: %w", key, err)
	}
	d, isDir := s.be.(*dirBackend)
	if isDir {
		if fi, err := d.root.Lstat(full); err == nil && fi.Mode().IsRegular() && fi.Size() == want.Size {
			return nil
		}
	} else if info, err := s.be.Stat(ctx, full); err == nil && info.Size == want.Size {
		return nil
	}
	src := newVerifier(bytes.NewReader(b), want)
	if isDir {
		err = d.putUnsynced(ctx, full, src, want)
	} else {
		err = s.be.Put(ctx, full, src, want)
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
	d.mu.Lock()
	dirs := d.unsynced
	d.unsynced = nil
	d.mu.Unlock()
	var errs []error
	for dir := range dirs {
		// A directory removed since (Remove prunes empty ones) holds
		// none of the objects any more: nothing to make durable.
		if err := d.syncDir(dir); err != nil && !isNotExist(err) {
			errs = append(errs, fmt.Errorf("sync directory %s: %w", dir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Tried again by the next SyncAll.
		d.mu.Lock()
		if d.unsynced == nil {
			d.unsynced = map[string]bool{}
		}
		for dir := range dirs {
			d.unsynced[dir] = true
		}
		d.mu.Unlock()
		return err
	}
	return nil
}

// putUnsynced is put without the fsync of the directory, which it notes
// for SyncAll.
func (d *dirBackend) putUnsynced(ctx context.Context, key string, src *verifier, want ports.ObjectInfo) (err error) {
	dir := path.Dir(key)
	tmp := path.Join(dir, tmpPrefix+randomHex())
	var f *os.File
	create := func() (err error) {
		f, err = d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		return err
	}
	_, made := d.made.Load(dir)
	if made {
		err = create()
	}
	if !made || isNotExist(err) {
		// Not seen yet, or removed since (Remove prunes empty directories).
		if err = d.inDir(dir, create); err == nil {
			d.made.Store(dir, true)
		}
	}
	if err != nil {
		d.made.Delete(dir)
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
	// Exactly the configured mode, whatever the process's umask.
	if err := f.Chmod(d.fileMode); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
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
	d.mu.Lock()
	if d.unsynced == nil {
		d.unsynced = map[string]bool{}
	}
	d.unsynced[dir] = true
	d.mu.Unlock()
	return nil
}
