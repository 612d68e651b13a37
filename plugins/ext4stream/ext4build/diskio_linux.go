package ext4build

import (
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
