package artifactstore

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens f's file again for reading around the page cache, or
// returns nil where the filesystem refuses it.
func openDirect(f *os.File) *os.File {
	d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	return d
}

// isDirectRefused reports whether a direct read failed because the
// filesystem will not take it (alignment, no O_DIRECT), not the disk.
func isDirectRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)
}
