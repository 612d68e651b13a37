package chunkstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
	"github.com/cubesandbox/templatecenter/ports"
)

const (
	indexPrefix = "_chunks/index/"
	chunkPrefix = "_chunks/sha256/"
	// workers is how many chunk uploads run at once.
	workers = 16
)

// unsynced is what a base store may offer for many small objects: see
// artifactstore.Store.PutUnsynced.
// PutUnsynced keeps an object already there with the right size.
type unsynced interface {
	PutUnsynced(ctx context.Context, key string, b []byte, want ports.ObjectInfo) error
	SyncAll(ctx context.Context) error
}

// Store is a ports.ChunkStore over a base ArtifactStore. It is safe for
// concurrent use.
type Store struct {
	base ports.ArtifactStore
}

var _ ports.ChunkStore = (*Store)(nil)

// New returns a chunk store keeping its objects in base.
func New(base ports.ArtifactStore) *Store { return &Store{base: base} }

func indexKey(key string) string { return indexPrefix + key }

// ChunkKey is the base store's key of the chunk with id.
func ChunkKey(id string) string { return chunkPrefix + id[:2] + "/" + id }

var idPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Backend names the base store's kind.
func (s *Store) Backend() string { return s.base.Backend() }

// Put implements ports.ArtifactStore: see the package doc.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
	if want.Size < 0 {
		return fmt.Errorf("put chunked %s: %w", key, &core.FieldError{Field: "size", Reason: fmt.Sprintf("%d is negative", want.Size)})
	}
	if !core.IsSHA256Hex(want.SHA256) {
		return fmt.Errorf("put chunked %s: %w", key, &core.FieldError{Field: "sha256", Reason: fmt.Sprintf("%q is not 64 lower-case hex digits", want.SHA256)})
	}
	// The key is checked by the base store on the index's key; fail
	// before reading anything.
	if _, err := s.base.Stat(ctx, indexKey(key)); errors.Is(err, core.ErrInvalidArgument) {
		return fmt.Errorf("put chunked: %w", err)
	}
	// Read before any chunk is looked for: see settle.
	before, err := s.readState(ctx)
	if err != nil {
		return fmt.Errorf("put chunked %s: %w", key, err)
	}
	x, err := s.split(ctx, io.LimitReader(r, want.Size+1))
	if err != nil {
		return fmt.Errorf("put chunked %s: %w", key, err)
	}
	if x.Size != want.Size || x.SHA256Hex() != want.SHA256 {
		return fmt.Errorf("put chunked %s: %w: %d bytes with sha256 %s, want %d bytes with %s", key, core.ErrInvalidArgument, x.Size, x.SHA256Hex(), want.Size, want.SHA256)
	}
	b, err := x.Marshal()
	if err != nil {
		return fmt.Errorf("put chunked %s: %w", key, err)
	}
	sum := sha256.Sum256(b)
	if err := s.base.Put(ctx, indexKey(key), bytes.NewReader(b), ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}); err != nil {
		return fmt.Errorf("put chunked %s: index: %w", key, err)
	}
	if err := s.settle(ctx, x, before, r); err != nil {
		// Not proven complete: the index goes again.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return errors.Join(fmt.Errorf("put chunked %s: %w", key, err), s.base.Delete(dctx, indexKey(key)))
	}
	return nil
}

// split reads r once: it hashes the whole object on one goroutine while it
// cuts it into chunks on this one and stores the chunks the base lacks
// with a pool of workers. It returns once every chunk is stored (and, on
// a base that batches, synced).
func (s *Store) split(ctx context.Context, r io.Reader) (*chunk.Index, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The object's bytes go to the hashing goroutine in copies from a few
	// reused buffers, which it hands back once hashed.
	hashed, free := make(chan []byte, 4), make(chan []byte, 4)
	for range cap(free) {
		free <- make([]byte, 0, 4<<20)
	}
	sumc := make(chan [sha256.Size]byte, 1)
	go func() {
		h := sha256.New()
		for b := range hashed {
			h.Write(b)
			free <- b
		}
		var sum [sha256.Size]byte
		copy(sum[:], h.Sum(nil))
		sumc <- sum
	}()
	jobs := make(chan chunk.Chunk, workers)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel(err)
		}
		errMu.Unlock()
	}
	us, batched := s.base.(unsynced)
	// Buffers of the chunks in flight: a worker owns one until it is done.
	pool := sync.Pool{New: func() any { return make([]byte, 0, chunk.MaxDataLength) }}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				if err := s.storeChunk(ctx, us, c); err != nil {
					fail(err)
				}
				//lint:ignore SA6002 a slice header is small next to the 256 KiB it saves
				pool.Put(c.Data[:0])

			}
		}()
	}
	x := &chunk.Index{}
	seen := map[[sha256.Size]byte]bool{}
	size, err := chunk.Split(ctx, teeReader{r, hashed, free}, func(c chunk.Chunk) error {
		x.Chunks = append(x.Chunks, c.Entry)
		if c.Zero || seen[c.Sum] {
			return nil
		}
		seen[c.Sum] = true
		b := append(pool.Get().([]byte)[:0], c.Data...)
		c.Data = b
		select {
		case jobs <- c:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	close(hashed)
	close(jobs)
	wg.Wait()
	x.SHA256 = <-sumc
	x.Size = size
	if err == nil {
		err = firstErr
	}
	if err == nil && batched {
		err = us.SyncAll(ctx)
	}
	if err != nil {
		return nil, err
	}
	return x, nil
}

// teeReader hands a copy of what it reads, in a buffer from free, to the
// hashing goroutine.
type teeReader struct {
	r    io.Reader
	c    chan<- []byte
	free <-chan []byte
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.c <- append((<-t.free)[:0], p[:n]...)
	}
	return n, err
}

// storeChunk writes c unless the base already holds it with its size
// (PutUnsynced checks that itself).
func (s *Store) storeChunk(ctx context.Context, us unsynced, c chunk.Chunk) error {
	id := c.ID()
	key := ChunkKey(id)
	want := ports.ObjectInfo{Size: int64(c.Length), SHA256: id}
	var err error
	if us != nil {
		err = us.PutUnsynced(ctx, key, c.Data, want)
	} else if info, serr := s.base.Stat(ctx, key); serr == nil && info.Size == want.Size {
		return nil
	} else {
		err = s.base.Put(ctx, key, bytes.NewReader(c.Data), want)
	}
	if err != nil {
		return fmt.Errorf("store chunk %s: %w", id, err)
	}
	return nil
}

// Index implements ports.ChunkStore.
func (s *Store) Index(ctx context.Context, key string) (*chunk.Index, error) {
	x, _, err := s.index(ctx, key)
	return x, err
}

func (s *Store) index(ctx context.Context, key string) (*chunk.Index, ports.ObjectInfo, error) {
	ik := indexKey(key)
	info, err := s.base.Stat(ctx, ik)
	if err != nil {
		return nil, info, fmt.Errorf("chunk index of %s: %w", key, err)
	}
	rc, err := s.base.Open(ctx, ik, 0, -1)
	if err != nil {
		return nil, info, fmt.Errorf("chunk index of %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, info.Size+1))
	if err != nil {
		return nil, info, fmt.Errorf("chunk index of %s: %w", key, err)
	}
	x, err := chunk.Unmarshal(b)
	if err != nil {
		return nil, info, fmt.Errorf("chunk index of %s: %w", key, err)
	}
	return x, info, nil
}

// OpenChunk implements ports.ChunkStore.
func (s *Store) OpenChunk(ctx context.Context, id string) (io.ReadCloser, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("open chunk: %w", &core.FieldError{Field: "chunk id", Reason: fmt.Sprintf("%q is not a sha256 in lower-case hex", id)})
	}
	rc, err := s.base.Open(ctx, ChunkKey(id), 0, -1)
	if err != nil {
		return nil, fmt.Errorf("open chunk %s: %w", id, err)
	}
	return rc, nil
}

// readChunk reads the chunk e and checks it against its id.
func (s *Store) readChunk(ctx context.Context, e chunk.Entry, buf []byte) ([]byte, error) {
	if e.Zero {
		b := buf[:e.Length]
		clear(b)
		return b, nil
	}
	rc, err := s.OpenChunk(ctx, e.ID())
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b := buf[:e.Length]
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", e.ID(), err)
	}
	if sha256.Sum256(b) != e.Sum {
		return nil, fmt.Errorf("chunk %s: the stored bytes do not match their id: %w", e.ID(), chunk.ErrCorrupt)
	}
	return b, nil
}

// Stat implements ports.ArtifactStore: the object's size and sha256 from
// its index, the index's modification time.
func (s *Store) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	x, info, err := s.index(ctx, key)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	return ports.ObjectInfo{Size: x.Size, SHA256: x.SHA256Hex(), ModTime: info.ModTime}, nil
}

// Open implements ports.ArtifactStore: the object rebuilt from its
// chunks, each checked against its id before its bytes are passed on.
func (s *Store) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("open chunked %s: %w", key, &core.FieldError{Field: "offset", Reason: fmt.Sprintf("%d is negative", offset)})
	}
	x, _, err := s.index(ctx, key)
	if err != nil {
		return nil, err
	}
	if offset > x.Size {
		return nil, fmt.Errorf("open chunked %s: %w", key, &core.FieldError{Field: "offset", Reason: fmt.Sprintf("%d is past the end (%d bytes)", offset, x.Size)})
	}
	end := x.Size
	if length >= 0 && offset+length < end {
		end = offset + length
	}
	first := sort.Search(len(x.Chunks), func(i int) bool { return x.Chunks[i].End() > offset })
	return &reader{ctx: ctx, s: s, chunks: x.Chunks[first:], off: offset, end: end}, nil
}

// reader streams [off, end) of an object from its chunks.
type reader struct {
	ctx      context.Context
	s        *Store
	chunks   []chunk.Entry
	off, end int64
	buf      []byte
	cur      []byte // the rest of the current chunk's bytes in range
	zero     int64  // zero bytes left of a zero chunk (not buffered)
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 && r.zero == 0 {
		if r.off >= r.end || len(r.chunks) == 0 {
			return 0, io.EOF
		}
		e := r.chunks[0]
		r.chunks = r.chunks[1:]
		from, to := max(r.off, e.Offset)-e.Offset, min(r.end, e.End())-e.Offset
		if e.Zero {
			r.zero = to - from
			continue
		}
		if r.buf == nil {
			r.buf = make([]byte, chunk.MaxDataLength)
		}
		b, err := r.s.readChunk(r.ctx, e, r.buf)
		if err != nil {
			return 0, err
		}
		r.cur = b[from:to]
	}
	var n int
	if r.zero > 0 {
		n = int(min(int64(len(p)), r.zero))
		clear(p[:n])
		r.zero -= int64(n)
	} else {
		n = copy(p, r.cur)
		r.cur = r.cur[n:]
	}
	r.off += int64(n)
	return n, nil
}

func (r *reader) Close() error { return nil }

// Delete implements ports.ArtifactStore: the index goes, the chunks stay.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.base.Delete(ctx, indexKey(key)); err != nil {
		return fmt.Errorf("delete chunked %s: %w", key, err)
	}
	return nil
}

// List implements ports.ArtifactStore: the objects whose indexes are
// under prefix, with the size and sha256 their indexes record and the
// indexes' modification times.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string, info ports.ObjectInfo) error) error {
	// The base checks the prefix, with the indexes' in front.
	err := s.base.List(ctx, indexPrefix+prefix, func(k string, _ ports.ObjectInfo) error {
		key := strings.TrimPrefix(k, indexPrefix)
		info, err := s.Stat(ctx, key)
		if errors.Is(err, core.ErrNotFound) {
			return nil // deleted since listed
		}
		if err != nil {
			return err
		}
		return fn(key, info)
	})
	if err != nil {
		return fmt.Errorf("list chunked under %q: %w", prefix, err)
	}
	return nil
}

// SignedURL implements ports.ArtifactStore: a chunked object has no one
// URL (core.ErrUnsupported); an invalid key is still refused as such.
func (s *Store) SignedURL(ctx context.Context, key string, _ time.Duration) (string, error) {
	if _, err := s.base.Stat(ctx, indexKey(key)); errors.Is(err, core.ErrInvalidArgument) {
		return "", fmt.Errorf("sign chunked URL: %w", err)
	}
	return "", fmt.Errorf("sign chunked URL %s: %w", key, core.ErrUnsupported)
}
