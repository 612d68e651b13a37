package ext4build

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// writeBehind starts writing the range just written to disk, without
// waiting for it. The image is synced when it is published; a gigabyte
// left dirty until then is a second of fsync after the build, where
// started now it reaches the disk while the rest of the image is copied.
// Errors are ignored: the fsync that follows reports them.
func writeBehind(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// openDirect opens the image a second time for direct I/O, or returns
// nil where the filesystem refuses it (tmpfs, some overlay and network
// filesystems).
func openDirect(f *os.File) *os.File {
	d, err := os.OpenFile(f.Name(), os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	return d
}

// isDirectRefused reports whether a direct write failed because the
// filesystem will not take it (alignment, no O_DIRECT support), not
// because of the disk: the caller then writes the same bytes buffered.
func isDirectRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)
}
