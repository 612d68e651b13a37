package ext4stream

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// TestLoopMountReadOnly checks the image the way a guest kernel sees it.
// It needs root and loop devices (see testenv.LoopMount): without them it
// skips, or fails when servers are required; a mount the kernel refuses
// fails.
func TestLoopMountReadOnly(t *testing.T) {
	testenv.Root(t, "loop mounts need root")
	img, _, err := build(t, richTree(t))
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	testenv.LoopMount(t, img, mnt)
	at := func(p string) string { return filepath.Join(mnt, p) }
	stat := func(p string) *syscall.Stat_t {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(at(p), &st); err != nil {
			t.Fatal(err)
		}
		return &st
	}

	if st := stat("bin/ping"); st.Mode&0o7777 != 0o4755 || st.Uid != 70000 || st.Gid != 70001 {
		t.Errorf("bin/ping: mode %o uid %d gid %d", st.Mode&0o7777, st.Uid, st.Gid)
	}
	for name, want := range map[string]string{
		"security.capability": capV2,
		"user.a":              strings.Repeat("s", 40),
		"user.zz":             strings.Repeat("q", 40),
		"trusted.a":           strings.Repeat("r", 40),
		"security.b":          strings.Repeat("t", 40),
	} {
		buf := make([]byte, 256)
		n, err := unix.Lgetxattr(at("bin/ping"), name, buf)
		if err != nil || string(buf[:n]) != want {
			t.Errorf("bin/ping xattr %s = %q, %v", name, buf[:max(n, 0)], err)
		}
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(at("etc"), "user.dirattr", buf); err != nil || string(buf[:n]) != "v" {
		t.Errorf("etc user.dirattr = %q, %v", buf[:max(n, 0)], err)
	}
	if got, err := os.Readlink(at("etc/long")); err != nil || got != strings.Repeat("a/", 100)+"x" {
		t.Errorf("etc/long -> %q, %v", got, err)
	}
	if a, b := stat("etc/passwd"), stat("etc/passwd-link"); a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: inodes %d/%d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	if st := stat("dev/null"); st.Mode&syscall.S_IFMT != syscall.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
		t.Errorf("dev/null: mode %o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if st := stat("dev/loop9"); st.Mode&syscall.S_IFMT != syscall.S_IFBLK || unix.Major(st.Rdev) != 7 || unix.Minor(st.Rdev) != 300 {
		t.Errorf("dev/loop9: mode %o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if st := stat("dev/fifo"); st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		t.Errorf("dev/fifo: mode %o", st.Mode)
	}
	for p, want := range map[string]time.Time{"etc/future": future, "etc/past": past, "etc/passwd": testMtime} {
		st := stat(p)
		if got := time.Unix(st.Mtim.Sec, st.Mtim.Nsec); !got.Equal(want) {
			t.Errorf("%s mtime = %v, want %v", p, got.UTC(), want)
		}
	}
	if st := stat("etc/passwd"); st.Ctim.Sec != buildTime.Unix() {
		t.Errorf("etc/passwd ctime = %d, want the build time %d", st.Ctim.Sec, buildTime.Unix())
	}
	got, err := os.ReadFile(at("big"))
	if err != nil || !bytes.Equal(got, []byte(strings.Repeat("0123456789abcdef", 300_000))) {
		t.Errorf("big: %d bytes, %v", len(got), err)
	}
	if ents, err := os.ReadDir(at("many")); err != nil || len(ents) != 2000 {
		t.Errorf("many: %d entries, %v", len(ents), err)
	}
	if err := os.WriteFile(at("new"), nil, 0o644); err == nil {
		t.Error("wrote to a read-only mount")
	}
}
