package layers

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// victim is the harness of every hostile case: an extraction root beside
// files that must survive untouched.
//
//	base/dest            the root Extract writes into
//	base/victim/hello    sentinel file, 0640, fixed mtime; hostile symlinks point here
//	base/victim/sub/deep a file one level down
//	base/dest-evil/secret the sibling-prefix trap ("dest" is a prefix of "dest-evil")
//
// check compares everything outside the root (content, mode, owner, size,
// mtime, link count, symlink targets) with the state before and fails on
// any change or any new path; a hard link into root from a victim file
// shows up as a changed link count.
type victim struct {
	base, root, dir, evil string
	hostTmp               string // a path in the host /tmp a "foo -> /" attack would write
	before                map[string]string
}

func newVictim(t testing.TB) *victim {
	t.Helper()
	base := t.TempDir()
	v := &victim{
		base:    base,
		root:    filepath.Join(base, "dest"),
		dir:     filepath.Join(base, "victim"),
		evil:    filepath.Join(base, "dest-evil"),
		hostTmp: "cube-layers-test-" + filepath.Base(base),
	}
	for _, d := range []string{v.root, v.dir, filepath.Join(v.dir, "sub"), v.evil} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(v.dir, "hello"):    "sentinel",
		filepath.Join(v.dir, "sub/deep"): "deep",
		filepath.Join(v.evil, "secret"):  "secret",
	}
	old := time.Unix(1234567890, 0)
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o640); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o640)
		os.Chtimes(p, old, old)
	}
	for _, d := range []string{filepath.Join(v.dir, "sub"), v.dir, v.evil} {
		os.Chtimes(d, old, old)
	}
	v.before = v.snapshot(t)
	return v
}

func (v *victim) snapshot(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(v.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == v.root {
			return fs.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fi.Mode().String() + " " + fi.ModTime().UTC().String() +
			" uid=" + itoa(int(st.Uid)) + " gid=" + itoa(int(st.Gid)) + " nlink=" + itoa(int(st.Nlink)) + " size=" + itoa(int(fi.Size()))
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " content=" + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (v *victim) check(t testing.TB) {
	t.Helper()
	after := v.snapshot(t)
	for p, d := range v.before {
		if after[p] != d {
			t.Errorf("outside root changed: %s\n before: %s\n after:  %s", p, d, after[p])
		}
	}
	for p := range after {
		if _, ok := v.before[p]; !ok {
			t.Errorf("created outside root: %s", p)
		}
	}
	if _, err := os.Lstat(filepath.Join("/tmp", v.hostTmp)); err == nil {
		t.Errorf("created in host /tmp: %s", v.hostTmp)
		os.RemoveAll(filepath.Join("/tmp", v.hostTmp))
	}
	// Nothing inside root may share an inode with a victim file.
	victims := map[uint64]string{}
	for p := range v.before {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			victims[fi.Sys().(*syscall.Stat_t).Ino] = p
		}
	}
	filepath.WalkDir(v.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := os.Lstat(p); err == nil {
			if vp, ok := victims[fi.Sys().(*syscall.Stat_t).Ino]; ok && fi.Mode().IsRegular() {
				t.Errorf("%s inside root is a hard link to %s", p, vp)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return nil
			}
		}
		return nil
	})
}

// up is the relative path from the root to p ("../victim/hello").
func (v *victim) up(p string) string {
	r, _ := filepath.Rel(v.root, p)
	return r
}

func itoa(n int) string { return strconv.Itoa(n) }
