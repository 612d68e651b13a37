package layercache

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// lockFile opens (creating) path and takes a flock on it, shared or
// exclusive. It polls with LOCK_NB so that ctx can end the wait.
func lockFile(ctx context.Context, path string, exclusive bool) (*os.File, error) {
	delay := 2 * time.Millisecond
	for {
		f, ok, err := tryLockFile(path, exclusive)
		if err != nil {
			return nil, err
		}
		if ok {
			return f, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
}

// tryLockFile is lockFile without waiting: ok is false when someone else
// holds a conflicting lock.
func tryLockFile(path string, exclusive bool) (f *os.File, ok bool, err error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, false, err
		}
		if err := flock(f, how|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, err
		}
		// Holders unlink lock files when they are done; if that happened
		// between our open and our flock we hold a lock on an orphaned
		// inode that nobody else will ever see, so start over.
		fst, err1 := f.Stat()
		pst, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(fst, pst) {
			return f, true, nil
		}
		f.Close()
	}
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// unlockAndRemove drops a lock file the caller holds exclusively. Removing it
// before closing keeps the locks directory from growing without bound; other
// lockers notice the unlink through the inode check in tryLockFile.
func unlockAndRemove(f *os.File) {
	_ = os.Remove(f.Name())
	_ = f.Close()
}
