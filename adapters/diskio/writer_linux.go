package diskio

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens f's file a second time for direct writes, or returns
// nil where the filesystem refuses O_DIRECT (tmpfs before Linux 6.6, some
// overlay and network filesystems) or f's name no longer leads to f's
// file (renamed, or replaced since it was opened): the writes would land
// in another file.
func openDirect(f *os.File) *os.File {
	d, err := os.OpenFile(f.Name(), os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	a, aerr := f.Stat()
	b, berr := d.Stat()
	if aerr != nil || berr != nil || !os.SameFile(a, b) {
		d.Close()
		return nil
	}
	return d
}

// isDirectRefused reports whether a direct write failed because the
// filesystem will not take it (alignment, no O_DIRECT support), not
// because of the disk.
func isDirectRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)
}

// writeBehind starts writing a range just written through the page cache
// to disk, without waiting: a gigabyte left dirty until the final fsync is
// a second of waiting after the copy, where started now it reaches the
// disk while the rest is copied. Errors are the fsync's to report.
func writeBehind(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// OpenDirectReader opens the file at p for direct reads (ReadAligned), or
// returns nil where the filesystem refuses O_DIRECT.
func OpenDirectReader(p string) *os.File {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	return f
}
