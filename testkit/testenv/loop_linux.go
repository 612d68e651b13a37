package testenv

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopMount mounts the ext4 image img read-only (nosuid, nodev, noexec) at
// dir through a loop device and unmounts it when the test ends.
//
// A missing privilege — not root, no loop devices, or the kernel answering
// "operation not permitted" (a container without CAP_SYS_ADMIN) — skips
// the test, or fails it when servers are required. Any other failure,
// such as a corrupt superblock or a feature the kernel does not know, is a
// finding about the image and fails the test.
func LoopMount(t testing.TB, img, dir string) {
	t.Helper()
	Root(t, "loop mounts need root")
	dev, detach, err := attachLoop(img)
	if err != nil {
		privilegeOrFatal(t, fmt.Sprintf("attach %s to a loop device", img), err)
	}
	if err := unix.Mount(dev, dir, "ext4", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		detach()
		privilegeOrFatal(t, fmt.Sprintf("mount %s (%s) read-only at %s", img, dev, dir), err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		detach()
	})
}

// errNoLoop reports a kernel or container without loop devices.
var errNoLoop = errors.New("no loop devices")

// privilegeOrFatal skips or fails (see missing) when err is a missing
// privilege or facility, and fails the test otherwise.
func privilegeOrFatal(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, errNoLoop) {
		missing(t, fmt.Sprintf("%s: %v", what, err))
	}
	t.Fatalf("%s: %v", what, err)
}

// attachLoop binds img, read-only and auto-clearing, to a free loop device
// and returns the device's path and a function that lets it go.
func attachLoop(img string) (string, func(), error) {
	f, err := os.Open(img)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("%w: %v", errNoLoop, err)
	}
	if err != nil {
		return "", nil, err
	}
	defer ctl.Close()
	// Another process may take the free device between the two calls:
	// the bind then fails with EBUSY and the next free one is tried.
	for range 32 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			return "", nil, fmt.Errorf("%w: %v", errNoLoop, err)
		}
		if err != nil {
			return "", nil, err
		}
		info := unix.LoopInfo64{Flags: unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR}
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &unix.LoopConfig{Fd: uint32(f.Fd()), Info: info})
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
			// Kernels before 5.8 have no LOOP_CONFIGURE.
			if err = unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_SET_FD, int(f.Fd())); err == nil {
				if err = unix.IoctlLoopSetStatus64(int(lf.Fd()), &info); err != nil {
					unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_CLR_FD, 0)
				}
			}
		}
		if errors.Is(err, unix.EBUSY) {
			lf.Close()
			continue
		}
		if err != nil {
			lf.Close()
			return "", nil, fmt.Errorf("bind %s: %w", dev, err)
		}
		// Auto-clear detaches the device once it is unmounted and closed.
		return dev, func() { lf.Close() }, nil
	}
	return "", nil, fmt.Errorf("no free loop device after 32 tries: %w", unix.EBUSY)
}
