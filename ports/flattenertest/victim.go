package flattenertest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Victim is the harness of every hostile case: a destination directory
// beside files that must survive untouched.
//
//	Base/dest             Root: where a tree consumer writes
//	Base/victim/hello     sentinel file, 0640, fixed mtime; hostile symlinks point here
//	Base/victim/sub/deep  a file one level down
//	Base/dest-evil/secret the sibling-prefix trap ("dest" is a prefix of "dest-evil")
//
// Check compares everything outside Root (content, mode, owner, size,
// mtime, link count, symlink targets) with the state before and fails on
// any change or any new path; a hard link into Root from a victim file
// shows up as a changed link count.
type Victim struct {
	Base, Root, Dir, Evil string
	// HostTmp is a name in the host /tmp that a "foo -> /" attack aims at.
	HostTmp string
	before  map[string]string
}

// NewVictim lays out a fresh victim under t.TempDir().
func NewVictim(t testing.TB) *Victim {
	t.Helper()
	base := t.TempDir()
	v := &Victim{
		Base:    base,
		Root:    filepath.Join(base, "dest"),
		Dir:     filepath.Join(base, "victim"),
		Evil:    filepath.Join(base, "dest-evil"),
		HostTmp: "cube-flattenertest-" + filepath.Base(filepath.Dir(base)) + "-" + filepath.Base(base),
	}
	for _, d := range []string{v.Root, v.Dir, filepath.Join(v.Dir, "sub"), v.Evil} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(v.Dir, "hello"):    "sentinel",
		filepath.Join(v.Dir, "sub/deep"): "deep",
		filepath.Join(v.Evil, "secret"):  "secret",
	}
	old := time.Unix(1234567890, 0)
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o640); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o640)
		os.Chtimes(p, old, old)
	}
	for _, d := range []string{filepath.Join(v.Dir, "sub"), v.Dir, v.Evil} {
		os.Chtimes(d, old, old)
	}
	v.before = v.snapshot(t)
	return v
}

// Up is the relative path from Root to p ("../victim/hello").
func (v *Victim) Up(p string) string {
	r, _ := filepath.Rel(v.Root, p)
	return r
}

// InRoot is where an absolute host path p lands when a flattener resolves
// it inside the image root: p without its leading slash.
func (v *Victim) InRoot(p string) string { return strings.TrimPrefix(filepath.ToSlash(p), "/") }

// Reset empties Root and takes a new snapshot, for a second use.
func (v *Victim) Reset(t testing.TB) {
	t.Helper()
	filepath.WalkDir(v.Root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(v.Root); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(v.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	v.before = v.snapshot(t)
}

func (v *Victim) snapshot(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(v.Base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == v.Root {
			return fs.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fi.Mode().String() + " " + fi.ModTime().UTC().String() +
			" uid=" + strconv.Itoa(int(st.Uid)) + " gid=" + strconv.Itoa(int(st.Gid)) +
			" nlink=" + strconv.Itoa(int(st.Nlink)) + " size=" + strconv.FormatInt(fi.Size(), 10)
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

// Check fails t if anything outside Root changed, if the host /tmp holds
// HostTmp, or if an entry inside Root shares an inode with a victim file.
func (v *Victim) Check(t testing.TB) {
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
	if _, err := os.Lstat(filepath.Join("/tmp", v.HostTmp)); err == nil {
		t.Errorf("created in host /tmp: %s", v.HostTmp)
		os.RemoveAll(filepath.Join("/tmp", v.HostTmp))
	}
	victims := map[uint64]string{}
	for p := range v.before {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			victims[fi.Sys().(*syscall.Stat_t).Ino] = p
		}
	}
	filepath.WalkDir(v.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			if vp, ok := victims[fi.Sys().(*syscall.Stat_t).Ino]; ok {
				t.Errorf("%s inside root is a hard link to %s", p, vp)
			}
		}
		return nil
	})
}

// DeviceNodes lists the device nodes under dir, which a consumer that
// defers devices must never create on the host.
func DeviceNodes(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out
}
