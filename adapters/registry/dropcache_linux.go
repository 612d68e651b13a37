package registry

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropCached asks the kernel to drop f's cached pages in [off, off+n):
// clean ones go at once, dirty ones start writing back and go on a later
// call. Best effort: an error only means the pages stay cached.
func dropCached(f *os.File, off, n int64) {
	_ = unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}
