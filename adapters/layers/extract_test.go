//go:build linux

package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

const capValue = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// richImage is a flattened tree with everything Extract must reproduce.
func richImage(t *testing.T) []byte {
	return mustFlatten(t,
		[]ent{
			dir("bin"), reg("bin/su", "su").With(func(h *tar.Header) { h.Mode = 0o4755 }),
			reg("bin/sudo-user", "x").With(func(h *tar.Header) { h.Mode = 0o6750; h.Uid, h.Gid = 1000, 1001 }),
			reg("bin/ping", "ping").With(xattrs("security.capability", capValue, "user.comment", "c", "trusted.meta", "t")),
			hard("bin/ping6", "bin/ping"),
			dir("tmp").With(func(h *tar.Header) { h.Mode = 0o1777 }),
			dir("locked").With(func(h *tar.Header) { h.Mode = 0o000; h.Uid = 42 }), reg("locked/inside", "i"),
			dir("var"), sym("var/run", "/run"), sym("rel", "bin/su").With(func(h *tar.Header) { h.Uid, h.Gid = 5, 6 }),
			sym("tagged", "x").With(xattrs("trusted.link", "l")),
			fifo("run/initctl").With(func(h *tar.Header) { h.Mode = 0o620; h.Uid = 3 }),
			dev("dev/null", tar.TypeChar, 1, 3), dev("dev/loop0", tar.TypeBlock, 7, 0),
			reg("deep/implied/file", "f"),
			dir("home/u").With(func(h *tar.Header) { h.Uid, h.Gid = 1000, 1000; h.Mode = 0o700 }).With(xattrs("user.d", "dir")),
		},
	)
}

func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestExtractRoundTrip(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	res, err := extractTar(context.Background(), bytes.NewReader(richImage(t)), root, ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deferred) != 0 {
		t.Fatalf("deferred %v without SkipDevices", res.Deferred)
	}
	want := []struct {
		name     string
		mode     uint32 // full st_mode
		uid, gid uint32
	}{
		{"bin", unix.S_IFDIR | 0o755, 0, 0},
		{"bin/su", unix.S_IFREG | 0o4755, 0, 0},
		{"bin/sudo-user", unix.S_IFREG | 0o6750, 1000, 1001},
		{"tmp", unix.S_IFDIR | 0o1777, 0, 0},
		{"locked", unix.S_IFDIR, 42, 0}, // mode 0000
		{"locked/inside", unix.S_IFREG | 0o644, 0, 0},
		{"rel", unix.S_IFLNK | 0o777, 5, 6},
		{"run/initctl", unix.S_IFIFO | 0o620, 3, 0},
		{"dev/null", unix.S_IFCHR | 0o666, 0, 0},
		{"dev/loop0", unix.S_IFBLK | 0o666, 0, 0},
		{"deep", unix.S_IFDIR | 0o755, 0, 0},
		{"deep/implied", unix.S_IFDIR | 0o755, 0, 0},
		{"home/u", unix.S_IFDIR | 0o700, 1000, 1000},
	}
	for _, w := range want {
		st := lstat(t, filepath.Join(root, w.name))
		if st.Mode != w.mode || st.Uid != w.uid || st.Gid != w.gid {
			t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", w.name, st.Mode, st.Uid, st.Gid, w.mode, w.uid, w.gid)
		}
	}
	// mtimes, including directories written into and implied ones.
	for name, want := range map[string]int64{"bin": fixedTime.Unix(), "bin/su": fixedTime.Unix(), "var/run": fixedTime.Unix(),
		"run/initctl": fixedTime.Unix(), "locked": fixedTime.Unix(), "deep": 0, "deep/implied": 0} {
		if st := lstat(t, filepath.Join(root, name)); st.Mtim.Sec != want {
			t.Errorf("%s mtime %d, want %d", name, st.Mtim.Sec, want)
		}
	}
	if st := lstat(t, filepath.Join(root, "dev/null")); unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
		t.Errorf("dev/null rdev %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if a, b := lstat(t, filepath.Join(root, "bin/ping")), lstat(t, filepath.Join(root, "bin/ping6")); a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link not preserved: %d/%d nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	if l, _ := os.Readlink(filepath.Join(root, "var/run")); l != "/run" {
		t.Errorf("var/run -> %q", l)
	}
	for _, x := range []struct{ path, name, value string }{
		{"bin/ping", "security.capability", capValue},
		{"bin/ping", "user.comment", "c"},
		{"bin/ping", "trusted.meta", "t"},
		{"tagged", "trusted.link", "l"},
		{"home/u", "user.d", "dir"},
	} {
		buf := make([]byte, 256)
		n, err := unix.Lgetxattr(filepath.Join(root, x.path), x.name, buf)
		if err != nil || string(buf[:n]) != x.value {
			t.Errorf("%s %s = %q, %v", x.path, x.name, buf[:max(n, 0)], err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "locked/inside")); string(b) != "i" {
		t.Errorf("content %q", b)
	}
	wantStats := Stats{Entries: 22, Files: 5, Dirs: 10, Symlinks: 3, Hardlinks: 1, Devices: 2, FIFOs: 1, ContentBytes: 2 + 1 + 4 + 1 + 1}
	if res.Stats != wantStats {
		t.Errorf("stats %+v, want %+v", res.Stats, wantStats)
	}
}

func TestExtractSkipDevices(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	res, err := extractTar(context.Background(), bytes.NewReader(richImage(t)), root, ExtractOptions{SkipDevices: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range res.Deferred {
		got = append(got, h.Name+" "+string(h.Typeflag)+" "+itoa(int(h.Devmajor))+":"+itoa(int(h.Devminor))+" "+itoa(int(h.Mode)))
	}
	if strings.Join(got, ",") != "dev/loop0 4 7:0 438,dev/null 3 1:3 438" {
		t.Fatalf("deferred %v", got)
	}
	for _, n := range []string{"dev/null", "dev/loop0"} {
		if _, err := os.Lstat(filepath.Join(root, n)); !os.IsNotExist(err) {
			t.Errorf("%s created on the host: %v", n, err)
		}
	}
	if res.Stats.Devices != 2 {
		t.Errorf("devices %d", res.Stats.Devices)
	}
}

func TestExtractRootMustBeEmpty(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "x"), nil, 0o600)
	_, err := extractTar(context.Background(), bytes.NewReader(mkTar(t, reg("a", "a"))), root, ExtractOptions{})
	if !errors.Is(err, core.ErrInvalidArgument) || errors.Is(err, ErrRejected) {
		t.Fatalf("got %v", err)
	}
	_, err = extractTar(context.Background(), bytes.NewReader(nil), filepath.Join(root, "missing"), ExtractOptions{})
	if err == nil {
		t.Fatal("missing root accepted")
	}
}

func TestExtractRootEntry(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	stream := mkTar(t, dir("./").With(func(h *tar.Header) { h.Mode = 0o750; h.Uid = 7 }), reg("a", "a"))
	if _, err := extractTar(context.Background(), bytes.NewReader(stream), root, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, root); st.Mode&0o7777 != 0o750 || st.Uid != 7 || st.Mtim.Sec != fixedTime.Unix() {
		t.Fatalf("root mode %o uid %d mtime %d", st.Mode, st.Uid, st.Mtim.Sec)
	}
}

func TestExtractRootDefaults(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	os.Chmod(root, 0o700)
	if _, err := extractTar(context.Background(), bytes.NewReader(mkTar(t, reg("a", "a"))), root, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, root); st.Mode&0o7777 != 0o755 || st.Uid != 0 || st.Mtim.Sec != 0 {
		t.Fatalf("root mode %o uid %d mtime %d", st.Mode, st.Uid, st.Mtim.Sec)
	}
}

func TestExtractImpliedThenDeclared(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	// A child before its parent: the parent is implied, then declared.
	stream := mkTar(t, reg("a/b", "b"), dir("a").With(func(h *tar.Header) { h.Mode = 0o711; h.Uid = 9 }))
	if _, err := extractTar(context.Background(), bytes.NewReader(stream), root, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, filepath.Join(root, "a")); st.Mode&0o7777 != 0o711 || st.Uid != 9 {
		t.Fatalf("a: mode %o uid %d", st.Mode, st.Uid)
	}
}

// TestExtractSyscallFence bypasses Extract's bookkeeping: the extractor is
// told a path is a directory while on disk it is a symlink to the victim (as
// if an outside process had swapped it). The openat2 / O_NOFOLLOW walk must
// still refuse, with and without openat2.
func TestExtractSyscallFence(t *testing.T) {
	needRoot(t)
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "component-walk"
		}
		t.Run(name, func(t *testing.T) {
			noOpenat2.Store(fallback)
			defer noOpenat2.Store(false)
			v := flattenertest.NewVictim(t)
			if err := os.Symlink(v.Dir, filepath.Join(v.Root, "etc")); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(v.Root, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../../victim", filepath.Join(v.Root, "d", "up")); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(v.Root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			x := &extractor{rootFD: fd, lim: DefaultLimits(), cacheFD: -1, w: newFileWriter(false),
				kinds: map[string]byte{".": tar.TypeDir, "etc": tar.TypeDir, "d": tar.TypeDir, "d/up": tar.TypeDir, "etc/hello": tar.TypeReg,
					"etc/sub": tar.TypeDir, "d/up/sub": tar.TypeDir, "d/up/sub/deep": tar.TypeReg},
				meta: map[string]*entry{}}
			x.startWorkers() // small files go to workers; the parent is still resolved here
			defer x.close()
			pwned := filepath.Join(t.TempDir(), "content")
			if err := os.WriteFile(pwned, []byte("pwned"), 0o600); err != nil {
				t.Fatal(err)
			}
			src, err := os.Open(pwned)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			for _, e := range []*entry{
				{name: "etc/hello2", typ: tar.TypeReg, size: 5, mode: 0o777},
				{name: "d/up/new", typ: tar.TypeDir, mode: 0o777},
				{name: "etc/sub2", typ: tar.TypeSymlink, link: "/", mode: 0o777},
				{name: "d/up/fifo", typ: tar.TypeFifo, mode: 0o777},
				{name: "lnk", typ: tar.TypeLink, link: "etc/hello"},
				// Symlinks as intermediate components (RESOLVE_NO_SYMLINKS / O_NOFOLLOW per step).
				{name: "etc/sub/x", typ: tar.TypeReg, size: 5, mode: 0o777},
				{name: "d/up/sub/y", typ: tar.TypeSymlink, link: "/", mode: 0o777},
				{name: "lnk2", typ: tar.TypeLink, link: "d/up/sub/deep"},
			} {
				e.raw = e.name
				if err := x.add(e, content{file: src}); err == nil {
					t.Errorf("%s: accepted through a planted symlink", e.name)
				} else {
					t.Logf("%s: %v", e.name, err)
				}
			}
			for _, p := range []string{"etc", "etc/sub", "d/up", "d/up/sub"} {
				x.meta[p] = &entry{typ: tar.TypeDir, mode: 0o777, uid: 1234}
				if err := x.dirMeta(p); err == nil {
					t.Errorf("dirMeta %s went through a symlink", p)
				}
			}
			os.Remove(filepath.Join(v.Root, "etc"))
			v.Check(t)
		})
	}
}

func TestExtractCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := extractTar(ctx, bytes.NewReader(mkTar(t, reg("a", "a"))), t.TempDir(), ExtractOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

// TestExtractHardlinkCarriesNoMetadata: a hard link header's mode and owner
// are never applied (they would change the shared inode, the way
// CVE-2021-32760 changed a host file through a link).
func TestExtractHardlinkCarriesNoMetadata(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	stream := mkTar(t, reg("a", "a"), hard("b", "a").With(func(h *tar.Header) { h.Mode = 0o4777; h.Uid, h.Gid = 1234, 1234 }))
	if _, err := extractTar(context.Background(), bytes.NewReader(stream), root, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, filepath.Join(root, "b")); st.Mode&0o7777 != 0o644 || st.Uid != 0 || st.Nlink != 2 {
		t.Fatalf("mode %o uid %d nlink %d", st.Mode, st.Uid, st.Nlink)
	}
}

// TestExtractSparse: with HoleMin, long zero runs are left as holes, the
// content reads back the same, and the block counts are those of the
// non-zero blocks.
func TestExtractSparse(t *testing.T) {
	body := make([]byte, 300*4096+10)
	copy(body[0:], "head")                // block 0
	copy(body[5*4096:], "short gap")      // block 5: blocks 1-4 are a short zero run
	copy(body[200*4096:], "after a hole") // block 200: blocks 6-199 are a long one
	body[len(body)-1] = 1                 // the last, partial block
	tree := mustFlatten(t, []ent{reg("big", string(body)), reg("small", "x")})
	root := t.TempDir()
	res, err := extractTar(context.Background(), bytes.NewReader(tree), root, ExtractOptions{HoleMin: 64 << 10, SparseMin: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "big"))
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("content differs (%v)", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "big"), &st); err != nil {
		t.Fatal(err)
	}
	bc, ok := res.Sparse[[2]uint64{uint64(st.Dev), st.Ino}]
	if !ok || bc.Data != 4 || bc.Runs != 4 {
		t.Fatalf("block count %+v (found %v), want 4 data blocks in 4 runs", bc, ok)
	}
	if allocated := st.Blocks * 512; allocated > 100*4096 {
		t.Errorf("%d bytes allocated: the long zero run was written", allocated)
	}
	if len(res.Sparse) != 1 {
		t.Errorf("%d files counted; the small one is under SparseMin", len(res.Sparse))
	}
}

// TestExtractSmallFilesByWorkers: files small enough for the workers come
// out with their content, metadata and block counts, and a worker's
// failure fails the extraction.
func TestExtractSmallFilesByWorkers(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("workers need two CPUs")
	}
	body := make([]byte, 50*4096)
	copy(body, "head")
	copy(body[40*4096:], "after a hole") // blocks 1-39: a zero run of 156 KiB
	var es []ent
	for i := range 200 {
		es = append(es, reg(fmt.Sprintf("d/f%03d", i), strings.Repeat(string(rune('a'+i%26)), i*37)).With(func(h *tar.Header) { h.Mode = 0o640 }))
	}
	es = append(es, reg("d/sparse", string(body)))
	root := t.TempDir()
	res, err := extractTar(context.Background(), bytes.NewReader(mustFlatten(t, es)), root, ExtractOptions{HoleMin: 64 << 10, SparseMin: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		p := filepath.Join(root, fmt.Sprintf("d/f%03d", i))
		got, err := os.ReadFile(p)
		if err != nil || string(got) != strings.Repeat(string(rune('a'+i%26)), i*37) {
			t.Fatalf("%s: content differs (%v)", p, err)
		}
		if st := lstat(t, p); st.Mode&0o7777 != 0o640 {
			t.Fatalf("%s: mode %o", p, st.Mode&0o7777)
		}
	}
	st := lstat(t, filepath.Join(root, "d/sparse"))
	if bc := res.Sparse[[2]uint64{uint64(st.Dev), st.Ino}]; bc.Data != 2 || bc.Runs != 2 {
		t.Errorf("sparse block count %+v, want 2 data blocks in 2 runs", bc)
	}

	// A file already on disk that the stream did not make: only the
	// worker's O_EXCL create can find it.
	root = t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "planted"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	x := &extractor{rootFD: fd, lim: DefaultLimits(), cacheFD: -1, w: newFileWriter(false),
		kinds: map[string]byte{".": tar.TypeDir}, meta: map[string]*entry{}}
	x.startWorkers()
	defer x.close()
	planted, done, err := tarEntries(bytes.NewReader(mkTar(t, reg("planted", "data"))))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := x.add(&entry{name: "planted", raw: "planted", typ: tar.TypeReg, size: 4, mode: 0o644}, content{file: planted[0].File, off: planted[0].Offset}); err != nil {
		t.Fatalf("add: %v (the create is the worker's)", err)
	}
	if err := x.finish(); err == nil || !strings.Contains(err.Error(), "planted") {
		t.Fatalf("finish = %v, want the worker's failure to create planted", err)
	}
}

// TestExtractEntriesMatchesExtract: a tree handed over by Flatten, with
// its zero-block lists, is staged exactly as the same tree read back from
// its tar form (no lists: the content is scanned): the same names, types,
// owners, modes, times, xattrs, link targets, content, deferred devices
// and block counts; only which zero blocks are holes may differ.
func TestExtractEntriesMatchesExtract(t *testing.T) {
	needRoot(t)
	// With one CPU there are no workers: every file, the empty one too, is
	// written by the goroutine that walks the entries.
	for _, c := range []struct {
		name  string
		procs int
	}{{"one CPU", 1}, {"workers", max(2, runtime.GOMAXPROCS(0))}} {
		t.Run(c.name, func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.procs))
			testExtractEntriesMatchesExtract(t)
		})
	}
}

func testExtractEntriesMatchesExtract(t *testing.T) {
	big := make([]byte, 600*4096+77) // past asyncMax, with a long zero run
	copy(big, "head")
	copy(big[300*4096:], "middle")
	big[len(big)-1] = 9
	mid := make([]byte, 40*4096) // under asyncMax, zero blocks inside
	copy(mid[4096:], "x")
	copy(mid[30*4096:], "y")
	base := []ent{
		dir("bin"), reg("bin/su", "su").With(func(h *tar.Header) { h.Mode = 0o4755 }),
		reg("bin/ping", "ping").With(xattrs("security.capability", capValue, "user.comment", "c")),
		hard("bin/ping6", "bin/ping"),
		dir("locked").With(func(h *tar.Header) { h.Mode = 0o000; h.Uid = 42 }), reg("locked/inside", "i"),
		sym("rel", "bin/su").With(func(h *tar.Header) { h.Uid, h.Gid = 5, 6 }),
		fifo("run/initctl"), dev("dev/null", tar.TypeChar, 1, 3),
		reg("data/big", string(big)), reg("data/mid", string(mid)), reg("data/empty", ""),
	}
	var many []ent
	for i := range 300 {
		many = append(many, reg(fmt.Sprintf("many/f%03d", i), strings.Repeat("z", i*13)).With(func(h *tar.Header) { h.Uid = i }))
	}
	layers := writeLayers(t, blob{Data: gz(t, mkTar(t, base...)), MediaType: mtGzip}, blob{Data: gz(t, mkTar(t, many...)), MediaType: mtGzip})
	opt := ExtractOptions{SkipDevices: true, HoleMin: 64 << 10, SparseMin: 64 << 10}

	stream, _, err := flatten(t, layers, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	fromStream := t.TempDir()
	want, err := extractTar(context.Background(), bytes.NewReader(stream), fromStream, opt)
	if err != nil {
		t.Fatal(err)
	}
	fromEntries := t.TempDir()
	var got ExtractResult
	if _, err := Flatten(context.Background(), layers, DefaultLimits(), func(es ports.Tree) error {
		got, err = ExtractEntries(context.Background(), es, fromEntries, opt)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a, b := describeTree(t, fromStream, want.Sparse), describeTree(t, fromEntries, got.Sparse)
	if len(a) != len(b) {
		t.Fatalf("%d entries from the stream, %d from entries", len(a), len(b))
	}
	for p, d := range a {
		if b[p] != d {
			t.Errorf("%s:\n stream  %s\n entries %s", p, d, b[p])
		}
	}
	if len(want.Deferred) != 1 || len(got.Deferred) != 1 || want.Deferred[0].Name != got.Deferred[0].Name {
		t.Errorf("deferred devices differ: %v / %v", want.Deferred, got.Deferred)
	}
	if want.Stats != got.Stats {
		t.Errorf("stats differ: %+v / %+v", want.Stats, got.Stats)
	}
}

// describeTree maps every path below root to one line of what Extract
// promises about it (its block count too, when counted).
func describeTree(t *testing.T, root string, sparse map[[2]uint64]BlockCount) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := fi.Sys().(*syscall.Stat_t)
		d := fmt.Sprintf("mode %o uid %d gid %d mtime %d size %d nlink %d", st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Size, st.Nlink)
		switch {
		case fi.Mode().IsRegular():
			body, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			d += fmt.Sprintf(" sha %x", sha256.Sum256(body))
			if bc, ok := sparse[[2]uint64{uint64(st.Dev), st.Ino}]; ok {
				d += fmt.Sprintf(" blocks %+v", bc)
			}
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			d += " -> " + target
		}
		sz, _ := unix.Llistxattr(p, nil)
		if sz > 0 {
			buf := make([]byte, sz)
			n, _ := unix.Llistxattr(p, buf)
			names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
			sort.Strings(names)
			for _, name := range names {
				v := make([]byte, 256)
				vn, _ := unix.Lgetxattr(p, name, v)
				d += fmt.Sprintf(" %s=%q", name, v[:max(vn, 0)])
			}
		}
		out[rel] = d
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExtractEntriesRefusesHostileEntries: entries handed over whole get
// Extract's checks, each refused with its rule before anything is made
// for it, and content that is not where the entry says fails.
func TestExtractEntriesRefusesHostileEntries(t *testing.T) {
	needRoot(t)
	content, err := os.CreateTemp(t.TempDir(), "content")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := content.WriteString("0123456789"); err != nil {
		t.Fatal(err)
	}
	h := func(typ byte, name string, f func(*tar.Header)) *tar.Header {
		hdr := &tar.Header{Typeflag: typ, Name: name, Mode: 0o644, ModTime: fixedTime}
		if f != nil {
			f(hdr)
		}
		return hdr
	}
	file := func(name string, size int64) ports.TreeEntry {
		return ports.TreeEntry{Header: h(tar.TypeReg, name, func(x *tar.Header) { x.Size = size }), File: content}
	}
	cases := []struct {
		name    string
		entries ports.TreeSlice
		rule    string // "" means an error that is not a rejection
	}{
		{"traversal", ports.TreeSlice{file("../escape", 1)}, RulePathTraversal},
		{"absolute", ports.TreeSlice{file("/etc/passwd", 1)}, "absolute-name"},
		{"whiteout", ports.TreeSlice{{Header: h(tar.TypeReg, "d/.wh.x", nil)}}, RuleWhiteoutInTree},
		{"below a symlink", ports.TreeSlice{{Header: h(tar.TypeSymlink, "l", func(x *tar.Header) { x.Linkname = "/" })}, file("l/x", 1)}, RuleParentSymlink},
		{"twice", ports.TreeSlice{file("a", 1), file("a", 1)}, RuleDuplicateEntry},
		{"link to nothing", ports.TreeSlice{{Header: h(tar.TypeLink, "b", func(x *tar.Header) { x.Linkname = "missing" })}}, RuleHardlinkMissing},
		{"no header", ports.TreeSlice{{}}, RuleCorruptArchive},
		{"no content", ports.TreeSlice{{Header: h(tar.TypeReg, "a", func(x *tar.Header) { x.Size = 5 })}}, RuleCorruptArchive},
		{"content short", ports.TreeSlice{file("a", 11)}, RuleCorruptArchive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			_, err := ExtractEntries(context.Background(), tc.entries, root, ExtractOptions{})
			if err == nil {
				t.Fatal("accepted")
			}
			wantRule(t, err, tc.rule)
		})
	}
}

// TestExtractEntriesCountsLikeExtract: more entries than MaxEntries is
// refused by the entry limit, even when the entry past the limit has no
// header (which once made the count check panic naming it).
func TestExtractEntriesCountsLikeExtract(t *testing.T) {
	needRoot(t)
	opt := ExtractOptions{Limits: Limits{MaxEntries: 2}}
	d := func(name string) ports.TreeEntry {
		return ports.TreeEntry{Header: &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: fixedTime}}
	}
	for _, es := range []ports.TreeSlice{
		{d("a"), d("b"), d("c")},
		{d("a"), d("b"), {}},
	} {
		_, err := ExtractEntries(context.Background(), es, t.TempDir(), opt)
		wantRule(t, err, RuleTooManyEntries)
	}
	if _, err := ExtractEntries(context.Background(), ports.TreeSlice{d("a"), d("b")}, t.TempDir(), opt); err != nil {
		t.Fatalf("two entries under a limit of two: %v", err)
	}
}

// TestExtractOwnersUnderSetgidRoot: a file Extract creates belongs to the
// entry's owner even where new files start out with another group (a
// setgid staging root hands its group down): a file meant for root:root
// must be chowned there, not assumed to be root's already.
func TestExtractOwnersUnderSetgidRoot(t *testing.T) {
	needRoot(t)
	const rootGID = 4321
	data := make([]byte, 3*4096) // the last two blocks zero: a truncated tail
	copy(data, "head")
	tree := []ent{
		reg("a", "a"), reg("d/b", string(data)), dir("d"),
		reg("owned", "o").With(func(h *tar.Header) { h.Uid, h.Gid = 7, 8 }),
	}
	layers := writeLayers(t, blob{Data: gz(t, mkTar(t, tree...)), MediaType: mtGzip})
	opt := ExtractOptions{SkipDevices: true, HoleMin: 4096, SparseMin: 4096}
	setgidRoot := func(t *testing.T) string {
		root := t.TempDir()
		if err := os.Chown(root, 0, rootGID); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(root, 0o755|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		return root
	}
	check := func(t *testing.T, root string) {
		t.Helper()
		for name, want := range map[string][2]uint32{"a": {0, 0}, "d/b": {0, 0}, "owned": {7, 8}} {
			st := lstat(t, filepath.Join(root, name))
			if st.Uid != want[0] || st.Gid != want[1] {
				t.Errorf("%s: owner %d:%d, want %d:%d", name, st.Uid, st.Gid, want[0], want[1])
			}
		}
		if st := lstat(t, filepath.Join(root, "d/b")); st.Size != int64(len(data)) {
			t.Errorf("d/b: %d bytes, want %d", st.Size, len(data))
		}
		if _, err := os.Lstat(filepath.Join(root, ownerProbe)); !os.IsNotExist(err) {
			t.Errorf("the owner probe is left in the tree (%v)", err)
		}
	}
	extractBothWays(t, layers, opt, setgidRoot, check)
}

// extractBothWays stages layers with ExtractEntries of Flatten's entries
// (zero-block lists known) and of their tar form read back (lists
// unknown), each into a root made by newRoot, and checks each.
func extractBothWays(t *testing.T, layers []Layer, opt ExtractOptions, newRoot func(*testing.T) string, check func(*testing.T, string)) {
	t.Helper()
	t.Run("entries", func(t *testing.T) {
		root := newRoot(t)
		if _, err := Flatten(context.Background(), layers, DefaultLimits(), func(es ports.Tree) error {
			_, err := ExtractEntries(context.Background(), es, root, opt)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		check(t, root)
	})
	t.Run("stream", func(t *testing.T) {
		root := newRoot(t)
		stream, _, err := flatten(t, layers, DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := extractTar(context.Background(), bytes.NewReader(stream), root, opt); err != nil {
			t.Fatal(err)
		}
		check(t, root)
	})
}

// TestExtractRootACLNotInherited: a default ACL on the directory the root
// is made in (an operator's work directory) must not reach the tree: the
// image would carry ACLs no layer declared, granting a host user access.
func TestExtractRootACLNotInherited(t *testing.T) {
	needRoot(t)
	// A default ACL granting user 1234 rwx: version 2, then (tag, perm,
	// id) entries sorted by tag: user_obj, user, group_obj, mask, other.
	acl := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 7, ^uint32(0)}, {0x02, 7, 1234}, {0x04, 5, ^uint32(0)}, {0x10, 7, ^uint32(0)}, {0x20, 5, ^uint32(0)}} {
		acl = binary.LittleEndian.AppendUint16(acl, e.tag)
		acl = binary.LittleEndian.AppendUint16(acl, e.perm)
		acl = binary.LittleEndian.AppendUint32(acl, e.id)
	}
	// A layer's own ACL is kept ("kept" declares the same list as its
	// access ACL).
	tree := []ent{dir("d"), reg("d/f", "f"), reg("g", "g"), reg("kept", "k").With(xattrs("system.posix_acl_access", string(acl)))}
	layers := writeLayers(t, blob{Data: gz(t, mkTar(t, tree...)), MediaType: mtGzip})
	opt := ExtractOptions{SkipDevices: true}
	aclRoot := func(t *testing.T) string {
		parent := t.TempDir()
		if err := unix.Setxattr(parent, "system.posix_acl_default", acl, 0); err != nil {
			t.Skipf("no POSIX ACLs on %s: %v", parent, err)
		}
		root := filepath.Join(parent, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		return root
	}
	check := func(t *testing.T, root string) {
		t.Helper()
		for _, name := range []string{".", "d", "d/f", "g"} {
			for _, x := range listXattrs(t, filepath.Join(root, name)) {
				if strings.HasPrefix(x, "system.posix_acl") {
					t.Errorf("%s: carries %s, which no layer declared", name, x)
				}
			}
		}
		if got := listXattrs(t, filepath.Join(root, "kept")); !slices.Equal(got, []string{"system.posix_acl_access"}) {
			t.Errorf("kept: xattrs %q, want its declared access ACL only", got)
		}
	}
	extractBothWays(t, layers, opt, aclRoot, check)
}

func listXattrs(t *testing.T, p string) []string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names
}

// TestExtractEntriesErrorWhileWorkersWrite: a tree refused part-way, while
// workers are still writing and counting files, returns only after they
// have stopped (the race detector, which make test runs on this package,
// saw the result read while a worker wrote it).
func TestExtractEntriesErrorWhileWorkersWrite(t *testing.T) {
	needRoot(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	const files, size = 4, 64 << 10 // fewer than the jobs queue holds: nothing orders the workers before the return
	content := filepath.Join(t.TempDir(), "content")
	if err := os.WriteFile(content, bytes.Repeat([]byte("c"), files*size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(content)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var es ports.TreeSlice
	for i := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("f%02d", i), Size: size, Mode: 0o644}
		es = append(es, ports.TreeEntry{Header: h, File: f, Offset: int64(i) * size, ZeroKnown: true})
	}
	es = append(es, ports.TreeEntry{}) // no header: refused
	_, err = ExtractEntries(context.Background(), es, t.TempDir(), ExtractOptions{SkipDevices: true, HoleMin: 4096, SparseMin: 4096})
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("err = %v, want a rejection", err)
	}
}
