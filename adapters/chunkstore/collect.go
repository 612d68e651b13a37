package chunkstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
	"github.com/cubesandbox/templatecenter/ports"
)

// stateKey is the collector's one bookkeeping object: the state of the
// last collection (see the package doc, "Collection").
const stateKey = "_chunks/gc/state"

// Publishers wait for a running collection this long at most (polling
// every settlePoll) before they give up on their index.
const (
	settleWait   = 2 * time.Minute
	settlePoll   = 200 * time.Millisecond
	settleRounds = 5
	// deleters is how many chunk deletions run at once.
	deleters = 8
)

// ErrCollected is wrapped by Put errors when a collection ran while the
// object was being published and removed chunks it needs that Put could
// not store again (its reader is no io.ReaderAt), or when a collection
// kept running past the publisher's patience: the index is removed again
// and the object stays unchunked.
var ErrCollected = errors.New("a chunk collection ran during the publish")

// gcState is the content of stateKey: the token of the last collection
// to start, and whether it still runs. A missing state object is the
// zero value (no collection ever ran).
type gcState struct {
	Token   string `json:"token"`
	Running bool   `json:"running"`
}

func (s *Store) readState(ctx context.Context) (gcState, error) {
	var st gcState
	rc, err := s.base.Open(ctx, stateKey, 0, -1)
	if errors.Is(err, core.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read the chunk collection state: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4096))
	if err != nil {
		return st, fmt.Errorf("read the chunk collection state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("read the chunk collection state: %w: %w", chunk.ErrCorrupt, err)
	}
	return st, nil
}

func (s *Store) writeState(ctx context.Context, st gcState) (ports.ObjectInfo, error) {
	b, _ := json.Marshal(st)
	sum := sha256.Sum256(b)
	if err := s.base.Put(ctx, stateKey, bytes.NewReader(b), ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("write the chunk collection state: %w", err)
	}
	info, err := s.base.Stat(ctx, stateKey)
	if err != nil {
		return info, fmt.Errorf("write the chunk collection state: %w", err)
	}
	return info, nil
}

// settle makes sure every chunk x names is stored once the index of x is
// written: before is the collection state read before the publish looked
// for any chunk. An unchanged state that was not running proves that no
// collection deleted anything meanwhile, and any later one lists the
// index. Otherwise settle waits for the collection to end, checks every
// chunk, stores again those it deleted (from r when it is an
// io.ReaderAt) and checks the state again.
func (s *Store) settle(ctx context.Context, x *chunk.Index, before gcState, r io.Reader) error {
	ra, _ := r.(io.ReaderAt)
	for round := 0; ; round++ {
		now, err := s.readState(ctx)
		if err != nil {
			return err
		}
		if now == before && !now.Running {
			return nil
		}
		if round == settleRounds {
			return fmt.Errorf("%w: %d collections ran while its chunks were checked", ErrCollected, round)
		}
		if now, err = s.waitIdle(ctx); err != nil {
			return err
		}
		if err := s.restore(ctx, x, ra); err != nil {
			return err
		}
		before = now
	}
}

// waitIdle polls the state until no collection runs.
func (s *Store) waitIdle(ctx context.Context) (gcState, error) {
	deadline := time.Now().Add(settleWait)
	for {
		st, err := s.readState(ctx)
		if err != nil || !st.Running {
			return st, err
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%w: collection %s still runs after %v", ErrCollected, st.Token, settleWait)
		}
		select {
		case <-ctx.Done():
			return st, context.Cause(ctx)
		case <-time.After(settlePoll):
		}
	}
}

// restore stores again every data chunk of x the base lacks, read from
// ra, or fails with ErrCollected without ra.
func (s *Store) restore(ctx context.Context, x *chunk.Index, ra io.ReaderAt) error {
	seen := map[[sha256.Size]byte]bool{}
	var todo []chunk.Entry
	for _, e := range x.Chunks {
		if !e.Zero && !seen[e.Sum] {
			seen[e.Sum] = true
			todo = append(todo, e)
		}
	}
	us, batched := s.base.(unsynced)
	err := parallel(ctx, workers, todo, func(ctx context.Context, e chunk.Entry) error {
		_, err := s.base.Stat(ctx, ChunkKey(e.ID()))
		if !errors.Is(err, core.ErrNotFound) {
			return err
		}
		if ra == nil {
			return fmt.Errorf("%w: chunk %s was deleted", ErrCollected, e.ID())
		}
		b := make([]byte, e.Length)
		if _, err := ra.ReadAt(b, e.Offset); err != nil {
			return fmt.Errorf("read chunk %s again: %w", e.ID(), err)
		}
		if sha256.Sum256(b) != e.Sum {
			return fmt.Errorf("read chunk %s again: the object changed: %w", e.ID(), core.ErrInvalidArgument)
		}
		return s.storeChunk(ctx, us, chunk.Chunk{Entry: e, Data: b})
	})
	if err == nil && batched {
		err = us.SyncAll(ctx)
	}
	return err
}

// parallel runs fn over items with n workers and returns the first error.
func parallel[T any](ctx context.Context, n int, items []T, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan T)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range n {
		wg.Go(func() {
			for it := range jobs {
				if err := fn(ctx, it); err != nil {
					once.Do(func() { first = err; cancel(err) })
				}
			}
		})
	}
feed:
	for _, it := range items {
		select {
		case jobs <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// Collect implements ports.ChunkStore: see the package doc, "Collection".
func (s *Store) Collect(ctx context.Context, grace time.Duration) (rep ports.ChunkCollection, err error) {
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	mine := gcState{Token: hex.EncodeToString(tok), Running: true}
	if _, err := s.writeState(ctx, mine); err != nil {
		return rep, fmt.Errorf("collect chunks: %w", err)
	}
	// The start as a listing gives it, the chunks' times' source (S3
	// lists times to the millisecond and heads them to the second).
	var start time.Time
	err = s.base.List(ctx, path.Dir(stateKey)+"/", func(k string, info ports.ObjectInfo) error {
		if k == stateKey {
			start = info.ModTime
		}
		return nil
	})
	if err == nil && start.IsZero() {
		err = fmt.Errorf("the state %s is not listed", stateKey)
	}
	if err != nil {
		return rep, fmt.Errorf("collect chunks: %w", err)
	}
	defer func() {
		// Ended, whatever happened: publishers wait for it. Left as it is
		// if another collection has started since (one that overlapped
		// this one, which its caller should have excluded).
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cur, rerr := s.readState(wctx); rerr == nil && cur == mine {
			if _, werr := s.writeState(wctx, gcState{Token: mine.Token}); werr != nil {
				err = errors.Join(err, fmt.Errorf("collect chunks: %w", werr))
			}
		}
	}()
	// Only chunks older than the collection's start by grace, by the
	// store's own clock, can go.
	cutoff := start.Add(-grace)

	live := map[[sha256.Size]byte]bool{}
	err = s.base.List(ctx, indexPrefix, func(k string, _ ports.ObjectInfo) error {
		x, err := s.Index(ctx, strings.TrimPrefix(k, indexPrefix))
		switch {
		case errors.Is(err, core.ErrNotFound):
			return nil // deleted since listed
		case errors.Is(err, chunk.ErrCorrupt):
			// No node takes an index that does not check, so its
			// chunks are not needed for it.
			rep.BadIndexes++
			return nil
		case err != nil:
			return err
		}
		rep.Indexes++
		for _, e := range x.Chunks {
			if !e.Zero {
				live[e.Sum] = true
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("collect chunks: list the indexes: %w", err)
	}
	var dead []string
	var deadBytes []int64
	err = s.base.List(ctx, chunkPrefix, func(k string, info ports.ObjectInfo) error {
		id := path.Base(k)
		if !idPattern.MatchString(id) || k != ChunkKey(id) {
			return nil // not a chunk of ours: left alone
		}
		rep.Chunks++
		var sum [sha256.Size]byte
		_, _ = hex.Decode(sum[:], []byte(id))
		switch {
		case live[sum]:
		case info.ModTime.After(cutoff):
			rep.Young++
		default:
			dead = append(dead, k)
			deadBytes = append(deadBytes, info.Size)
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("collect chunks: list the chunks: %w", err)
	}
	idx := make([]int, len(dead))
	for i := range idx {
		idx[i] = i
	}
	var mu sync.Mutex
	err = parallel(ctx, deleters, idx, func(ctx context.Context, i int) error {
		if err := s.base.Delete(ctx, dead[i]); err != nil {
			return err
		}
		mu.Lock()
		rep.Deleted++
		rep.DeletedBytes += deadBytes[i]
		mu.Unlock()
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("collect chunks: %w", err)
	}
	return rep, nil
}
