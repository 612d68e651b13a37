//go:build unix

package pipeline

import (
	"errors"
	"os"
	"syscall"
)

// lockScratch takes an exclusive flock on a build's scratch directory for
// as long as the build runs. The kernel drops it when the process dies,
// however it dies, so ScratchHeld tells a live build's directory from one
// a killed process left behind.
//
// It waits for the lock rather than failing at once: the directory is new,
// so the only other holder is a sweep's ScratchHeld probing it for an
// instant (it lists the directory just after it was made). Failing there
// would fail the build, or leave a stage unheld for a later sweep to
// remove while the build writes in it.
func lockScratch(dir string) (release func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// ScratchHeld reports whether a running build (of this process or another)
// holds the scratch directory dir; known is false where that cannot be
// told (then only the directory's age speaks).
func ScratchHeld(dir string) (held, known bool, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case err == nil:
		// Nobody holds it; closing f releases the probe's lock.
		return false, true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, true, nil
	}
	return false, false, err
}
