package layercache

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
)

// Writer is the one writer of a digest, holding its write lock. It appends
// to a partial file that survives Close, so a later Begin resumes where
// this one stopped (Offset), and publishes the blob only through Commit.
type Writer struct {
	c     *Cache
	d     digest.Digest
	size  int64
	lock  *os.File
	f     *os.File
	h     hash.Hash
	n     int64
	done  bool
	wrErr error
}

// Begin takes the write lock of d (waiting for another writer, bounded by
// ctx) and returns either a Writer positioned after the bytes a previous
// attempt left behind, or, when the blob is already cached, its path and a
// nil Writer. The bytes already present are hashed again here, so resuming
// never trusts them: a bad prefix shows up as a digest mismatch at Commit.
func (c *Cache) Begin(ctx context.Context, d digest.Digest, size int64) (w *Writer, path string, err error) {
	if err := checkDigest(d); err != nil {
		return nil, "", err
	}
	if size < 0 {
		return nil, "", fmt.Errorf("layercache: blob %s: negative size %d", d, size)
	}
	lk, err := lockFile(ctx, c.writeLockPath(d), true)
	if err != nil {
		return nil, "", fmt.Errorf("layercache: waiting for writer of %s: %w", d, err)
	}
	p, ok, err := c.Get(d)
	if err != nil || ok {
		unlockAndRemove(lk)
		return nil, p, err
	}
	f, err := os.OpenFile(c.partialPath(d), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		unlockAndRemove(lk)
		return nil, "", fmt.Errorf("layercache: %w", err)
	}
	w = &Writer{c: c, d: d, size: size, lock: lk, f: f, h: d.Algorithm().Hash()}
	if err := w.resume(); err != nil {
		w.Abort()
		return nil, "", err
	}
	return w, "", nil
}

// resume hashes the partial file's bytes and positions the writer after them.
func (w *Writer) resume() error {
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	if st.Size() > w.size {
		return w.Reset()
	}
	n, err := io.Copy(w.h, io.NewSectionReader(w.f, 0, st.Size()))
	if err != nil {
		return fmt.Errorf("layercache: reading partial %s: %w", w.f.Name(), err)
	}
	w.n = n
	if _, err := w.f.Seek(n, io.SeekStart); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	return nil
}

// Name is the path of the partial file. A reader in this process may open
// it to follow the download: the bytes before Offset are written (a later
// Reset truncates them; Commit renames the same file into place, so an
// open descriptor keeps reading the blob).
func (w *Writer) Name() string { return w.f.Name() }

// Digest is the digest being written.
func (w *Writer) Digest() digest.Digest { return w.d }

// Size is the expected size.
func (w *Writer) Size() int64 { return w.size }

// Offset is the number of bytes written so far, including those resumed
// from an earlier attempt: the next byte to fetch.
func (w *Writer) Offset() int64 { return w.n }

// ReadAt reads the bytes already written (for a caller that must replay
// the prefix of a resumed download).
func (w *Writer) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > w.n {
		if off >= w.n {
			return 0, io.EOF
		}
		n, err := w.f.ReadAt(p[:w.n-off], off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	return w.f.ReadAt(p, off)
}

// Write appends p. Writing past the expected size fails with
// ErrSizeMismatch and nothing beyond the size reaches the file.
func (w *Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("layercache: write after commit or abort")
	}
	if w.wrErr != nil {
		return 0, w.wrErr
	}
	if room := w.size - w.n; int64(len(p)) > room {
		n, _ := w.Write(p[:room])
		w.wrErr = fmt.Errorf("layercache: blob %s: more than the expected %d bytes: %w", w.d, w.size, ErrSizeMismatch)
		return n, w.wrErr
	}
	n, err := w.f.Write(p)
	if w.h != nil {
		w.h.Write(p[:n])
	}
	w.n += int64(n)
	if err != nil {
		w.wrErr = fmt.Errorf("layercache: %w", err)
		return n, w.wrErr
	}
	return n, nil
}

// SkipHash is for a caller that writes, from byte 0, exactly the bytes of
// a reader that checks size and digest itself when it reaches its end
// (regclient's blob reader), and that calls Commit only after that reader
// ended without an error: the writer then does not hash the same bytes a
// second time. It refuses (false) once the file holds any byte, resumed
// ones included, since those never passed through that reader; Reset turns
// the writer's own hash back on.
func (w *Writer) SkipHash() bool {
	if w.n != 0 || w.done || w.wrErr != nil {
		return false
	}
	w.h = nil
	return true
}

// Reset discards everything written so far.
func (w *Writer) Reset() error {
	if err := w.f.Truncate(0); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	w.h = w.d.Algorithm().Hash() // what follows is hashed here again
	w.n = 0
	w.wrErr = nil
	return nil
}

// Commit verifies size and digest (the digest unless SkipHash was taken),
// makes the blob durable (fsync file, rename, fsync directory) and releases
// the write lock. On a mismatch the partial file is deleted: its bytes can
// never become the blob. A short blob (fewer bytes than expected) keeps the
// partial for a later resume.
func (w *Writer) Commit() (string, error) {
	if w.done {
		return "", errors.New("layercache: commit after commit or abort")
	}
	if w.wrErr != nil {
		err := w.wrErr
		w.Abort()
		return "", err
	}
	if w.n < w.size {
		err := fmt.Errorf("layercache: blob %s: got %d of %d bytes: %w", w.d, w.n, w.size, ErrSizeMismatch)
		w.Close()
		return "", err
	}
	if w.h != nil { // nil after SkipHash: the caller's reader checked the bytes
		if got := digest.NewDigest(w.d.Algorithm(), w.h); got != w.d {
			err := fmt.Errorf("layercache: blob %s: content hashes to %s: %w", w.d, got, ErrDigestMismatch)
			w.Abort()
			return "", err
		}
	}
	fail := func(err error) (string, error) {
		w.Abort()
		return "", fmt.Errorf("layercache: committing %s: %w", w.d, err)
	}
	if err := w.f.Sync(); err != nil {
		return fail(err)
	}
	if err := w.f.Chmod(0o444); err != nil {
		return fail(err)
	}
	if err := w.f.Close(); err != nil {
		return fail(err)
	}
	final := w.c.blobPath(w.d)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fail(err)
	}
	if err := os.Rename(w.f.Name(), final); err != nil {
		return fail(err)
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return fail(err)
	}
	st, err := os.Stat(final)
	if err != nil {
		return fail(err)
	}
	m := &meta{Digest: w.d.String(), Size: st.Size(), MTimeNS: st.ModTime().UnixNano(), Inode: inode(st)}
	if err := w.c.writeMeta(w.d, m); err != nil {
		return fail(err)
	}
	w.done = true
	unlockAndRemove(w.lock)
	// Eviction trouble must not fail a verified, committed blob; the next
	// commit or Open tries again.
	_, _ = w.c.Evict()
	return final, nil
}

// Close releases the write lock and keeps the partial file for a later
// resume (unless more bytes than expected were offered: then the source is
// wrong and the partial is dropped). It does nothing after Commit or Abort,
// so it can be deferred.
func (w *Writer) Close() error {
	if w.done {
		return nil
	}
	if errors.Is(w.wrErr, ErrSizeMismatch) {
		w.Abort()
		return nil
	}
	w.done = true
	err := w.f.Close()
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	unlockAndRemove(w.lock)
	return err
}

// Abort releases the write lock and deletes the partial file.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	_ = w.f.Close()
	_ = os.Remove(w.c.partialPath(w.d))
	unlockAndRemove(w.lock)
}
