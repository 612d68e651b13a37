package artifactstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

var errNoXattr = errors.New("no such extended attribute")

func setXattr(f *os.File, name, value string) error {
	return xattrCall(f, func(fd int) error {
		return unix.Fsetxattr(fd, name, []byte(value), 0)
	})
}

func getXattr(f *os.File, name string) (string, error) {
	buf := make([]byte, 128)
	var n int
	err := xattrCall(f, func(fd int) error {
		var err error
		n, err = unix.Fgetxattr(fd, name, buf)
		return err
	})
	if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ERANGE) {
		// Absent, or too long to be one of ours: no checksum known.
		return "", errNoXattr
	}
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func xattrCall(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var callErr error
	if err := rc.Control(func(fd uintptr) { callErr = fn(int(fd)) }); err != nil {
		return err
	}
	return callErr
}
