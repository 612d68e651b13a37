package artifactstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryLockExclusive takes an exclusive flock on f without waiting.
func tryLockExclusive(f *os.File) error {
	return flock(f, unix.LOCK_EX|unix.LOCK_NB)
}

// lockShared takes (or converts to) a shared flock on f, waiting for an
// exclusive holder to finish.
func lockShared(f *os.File) error { return flock(f, unix.LOCK_SH) }

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
