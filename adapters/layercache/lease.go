package layercache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
)

// Lease pins blobs so that eviction (in this or any other process) leaves
// them alone until Release. Pin before Get or Begin: a blob that is not
// pinned may be evicted as soon as it is committed.
type Lease struct {
	c    *Cache
	mu   sync.Mutex
	pins map[digest.Digest]*os.File
	done bool
}

// Acquire returns a lease pinning digests (more can be added with Pin).
// Pinning waits only while an eviction of the same digest is in progress.
func (c *Cache) Acquire(ctx context.Context, digests ...digest.Digest) (*Lease, error) {
	l := &Lease{c: c, pins: map[digest.Digest]*os.File{}}
	for _, d := range digests {
		if err := l.Pin(ctx, d); err != nil {
			l.Release()
			return nil, err
		}
	}
	return l, nil
}

// Pin adds d to the lease. Pinning a digest twice is harmless.
func (l *Lease) Pin(ctx context.Context, d digest.Digest) error {
	if err := checkDigest(d); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return fmt.Errorf("layercache: pin %s: lease already released", d)
	}
	if _, ok := l.pins[d]; ok {
		return nil
	}
	f, err := lockFile(ctx, l.c.pinLockPath(d), false)
	if err != nil {
		return fmt.Errorf("layercache: pin %s: %w", d, err)
	}
	l.pins[d] = f
	return nil
}

// Release unpins everything and runs an eviction if the cache is over its
// cap. It is safe to call more than once.
func (l *Lease) Release() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	for _, f := range l.pins {
		_ = f.Close()
	}
	l.pins = nil
	l.mu.Unlock()
	_, _ = l.c.Evict()
}

type entry struct {
	d      digest.Digest
	size   int64
	access time.Time
}

// entries lists committed blobs with their size and last access.
func (c *Cache) entries() ([]entry, error) {
	var out []entry
	algs, err := os.ReadDir(filepath.Join(c.dir, "blobs"))
	if err != nil {
		return nil, fmt.Errorf("layercache: %w", err)
	}
	for _, a := range algs {
		files, err := os.ReadDir(filepath.Join(c.dir, "blobs", a.Name()))
		if err != nil {
			continue
		}
		for _, f := range files {
			d := digest.NewDigestFromEncoded(digest.Algorithm(a.Name()), f.Name())
			if checkDigest(d) != nil {
				continue
			}
			info, err := f.Info()
			if err != nil {
				continue
			}
			e := entry{d: d, size: info.Size() + c.derivedSize(d), access: info.ModTime()}
			if mi, err := os.Stat(c.metaPath(d)); err == nil {
				e.access = mi.ModTime()
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Usage returns the total size of committed blobs and their derived files.
func (c *Cache) Usage() (int64, error) {
	es, err := c.entries()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range es {
		total += e.size
	}
	return total, nil
}

// Evict removes least recently used blobs that no lease pins until the
// total fits the cap, and returns the bytes freed. Commit and Release call
// it; callers rarely need to.
func (c *Cache) Evict() (int64, error) {
	if c.maxBytes <= 0 {
		return 0, nil
	}
	c.evictMu.Lock()
	defer c.evictMu.Unlock()
	es, err := c.entries()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range es {
		total += e.size
	}
	if total <= c.maxBytes {
		return 0, nil
	}
	sort.Slice(es, func(i, j int) bool { return es[i].access.Before(es[j].access) })
	var freed int64
	for _, e := range es {
		if total <= c.maxBytes {
			break
		}
		lk, ok, err := tryLockFile(c.pinLockPath(e.d), true)
		if err != nil || !ok {
			continue // pinned by a lease somewhere
		}
		if err := os.Remove(c.blobPath(e.d)); err == nil {
			total -= e.size
			freed += e.size
		}
		_ = os.Remove(c.metaPath(e.d))
		_ = os.RemoveAll(c.derivedDir(e.d))
		unlockAndRemove(lk)
	}
	return freed, nil
}
