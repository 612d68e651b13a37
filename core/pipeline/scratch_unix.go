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
func lockScratch(dir string) (release func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
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
