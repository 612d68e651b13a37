package data

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ChunkGCLockName is the lock that makes one chunk collection run at a
// time over the store, across data-plane replicas (ports.ChunkStore.Collect
// asks for it).
const ChunkGCLockName = "tc_chunk_gc_v1"

var errChunkGCLockLost = errors.New("the chunk collection lock was lost")

// Defaults of ChunkGCConfig.
const (
	DefaultChunkGCInterval = time.Hour
	DefaultChunkGCGrace    = 10 * time.Minute
	// chunkGCRetry is how soon a collection asked for while another
	// replica's ran is tried again: that one may have listed the indexes
	// before the delete that asked.
	chunkGCRetry = 5 * time.Second
)

// ChunkGCConfig tunes the ChunkCollector. Zero values take the defaults.
type ChunkGCConfig struct {
	Disabled bool
	// Interval is how often a collection runs besides those artifact
	// deletions ask for (CUBE_TEMPLATE_CENTER_CHUNK_GC_INTERVAL).
	Interval time.Duration
	// Grace keeps unused chunks stored less than this before a collection
	// starts (CUBE_TEMPLATE_CENTER_CHUNK_GC_GRACE, default
	// DefaultChunkGCGrace): the chunks of publishes in flight, which
	// would otherwise be stored again. Zero keeps none.
	Grace  time.Duration
	Logger *slog.Logger
}

func (c ChunkGCConfig) withDefaults() ChunkGCConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultChunkGCInterval
	}
	c.Grace = max(c.Grace, 0)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ChunkCollector deletes the chunks no artifact's index names any more
// (ports.ChunkStore.Collect): after artifact deletions (Kick) and every
// Interval. The data plane owns the store, so it runs here; one
// collection at a time across replicas, under ChunkGCLockName.
type ChunkCollector struct {
	Chunks ports.ChunkStore
	Locker ports.Locker
	Config ChunkGCConfig
	kick   chan struct{}
}

// NewChunkCollector returns a collector of chunks over locker.
func NewChunkCollector(chunks ports.ChunkStore, locker ports.Locker, cfg ChunkGCConfig) *ChunkCollector {
	return &ChunkCollector{Chunks: chunks, Locker: locker, Config: cfg, kick: make(chan struct{}, 1)}
}

// Kick asks for a collection soon (an artifact's index was deleted); it
// never blocks, and kicks before the next collection starts merge.
func (g *ChunkCollector) Kick() {
	if g == nil || g.kick == nil {
		return
	}
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Run collects until ctx ends: once at start, then on every Kick and
// Interval.
func (g *ChunkCollector) Run(ctx context.Context) error {
	c := g.Config.withDefaults()
	if c.Disabled || g.Chunks == nil {
		c.Logger.Info("chunk collection disabled")
		return nil
	}
	c.Logger.Info("collecting unused chunks", "every", c.Interval.String(), "grace", c.Grace.String())
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	var retry <-chan time.Time
	for {
		rep, err := g.RunOnce(ctx)
		retry = nil
		switch {
		case errors.Is(err, core.ErrLocked):
			retry = time.After(chunkGCRetry)
		case err != nil && ctx.Err() == nil:
			c.Logger.Error("chunk collection", "err", err)
		case rep.Deleted > 0 || rep.BadIndexes > 0:
			c.Logger.Info("chunk collection", "indexes", rep.Indexes, "bad_indexes", rep.BadIndexes, "chunks", rep.Chunks,
				"deleted", rep.Deleted, "deleted_bytes", rep.DeletedBytes, "kept_young", rep.Young)
		default:
			c.Logger.Debug("chunk collection", "indexes", rep.Indexes, "chunks", rep.Chunks, "kept_young", rep.Young)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-g.kick:
		case <-retry:
		}
	}
}

// RunOnce runs one collection under the lock, or returns an error
// wrapping core.ErrLocked when another one runs.
func (g *ChunkCollector) RunOnce(ctx context.Context) (ports.ChunkCollection, error) {
	c := g.Config.withDefaults()
	lk, err := g.Locker.TryLock(ctx, ChunkGCLockName)
	if err != nil {
		return ports.ChunkCollection{}, fmt.Errorf("take the chunk collection lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := lk.Unlock(uctx); err != nil {
			c.Logger.Warn("release the chunk collection lock", "err", err)
		}
	}()
	// A lost lock may be another replica's now: stop deleting.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		select {
		case <-lk.Lost():
			stop(errChunkGCLockLost)
		case <-ctx.Done():
		}
	}()
	return g.Chunks.Collect(ctx, c.Grace)
}
