package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/ports"
)

// StagePrefix starts the name of the directory the host makes beside a
// build's output for the plugin to write in (see staged).
const StagePrefix = ".cube-plugin-"

// StageGrace is how long a stage directory that no host holds must have
// gone unmodified before a build beside it removes it: a host makes its
// directory, then locks it, and the grace covers that instant.
const StageGrace = 30 * time.Second

// staged runs build with spec.OutPath moved into a stage directory beside
// it, made and held by the host (os.MkdirTemp, StagePrefix), then moves the
// finished image onto spec.OutPath. The plugin writes its temporary image
// (and the host its tree pipe) beside the path it is given, so everything
// either writes lies under a name the host knows: the directory is removed
// on every way out, whether the plugin failed, the build was cancelled or
// the plugin process was killed before it could clean up after itself.
//
// The host holds a flock on the directory while the build runs. The kernel
// drops it however the host dies (its plugin dies with it, diesWithHost),
// so the next build beside that output removes the directories of dead
// hosts (sweepStages) instead of leaving a whole image there for good.
func staged(spec ports.BuildSpec, build func(ports.BuildSpec) (ports.BuildResult, error)) (ports.BuildResult, error) {
	if spec.OutPath == "" {
		return build(spec) // the plugin says what is wrong with it
	}
	st, err := newStage(spec.OutPath)
	if err != nil {
		return ports.BuildResult{}, err
	}
	defer st.remove()
	out := spec.OutPath
	spec.OutPath = st.path(out)
	res, err := build(spec)
	if err != nil {
		return res, err
	}
	if err := os.Rename(spec.OutPath, out); err != nil {
		return ports.BuildResult{}, fmt.Errorf("publish image: %w", err)
	}
	return res, nil
}

// stage is one build's directory and the lock the host holds on it.
type stage struct {
	dir  string
	lock *os.File // nil where the file system has no flock
}

func newStage(out string) (*stage, error) {
	parent := filepath.Dir(out)
	// Best effort: a directory that cannot be swept now is swept by a
	// later build, and the build itself does not depend on it.
	_, _ = sweepStages(parent, time.Now())
	dir, err := os.MkdirTemp(parent, StagePrefix)
	if err != nil {
		return nil, fmt.Errorf("stage directory for %s: %w", out, err)
	}
	st := &stage{dir: dir}
	f, err := os.Open(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("stage directory for %s: %w", out, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		// No flock here (some network file systems): the build still
		// removes its directory; only a dead host's stays.
		f.Close()
	} else {
		st.lock = f
	}
	return st, nil
}

// path is where the plugin writes the image: the output's name, inside
// the stage directory.
func (s *stage) path(out string) string { return filepath.Join(s.dir, filepath.Base(out)) }

// remove deletes the directory and whatever the plugin left in it, then
// drops the lock.
func (s *stage) remove() {
	_ = os.RemoveAll(s.dir)
	if s.lock != nil {
		s.lock.Close()
	}
}

// sweepStages removes the stage directories directly under dir that no
// host holds and that have gone unmodified for StageGrace: those of hosts
// that died mid-build. One that is held, or whose holding cannot be told,
// is kept. It returns how many directories it removed.
func sweepStages(dir string, now time.Time) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("sweep stage directories: %w", err)
	}
	removed := 0
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), StagePrefix) {
			continue
		}
		ok, err := sweepStage(filepath.Join(dir, e.Name()), now)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("sweep stage directories: %w", err)
	}
	return removed, nil
}

// sweepStage removes p if no host holds it and it is older than
// StageGrace. The probe's lock is held while p is removed.
func sweepStage(p string, now time.Time) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // a live build's
		}
		return false, fmt.Errorf("%s: %w", p, err)
	}
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !st.ModTime().Before(now.Add(-StageGrace)) {
		return false, nil
	}
	if err := os.RemoveAll(p); err != nil {
		return false, err
	}
	return true, nil
}
