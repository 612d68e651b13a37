package data

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Defaults of ScrubConfig.
const (
	DefaultScrubEvery = 7 * 24 * time.Hour
	DefaultScrubBatch = 16
)

// ScrubConfig tunes the Scrubber. Zero values take the defaults.
type ScrubConfig struct {
	// Every is how often each READY artifact's bytes are read back
	// (CUBE_TEMPLATE_CENTER_SCRUB_INTERVAL); Disabled turns scrubbing off.
	Every    time.Duration
	Disabled bool
	// Batch is the most artifacts one pass reads.
	Batch int
	// Tick is how often a pass runs (default: Every / 100, at least a
	// minute unless Every is shorter), so a store is read a little at a
	// time rather than all at once.
	Tick   time.Duration
	Logger *slog.Logger
}

func (c ScrubConfig) withDefaults() ScrubConfig {
	if c.Every <= 0 {
		c.Every = DefaultScrubEvery
	}
	if c.Batch <= 0 {
		c.Batch = DefaultScrubBatch
	}
	if c.Tick <= 0 {
		c.Tick = max(c.Every/100, min(c.Every, time.Minute))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Scrubber reads READY artifacts back from the store and checks them
// against the size and sha256 their rows record. A row's bytes can rot
// after the build verified them (a failing disk, an operator's stray
// write); nodes refuse such bytes (they check the sha256), but every
// build of the spec would reuse the READY row and every distribution
// would fail, for ever. A rotten artifact's row is failed and its bytes
// removed, so the next build of its spec builds it again.
//
// Verified rows are touched (updated_at moves), which makes
// ListByStatus's oldest-first order the scrub's cursor: each pass takes
// the READY rows not verified for Every.
type Scrubber struct {
	Store     ports.Store
	Artifacts ports.ArtifactStore
	Locker    ports.Locker
	Clock     ports.Clock // optional; time.Now
	Config    ScrubConfig
}

// ScrubReport says what one pass did.
type ScrubReport struct {
	Checked int
	// Rotten are the artifacts whose bytes did not match their rows
	// (failed and removed).
	Rotten []string
	// Busy counts artifacts skipped because a build of their spec held
	// its lock.
	Busy int
}

// Run scrubs until ctx ends.
func (s *Scrubber) Run(ctx context.Context) error {
	c := s.Config.withDefaults()
	if c.Disabled {
		c.Logger.Info("artifact scrubbing disabled")
		return nil
	}
	c.Logger.Info("scrubbing READY artifacts", "every", c.Every.String(), "pass_every", c.Tick.String(), "batch", c.Batch)
	t := time.NewTicker(c.Tick)
	defer t.Stop()
	for {
		rep, err := s.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.Logger.Error("scrub pass", "err", err)
		case len(rep.Rotten) > 0:
			c.Logger.Error("scrub pass found rotten artifacts; they are failed and will be built again", "artifacts", rep.Rotten, "checked", rep.Checked)
		case rep.Checked > 0:
			c.Logger.Debug("scrub pass", "checked", rep.Checked, "busy", rep.Busy)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce checks up to Batch READY artifacts not verified for Every.
func (s *Scrubber) RunOnce(ctx context.Context) (ScrubReport, error) {
	c := s.Config.withDefaults()
	var rep ScrubReport
	now := s.now()
	if t, err := s.Store.Now(ctx); err == nil {
		now = t // rows carry the store's clock
	}
	cutoff := now.Add(-c.Every)
	rows, err := s.Store.Artifacts().ListByStatus(ctx, core.ArtifactReady, cutoff, c.Batch)
	if err != nil {
		return rep, fmt.Errorf("list READY artifacts: %w", err)
	}
	var errs []error
	for _, a := range rows {
		if ctx.Err() != nil {
			break
		}
		rotten, busy, err := s.scrubOne(ctx, a, cutoff)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("artifact %s: %w", a.ArtifactID, err))
		case busy:
			rep.Busy++
		default:
			rep.Checked++
			if rotten {
				rep.Rotten = append(rep.Rotten, a.ArtifactID)
			}
		}
	}
	return rep, errors.Join(errs...)
}

// scrubOne checks one artifact under its build lock, so no build of the
// spec claims or reuses it meanwhile.
func (s *Scrubber) scrubOne(ctx context.Context, a *core.Artifact, cutoff time.Time) (rotten, busy bool, err error) {
	c := s.Config.withDefaults()
	if a.ObjectKey == "" || a.Fingerprint == "" || a.Ext4SHA256 == "" {
		// Not the store's to judge: a row that names no object has its
		// bytes elsewhere (adopted from upstream, they sit on the master's
		// disk at ext4_path until migrate moves them into the store and
		// records the key), and one without a fingerprint or sha256 has
		// nothing to check against. Touch it so the cursor moves on.
		return false, false, s.touch(ctx, a.ArtifactID)
	}
	lk, err := s.Locker.TryLock(ctx, LockPrefix+a.Fingerprint)
	if errors.Is(err, core.ErrLocked) {
		return false, true, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("take build lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := lk.Unlock(uctx); err != nil {
			c.Logger.Warn("release build lock after scrub", "artifact_id", a.ArtifactID, "err", err)
		}
	}()
	// The read below can be long: once the lock is lost (its session
	// died), a build of the spec may take the lock and the row, and this
	// scrub stops without judging anything.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		select {
		case <-lk.Lost():
			stop(ErrLockLost)
		case <-ctx.Done():
		}
	}()
	lost := func() bool {
		select {
		case <-lk.Lost():
			return true
		default:
			return false
		}
	}
	a, err = s.Store.Artifacts().Get(ctx, a.ArtifactID)
	if errors.Is(err, core.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if a.Status != core.ArtifactReady || !a.UpdatedAt.Before(cutoff) {
		// No longer READY, or verified meanwhile (by another replica).
		return false, false, nil
	}
	problem, err := s.verify(ctx, a)
	if lost() {
		c.Logger.Warn("fingerprint lock lost while scrubbing; the artifact is left for a later pass", "artifact_id", a.ArtifactID)
		return false, true, nil
	}
	if err != nil {
		return false, false, err
	}
	if problem == "" {
		return false, false, s.touch(ctx, a.ArtifactID)
	}
	key := core.ObjectKeyOf(a)
	msg := fmt.Sprintf("stored bytes rotted: %s; the bytes were removed and the next build of this spec builds it again", problem)
	c.Logger.Error("rotten artifact", "artifact_id", a.ArtifactID, "key", key, "problem", problem)
	if _, err := s.Store.Artifacts().Update(ctx, a.ArtifactID, func(x *core.Artifact) error {
		if x.Status != core.ArtifactReady || x.Ext4SHA256 != a.Ext4SHA256 {
			return errChanged
		}
		x.LastError = msg
		return x.MoveTo(core.ArtifactFailed)
	}); errors.Is(err, errChanged) {
		return false, false, nil
	} else if err != nil {
		return false, false, fmt.Errorf("fail rotten artifact: %w", err)
	}
	// The row no longer promises the bytes; removing them now keeps a
	// FAILED row from pointing at bytes nobody may use (unless the lock
	// was lost meanwhile: a build of the spec may be writing them anew).
	if lost() {
		return true, false, nil
	}
	if err := s.Artifacts.Delete(ctx, key); err != nil {
		c.Logger.Warn("remove rotten artifact bytes", "artifact_id", a.ArtifactID, "key", key, "err", err)
	}
	return true, false, nil
}

var errChanged = errors.New("the row changed while it was read back")

// verify reads a's bytes and returns what is wrong with them ("" when
// nothing is). A missing object is a problem; a store error is an error.
func (s *Scrubber) verify(ctx context.Context, a *core.Artifact) (string, error) {
	rc, err := s.Artifacts.Open(ctx, core.ObjectKeyOf(a), 0, -1)
	if errors.Is(err, core.ErrNotFound) {
		return "no object in the store", nil
	}
	if err != nil {
		return "", fmt.Errorf("open: %w", err)
	}
	defer rc.Close()
	sum, n, err := core.SHA256OfContext(ctx, rc)
	if err != nil {
		return "", fmt.Errorf("read back: %w", err)
	}
	switch {
	case a.Ext4SizeBytes > 0 && n != a.Ext4SizeBytes:
		return fmt.Sprintf("%d bytes, the row records %d", n, a.Ext4SizeBytes), nil
	case !strings.EqualFold(sum, a.Ext4SHA256):
		return fmt.Sprintf("sha256 %s, the row records %s", sum, strings.ToLower(a.Ext4SHA256)), nil
	}
	return "", nil
}

// touch moves the row's updated_at: verified now.
func (s *Scrubber) touch(ctx context.Context, id string) error {
	_, err := s.Store.Artifacts().Update(ctx, id, func(*core.Artifact) error { return nil })
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
	return err
}

func (s *Scrubber) now() time.Time {
	if s.Clock != nil {
		return s.Clock.Now()
	}
	return time.Now()
}
