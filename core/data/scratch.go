package data

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core/pipeline"
)

// ScratchPrefix starts the name of a build's scratch directory (see
// core/pipeline: each build makes one under its ScratchDir and removes it on
// every exit path, so what is left belongs to a process that died).
const ScratchPrefix = "build-"

// ScratchGrace is how long a build-* directory that no build holds must
// have gone unmodified before SweepScratch removes it. Builds hold their
// directory (a flock, see core/pipeline) from right after creating it, and
// the kernel releases it when their process dies; the grace covers that
// first instant, and builds of an older version that shares dir without
// holding anything as long as they keep writing.
const ScratchGrace = 30 * time.Second

// SweepScratch removes build-* directories directly under dir that were
// left by a dead build: no build holds them and their newest modification
// (the directory itself or any entry directly in it) is older than
// ScratchGrace; and, where holding cannot be told, those older than
// olderThan. A held directory is never removed. A missing dir is not an
// error. It returns how many directories it removed.
func SweepScratch(dir string, olderThan time.Duration, now time.Time) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cutoff := now.Add(-olderThan)
	removed := 0
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ScratchPrefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		newest, err := newestMTime(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		held, known, err := pipeline.ScratchHeld(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		switch {
		case held:
			continue
		case known && newest.Before(now.Add(-ScratchGrace)):
		case !newest.Before(cutoff):
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

func newestMTime(dir string) (time.Time, error) {
	st, err := os.Lstat(dir)
	if err != nil {
		return time.Time{}, err
	}
	newest := st.ModTime()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return time.Time{}, err
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	return newest, nil
}
