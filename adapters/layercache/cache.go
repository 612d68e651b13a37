package layercache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
)

var (
	// ErrDigestMismatch: the bytes written do not hash to the expected digest.
	ErrDigestMismatch = errors.New("layercache: digest mismatch")
	// ErrSizeMismatch: more or fewer bytes than the expected size.
	ErrSizeMismatch = errors.New("layercache: size mismatch")
	// ErrInvalidDigest: the digest is malformed or uses an algorithm the
	// cache does not accept (sha256 and sha512 only).
	ErrInvalidDigest = errors.New("layercache: invalid digest")
)

// Cache is a content-addressed blob cache rooted at one directory. It is
// safe for concurrent use by goroutines and by several processes sharing
// the directory.
type Cache struct {
	dir      string
	maxBytes int64
	// evictMu keeps this process from running two evictions at once; other
	// processes are kept apart from our blobs by the pin locks.
	evictMu sync.Mutex
}

// staleTemp is how old an unlocked partial download may get before Open
// (or SweepTemp) deletes it: old enough that no live resume still wants it.
const staleTemp = 24 * time.Hour

// Open opens (creating if needed) the cache in dir. maxBytes caps the total
// size of committed blobs; 0 or less means no cap. Blobs pinned by a lease
// are never evicted, so the total can exceed the cap while they are in use.
func Open(dir string, maxBytes int64) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("layercache: directory is empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("layercache: %w", err)
	}
	c := &Cache{dir: abs, maxBytes: maxBytes}
	for _, sub := range []string{"blobs", "meta", "tmp", "locks", "derived"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o755); err != nil {
			return nil, fmt.Errorf("layercache: %w", err)
		}
	}
	c.SweepTemp()
	if _, err := c.Evict(); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir returns the cache directory.
func (c *Cache) Dir() string { return c.dir }

// MaxBytes returns the size cap (0 or less: none).
func (c *Cache) MaxBytes() int64 { return c.maxBytes }

// checkDigest accepts only well-formed sha256/sha512 digests: they become
// file names, so nothing else may reach a path.
func checkDigest(d digest.Digest) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w %q: %v", ErrInvalidDigest, string(d), err)
	}
	switch d.Algorithm() {
	case digest.SHA256, digest.SHA512:
		return nil
	}
	return fmt.Errorf("%w %q: algorithm %s is not accepted", ErrInvalidDigest, string(d), d.Algorithm())
}

func (c *Cache) blobPath(d digest.Digest) string {
	return filepath.Join(c.dir, "blobs", d.Algorithm().String(), d.Encoded())
}

func (c *Cache) metaPath(d digest.Digest) string {
	return filepath.Join(c.dir, "meta", d.Algorithm().String(), d.Encoded()+".json")
}

func (c *Cache) partialPath(d digest.Digest) string {
	return filepath.Join(c.dir, "tmp", d.Algorithm().String()+"-"+d.Encoded()+".partial")
}

func (c *Cache) writeLockPath(d digest.Digest) string {
	return filepath.Join(c.dir, "locks", d.Algorithm().String()+"-"+d.Encoded()+".write")
}

func (c *Cache) pinLockPath(d digest.Digest) string {
	return filepath.Join(c.dir, "locks", d.Algorithm().String()+"-"+d.Encoded()+".pin")
}

// meta is the sidecar of one blob.
type meta struct {
	Digest  string            `json:"digest"`
	Size    int64             `json:"size"`
	MTimeNS int64             `json:"mtime_ns"`
	Inode   uint64            `json:"inode"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// matches reports whether the blob on disk still looks like the one that
// was verified when the sidecar was written.
func (m *meta) matches(d digest.Digest, st os.FileInfo) bool {
	return m.Digest == d.String() && m.Size == st.Size() &&
		m.MTimeNS == st.ModTime().UnixNano() && m.Inode == inode(st)
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

func (c *Cache) readMeta(d digest.Digest) (*meta, error) {
	b, err := os.ReadFile(c.metaPath(d))
	if err != nil {
		return nil, err
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("sidecar %s: %w", c.metaPath(d), err)
	}
	return &m, nil
}

// writeMeta replaces the sidecar atomically. It is not fsynced: a lost
// sidecar only costs a re-hash on the next Get.
func (c *Cache) writeMeta(d digest.Digest, m *meta) error {
	p := c.metaPath(d)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".meta-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// touch records an access for LRU eviction (atime is unreliable under
// noatime/relatime, so the sidecar's mtime carries it).
func (c *Cache) touch(d digest.Digest) {
	now := time.Now()
	_ = os.Chtimes(c.metaPath(d), now, now)
}

// Get returns the path of the verified blob d. ok is false when the cache
// does not hold it, including when the entry was found corrupt (it is then
// removed, so fetching it again repairs the cache).
func (c *Cache) Get(d digest.Digest) (path string, ok bool, err error) {
	if err := checkDigest(d); err != nil {
		return "", false, err
	}
	p := c.blobPath(d)
	st, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("layercache: %w", err)
	}
	m, merr := c.readMeta(d)
	if merr == nil && m.matches(d, st) {
		c.touch(d)
		return p, true, nil
	}
	// The sidecar is missing or disagrees with the file: re-hash once.
	good, err := c.rehash(d, p, m)
	if err != nil {
		return "", false, err
	}
	if !good {
		return "", false, nil
	}
	return p, true, nil
}

// Verify re-hashes blob d unconditionally. A corrupt entry is removed and
// reported as ErrDigestMismatch; a missing one as os.ErrNotExist.
func (c *Cache) Verify(d digest.Digest) error {
	if err := checkDigest(d); err != nil {
		return err
	}
	p := c.blobPath(d)
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	m, _ := c.readMeta(d)
	good, err := c.rehash(d, p, m)
	if err != nil {
		return err
	}
	if !good {
		return fmt.Errorf("layercache: blob %s: %w", d, ErrDigestMismatch)
	}
	return nil
}

// rehash hashes the blob at p. A good blob gets a fresh sidecar (keeping
// old labels); a bad one is deleted. It opens the file once and compares
// inodes before deleting, so a blob another process just renamed into place
// is never removed by mistake.
func (c *Cache) rehash(d digest.Digest, p string, old *meta) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("layercache: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("layercache: %w", err)
	}
	h := d.Algorithm().Hash()
	if _, err := io.Copy(h, f); err != nil {
		return false, fmt.Errorf("layercache: reading %s: %w", p, err)
	}
	if digest.NewDigest(d.Algorithm(), h) == d {
		m := &meta{Digest: d.String(), Size: st.Size(), MTimeNS: st.ModTime().UnixNano(), Inode: inode(st)}
		if old != nil && old.Digest == d.String() {
			m.Labels = old.Labels
		}
		if err := c.writeMeta(d, m); err != nil {
			return false, fmt.Errorf("layercache: %w", err)
		}
		c.touch(d)
		return true, nil
	}
	// Corrupt. Remove it unless a writer is busy replacing it right now.
	lk, locked, err := tryLockFile(c.writeLockPath(d), true)
	if err != nil {
		return false, fmt.Errorf("layercache: %w", err)
	}
	if !locked {
		return false, nil
	}
	defer unlockAndRemove(lk)
	if cur, err := os.Stat(p); err == nil && os.SameFile(cur, st) {
		_ = os.Remove(p)
		_ = os.Remove(c.metaPath(d))
		_ = os.RemoveAll(c.derivedDir(d))
	}
	return false, nil
}

// Put stores the blob read from r, which must yield exactly size bytes
// hashing to d, and returns its path. If the blob is already cached (or
// another writer commits it while Put waits for the write lock) r is not
// read and the existing path is returned. Any partial download of d is
// discarded, since r starts at byte 0.
func (c *Cache) Put(d digest.Digest, size int64, r io.Reader) (string, error) {
	return c.PutContext(context.Background(), d, size, r)
}

// PutContext is Put with a context bounding the wait for the write lock.
func (c *Cache) PutContext(ctx context.Context, d digest.Digest, size int64, r io.Reader) (string, error) {
	w, path, err := c.Begin(ctx, d, size)
	if err != nil {
		return "", err
	}
	if w == nil {
		return path, nil
	}
	defer w.Close()
	if w.Offset() > 0 {
		if err := w.Reset(); err != nil {
			return "", err
		}
	}
	if _, err := io.Copy(w, r); err != nil {
		return "", err
	}
	return w.Commit()
}

// Labels returns the labels stored with blob d (nil when there are none or
// the blob is not cached).
func (c *Cache) Labels(d digest.Digest) (map[string]string, error) {
	if err := checkDigest(d); err != nil {
		return nil, err
	}
	m, err := c.readMeta(d)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return m.Labels, nil
}

// SetLabel stores a small key/value with blob d, for facts derived from
// its verified bytes (a layer's DiffID) that are costly to recompute. The
// blob must be cached.
func (c *Cache) SetLabel(d digest.Digest, key, value string) error {
	if err := checkDigest(d); err != nil {
		return err
	}
	// Serialise read-modify-write of the sidecar with writers of d.
	lk, err := lockFile(context.Background(), c.writeLockPath(d), true)
	if err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	defer unlockAndRemove(lk)
	m, err := c.readMeta(d)
	if err != nil {
		return fmt.Errorf("layercache: blob %s has no sidecar: %w", d, err)
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[key] = value
	if err := c.writeMeta(d, m); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	return nil
}

// SweepTemp deletes partial downloads nobody has touched for a day and
// sidecar temp files left by a crash. Open runs it; a long-running process
// also calls it now and then, since a download that failed for good keeps
// its partial file (for a resume that may never come) and partial files do
// not count against the size cap.
func (c *Cache) SweepTemp() {
	cutoff := time.Now().Add(-staleTemp)
	entries, _ := os.ReadDir(filepath.Join(c.dir, "tmp"))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.ModTime().After(cutoff) {
			continue
		}
		d, ok := digestFromTempName(e.Name())
		if !ok {
			_ = os.Remove(filepath.Join(c.dir, "tmp", e.Name()))
			continue
		}
		lk, locked, err := tryLockFile(c.writeLockPath(d), true)
		if err != nil || !locked {
			continue
		}
		_ = os.Remove(filepath.Join(c.dir, "tmp", e.Name()))
		unlockAndRemove(lk)
	}
}

func digestFromTempName(name string) (digest.Digest, bool) {
	const suffix = ".partial"
	if len(name) <= len(suffix) || name[len(name)-len(suffix):] != suffix {
		return "", false
	}
	base := name[:len(name)-len(suffix)]
	for i := 0; i < len(base); i++ {
		if base[i] == '-' {
			d := digest.Digest(base[:i] + ":" + base[i+1:])
			return d, checkDigest(d) == nil
		}
	}
	return "", false
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
