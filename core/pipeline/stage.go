package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// OutStagePrefix starts the name of the directory a build given
// Input.OutPath makes beside it: the builder writes the image (and any
// temporary file of its own) in there, and only the finished image is
// moved onto OutPath. A process killed mid-build (SIGKILL, the OOM killer,
// a CI timeout) therefore leaves its gigabyte under a name the next build
// beside the same output recognises and removes.
const OutStagePrefix = ".cube-build-"

// StageGrace is how long a stage directory that no process holds must have
// gone unmodified before SweepStages removes it: a build makes its
// directory, then locks it, and the grace covers that instant.
const StageGrace = 30 * time.Second

// Stage is a directory a build holds (an exclusive flock, which the kernel
// drops however the process dies) while it writes there.
type Stage struct {
	dir     string
	release func()
}

// NewStage removes the stage directories dead builds left beside out
// (SweepStages, best effort: a directory that cannot be swept now is swept
// by a later build), then makes and holds a new one named prefix + random.
// Where the file system has no flock the directory is still made and
// removed by Remove; only a killed build's would stay. Any other failure
// to hold it fails the build.
func NewStage(out, prefix string) (*Stage, error) {
	parent := filepath.Dir(out)
	_, _ = SweepStages(parent, prefix, time.Now())
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, fmt.Errorf("stage directory for %s: %w", out, err)
	}
	release, err := lockStage(dir)
	switch {
	case err == nil:
	case errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP):
		// No flock on this file system: no sweep can tell a live stage
		// from a dead one here either, so none removes it.
		release = func() {}
	default:
		// A stage others could probe but this build does not hold would
		// be swept from under a build that runs past StageGrace.
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("stage directory for %s: hold it: %w", out, err)
	}
	return &Stage{dir: dir, release: release}, nil
}

// lockStage holds a stage directory (lockScratch; a variable for tests).
var lockStage = lockScratch

// Path is where the build writes out's image: its name, inside the stage.
func (s *Stage) Path(out string) string { return filepath.Join(s.dir, filepath.Base(out)) }

// Publish moves the image written at Path(out) onto out.
func (s *Stage) Publish(out string) error {
	if err := os.Rename(s.Path(out), out); err != nil {
		return fmt.Errorf("publish image: %w", err)
	}
	return nil
}

// Remove deletes the directory and whatever is left in it, then drops the
// hold.
func (s *Stage) Remove() {
	_ = os.RemoveAll(s.dir)
	s.release()
}

// SweepStages removes the directories directly under dir whose name starts
// with prefix, that no process holds and that have gone unmodified for
// StageGrace: those of builds that died. One that is held, whose holding
// cannot be told, or that is not a directory is kept. It returns how many
// it removed.
func SweepStages(dir, prefix string, now time.Time) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("sweep stage directories: %w", err)
	}
	removed := 0
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		held, known, err := ScratchHeld(p)
		if err != nil || held || !known {
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		st, err := os.Lstat(p)
		if err != nil || !st.ModTime().Before(now.Add(-StageGrace)) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("sweep stage directories: %w", err)
	}
	return removed, nil
}
