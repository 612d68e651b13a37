package agent

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// directAlign is the alignment direct I/O asks of offsets, lengths and
// memory: 4 KiB covers disks with 512-byte and 4 KiB logical blocks.
const directAlign = 4096

// openDirect creates or truncates path for writing, with O_DIRECT when
// the filesystem accepts it.
func openDirect(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_DIRECT, 0o644)
	if err == nil {
		return f, true, nil
	}
	if !isInvalid(err) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	return f, false, err
}

// setDirect turns O_DIRECT on or off for the open file.
func setDirect(f *os.File, on bool) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			serr = err
			return
		}
		if on {
			fl |= unix.O_DIRECT
		} else {
			fl &^= unix.O_DIRECT
		}
		_, serr = unix.FcntlInt(fd, unix.F_SETFL, fl)
	}); err != nil {
		return err
	}
	return serr
}

func isInvalid(err error) bool { return errors.Is(err, unix.EINVAL) }
