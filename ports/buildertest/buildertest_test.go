package buildertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func sampleTree() Tree {
	return Tree{
		".":      {Path: ".", Type: TypeDir, Mode: 0o755, MTime: 1, Inode: 1},
		"a":      {Path: "a", Type: TypeReg, Mode: 0o644, Size: 3, SHA256: "abc", MTime: 5, Inode: 2},
		"b":      {Path: "b", Type: TypeReg, Mode: 0o644, Size: 3, SHA256: "abc", MTime: 5, Inode: 2},
		"l":      {Path: "l", Type: TypeSymlink, Mode: 0o777, Target: "a", Inode: 3},
		"d":      {Path: "d", Type: TypeDir, Mode: 0o1777, UID: 7, GID: 8, Xattrs: map[string]string{"user.x": "1"}, Inode: 4},
		"d/null": {Path: "d/null", Type: TypeChar, Mode: 0o666, Major: 1, Minor: 3, Inode: 5},
	}
}

func clone(t Tree) Tree {
	out := Tree{}
	for p, e := range t {
		c := *e
		out[p] = &c
	}
	return out
}

func TestDiff(t *testing.T) {
	if d := Diff(sampleTree(), sampleTree(), DiffOptions{}); len(d) != 0 {
		t.Fatalf("identical trees differ: %v", d)
	}
	cases := []struct {
		name   string
		mutate func(Tree)
		want   string
	}{
		{"missing", func(g Tree) { delete(g, "l") }, "l: missing"},
		{"extra", func(g Tree) { g["x"] = &Entry{Path: "x", Type: TypeFIFO, Inode: 9} }, "x: unexpected fifo"},
		{"type", func(g Tree) { g["l"].Type = TypeReg }, "l: type file, want symlink"},
		{"mode", func(g Tree) { g["d"].Mode = 0o777 }, "d: mode 0777, want 1777"},
		{"owner", func(g Tree) { g["d"].GID = 0 }, "d: owner 7:0, want 7:8"},
		{"mtime", func(g Tree) { g["a"].MTime = 6; g["b"].MTime = 6 }, "a: mtime 6, want 5"},
		{"content", func(g Tree) { g["a"].SHA256 = "def"; g["b"].SHA256 = "def" }, "a: content sha256 def"},
		{"size", func(g Tree) { g["a"].Size = 4 }, "a: size 4, want 3"},
		{"target", func(g Tree) { g["l"].Target = "b" }, `l: target "b", want "a"`},
		{"device", func(g Tree) { g["d/null"].Minor = 5 }, "d/null: device 1:5, want 1:3"},
		{"xattr value", func(g Tree) { g["d"].Xattrs = map[string]string{"user.x": "2"} }, `d: xattrs {user.x="2"}`},
		{"xattr lost", func(g Tree) { g["d"].Xattrs = nil }, "d: xattrs {}"},
		{"hard link broken", func(g Tree) { g["b"].Inode = 42 }, `a: hard links [], want ["b"]`},
		{"hard link added", func(g Tree) { g["l"].Inode = 2 }, "l: hard links"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := clone(sampleTree())
			c.mutate(got)
			d := Diff(sampleTree(), got, DiffOptions{})
			if !strings.Contains(strings.Join(d, "\n"), c.want) {
				t.Errorf("Diff = %q, want a line containing %q", d, c.want)
			}
		})
	}
	// Options.
	got := clone(sampleTree())
	got["."].MTime = 99
	got["lost+found"] = &Entry{Path: "lost+found", Type: TypeDir}
	got["lost+found/#12"] = &Entry{Path: "lost+found/#12", Type: TypeReg}
	if d := Diff(sampleTree(), got, DiffOptions{IgnoreRootMTime: true, AllowExtra: []string{"lost+found"}}); len(d) != 0 {
		t.Errorf("options not honoured: %v", d)
	}
}

// TestExpectedTreeModel checks the suite's own layer model on the
// fidelity layers, independently of layers.Flatten.
func TestExpectedTreeModel(t *testing.T) {
	ls := fidelityLayers()
	want := expectedTree(ls[:])
	for _, p := range WhitedOut {
		if want[p] != nil {
			t.Errorf("%s should be whited out", p)
		}
	}
	check := func(p string, typ Type, f func(*Entry) bool, what string) {
		t.Helper()
		e := want[p]
		if e == nil || e.Type != typ || (f != nil && !f(e)) {
			t.Errorf("%s: got %+v, want %s %s", p, e, typ, what)
		}
	}
	sizeIs := func(n int64) func(*Entry) bool { return func(e *Entry) bool { return e.Size == n } }
	check("x/a", TypeReg, sizeIs(int64(len("a is a file again\n"))), "from layer 2")
	check("x/b", TypeReg, sizeIs(int64(len("b is a file now\n"))), "from layer 1")
	check("etc/reborn", TypeReg, func(e *Entry) bool { return e.UID == 1234 && e.Mode == 0o600 }, "from layer 2")
	check("home", TypeDir, func(e *Entry) bool { return e.Mode == 0o711 }, "with layer 1's mode")
	check("home/user/notes", TypeReg, nil, "kept under a re-declared directory")
	check("opt/dir/new", TypeReg, nil, "added next to the opaque marker")
	check("usr", TypeDir, func(e *Entry) bool { return e.Xattrs["trusted.cube.marker"] == "1" }, "with its xattr")
	check("etc/hostname", TypeReg, func(e *Entry) bool { return e.Xattrs["user.comment"] == "changed" }, "with layer 1's xattr")
	ino := want["usr/bin/hl-base"].Inode
	for _, p := range []string{"usr/bin/hl-peer", "usr/bin/hl-upper"} {
		check(p, TypeReg, func(e *Entry) bool { return e.Inode == ino }, "linked to hl-base")
	}
	if n := len(want.links()["usr/bin/hl-base"]); n != 2 {
		t.Errorf("hl-base has %d other names, want 2", n)
	}
	many := 0
	for p := range want {
		if strings.HasPrefix(p, "many/") {
			many++
		}
	}
	if many != ManyFiles {
		t.Errorf("%d files in many/, want %d", many, ManyFiles)
	}
}

// TestReadImageMatchesKernel checks ReadImage against ReadDir on the same
// content: a host directory packed with mkfs.ext4 -d, which copies
// ownership, modes, xattrs, devices and hard links itself.
func TestReadImageMatchesKernel(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		testenv.Tool(t, tool)
	}
	testenv.Root(t, "creating devices and setting owners need root")
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "d/sub"), 0o755))
	must(os.WriteFile(filepath.Join(src, "d/file"), []byte("hello\n"), 0o640))
	must(os.WriteFile(filepath.Join(src, "big"), randomBytes(300<<10, 9), 0o644))
	must(os.WriteFile(filepath.Join(src, "empty"), nil, 0o600))
	must(os.Link(filepath.Join(src, "d/file"), filepath.Join(src, "d/sub/link")))
	must(os.Symlink("short", filepath.Join(src, "fast")))
	must(os.Symlink(longTarget, filepath.Join(src, "slow")))
	must(os.Symlink("new\nline", filepath.Join(src, "nl-target")))
	must(unix.Mknod(filepath.Join(src, "d/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mknod(filepath.Join(src, "d/big"), unix.S_IFBLK|0o600, int(unix.Mkdev(300, 70000))))
	must(unix.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	must(os.Chown(filepath.Join(src, "d/file"), 1234, 70000))
	must(os.Chmod(filepath.Join(src, "d/file"), 0o4750))
	must(os.Chmod(filepath.Join(src, "d"), 0o1777))
	must(unix.Lsetxattr(filepath.Join(src, "big"), "user.note", []byte("n\x00te"), 0))
	must(unix.Lsetxattr(filepath.Join(src, "d"), "trusted.t", []byte("x"), 0))
	must(os.WriteFile(filepath.Join(src, strings.Repeat("é", 127)), []byte("long name\n"), 0o644))
	for _, odd := range []string{"new\nline", "trailing\n", "\nleading", "two\n\nblank", "with space", "caf\xe9", `back\slash`} {
		must(os.WriteFile(filepath.Join(src, "d", odd), []byte(odd), 0o644))
	}

	want, err := ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-d", src, img, "16M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v: %s", err, out)
	}
	got, err := ReadImage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	// mke2fs gives the root its own mode and owner.
	got["."].Mode, got["."].UID, got["."].GID = want["."].Mode, want["."].UID, want["."].GID
	for _, d := range Diff(want, got, DiffOptions{IgnoreRootMTime: true, AllowExtra: []string{"lost+found"}}) {
		t.Error(d)
	}
	if e := got["d/big"]; e == nil || e.Major != 300 || e.Minor != 70000 {
		t.Errorf("d/big read as %+v", e)
	}
}

func TestLsRecords(t *testing.T) {
	cases := []struct {
		in, want []string
	}{
		{[]string{"/2/040755/0/0/.//", "/12/100644/0/0/a/1/", ""}, []string{"/2/040755/0/0/.//", "/12/100644/0/0/a/1/", ""}},
		{[]string{"/14/100644/0/0/new", "line/1/"}, []string{"/14/100644/0/0/new\nline/1/"}},
		{[]string{"/14/100644/0/0/end", "/1/"}, []string{"/14/100644/0/0/end\n/1/"}},
		{[]string{"/14/100644/0/0/a", "", "b/1/", "/15/100644/0/0/c/2/"}, []string{"/14/100644/0/0/a\n\nb/1/", "/15/100644/0/0/c/2/"}},
	}
	for _, c := range cases {
		if got := lsRecords(c.in); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("lsRecords(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
