package artifactstore

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// linkInto gives the open file src a second name, name, in the directory
// dir: linkat through /proc/self/fd names exactly the file that is open,
// whatever happened to its path since, and needs no privilege.
// errNoLink when the system cannot (another filesystem, no /proc, links
// refused), so that the caller copies instead.
func linkInto(src *os.File, dir *os.File, name string) error {
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", src.Fd()), int(dir.Fd()), name, unix.AT_SYMLINK_FOLLOW)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return err
	}
	return fmt.Errorf("%w: %v", errNoLink, err)
}
