package ext4stream

import (
	"archive/tar"
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden.sha256 from this build")

// goldenFile pins the sha256 of the images of goldenTrees: the bytes are
// a function of the tree and the spec (FormatVersion), so a change of the
// writer's internals must leave every one of them as it was.
const goldenFile = "testdata/golden.sha256"

// goldenTrees are varied trees whose images are pinned: everything the
// writer stores in an inode, a directory or a side block.
func goldenTrees(t testing.TB) map[string]func() []ports.TreeEntry {
	tarTree := func(tree func() []byte, zero bool) func() []ports.TreeEntry {
		return func() []ports.TreeEntry { return entriesOf(t, tree(), zero) }
	}
	rich := func() []byte { return richTree(t) }
	sparse := func() []byte { return sparseTree(t) }
	return map[string]func() []ports.TreeEntry{
		"rich":            tarTree(rich, false),
		"rich-zero-lists": tarTree(rich, true),
		"sparse":          tarTree(sparse, false),
		"sparse-zero":     tarTree(sparse, true),
		"odds":            tarTree(func() []byte { return oddsTree(t) }, false),
		"huge-dir":        tarTree(func() []byte { return hugeDirTree(t, 20_000) }, true),
		"many-subdirs":    tarTree(func() []byte { return subdirsTree(t) }, true),
		"layers":          func() []ports.TreeEntry { return layeredEntries(t) },
		"empty":           tarTree(func() []byte { return tarOf(t) }, false),
	}
}

// oddsTree: POSIX ACLs, xattrs on the root and on devices, the root and
// lost+found declared, implied parents declared later, carried atime and
// ctime, fast symlinks of the longest inline length and one past it,
// files of exactly four and five extents and one needing a two-level
// extent tree, large device numbers, a name of 255 bytes.
func oddsTree(t testing.TB) []byte {
	const noID = 0xFFFFFFFF
	access := aclXattr([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclUser, 5, 1000}, [3]uint32{aclGroupObj, 5, noID},
		[3]uint32{aclGroup, 4, 2000}, [3]uint32{aclMask, 7, noID}, [3]uint32{aclOther, 0, noID})
	def := aclXattr([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclGroupObj, 5, noID}, [3]uint32{aclOther, 5, noID})
	at := time.Date(2023, 1, 2, 3, 4, 5, 600, time.UTC)
	ct := time.Date(2022, 7, 8, 9, 10, 11, 12, time.UTC)
	// extents returns content of n data runs separated by holes.
	extents := func(n int) string {
		b := make([]byte, (2*n-1)*blockSize+10)
		for i := 0; i < 2*n; i += 2 {
			binary.LittleEndian.PutUint64(b[i*blockSize:], uint64(i)+1)
		}
		return string(b)
	}
	es := []entry{
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o711, Uid: 5, Gid: 6,
			PAXRecords: map[string]string{"SCHILY.xattr.user.root": "r"}}},
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "a/b/c/implied", Mode: 0o600, AccessTime: at, ChangeTime: ct}, Body: "implied parents"},
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "a/b", Mode: 0o750, Uid: 7, ModTime: past}},
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "lost+found", Mode: 0o755, ModTime: future}},
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "shared", Mode: 0o775, PAXRecords: map[string]string{
			"SCHILY.xattr.system.posix_acl_access":  access,
			"SCHILY.xattr.system.posix_acl_default": def,
		}}},
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "shared/f", Mode: 0o640, PAXRecords: map[string]string{
			"SCHILY.xattr.system.posix_acl_access": access,
			"SCHILY.xattr.user.big":                strings.Repeat("v", 3000),
		}}, Body: "f"},
		{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "shared/l59", Linkname: strings.Repeat("y", fastSymlinkMax)}},
		{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "shared/l60", Linkname: strings.Repeat("z", fastSymlinkMax+1)}},
		{Header: tar.Header{Typeflag: tar.TypeChar, Name: "shared/bigdev", Mode: 0o600, Devmajor: 4095, Devminor: 1 << 19,
			PAXRecords: map[string]string{"SCHILY.xattr.trusted.dev": "d"}}},
		{Header: tar.Header{Typeflag: tar.TypeFifo, Name: "shared/fifo", Mode: 0o644, AccessTime: at}},
		file("ext/four", 0o644, extents(4)),
		file("ext/five", 0o644, extents(5)),
		file("ext/tree", 0o644, extents(1500)),
		file("ext/"+strings.Repeat("n", 255), 0o644, "long name"),
		{Header: tar.Header{Typeflag: tar.TypeLink, Name: "ext/five-again", Linkname: "ext/five"}},
		{Header: tar.Header{Typeflag: tar.TypeLink, Name: "a/b/c/link", Linkname: "shared/f"}},
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "empty", Mode: 0o644, ModTime: time.Unix(0, 0)}},
	}
	return tarOf(t, es...)
}

// hugeDirTree is one directory of n small files, names of varied length.
func hugeDirTree(t testing.TB, n int) []byte {
	es := []entry{dir("huge", 0o755)}
	for i := range n {
		es = append(es, file(fmt.Sprintf("huge/%s%d", strings.Repeat("f", i%40), i), 0o644, fmt.Sprint(i)))
	}
	return tarOf(t, es...)
}

// subdirsTree is 3000 directories under one, each with a file, and a deep
// chain.
func subdirsTree(t testing.TB) []byte {
	es := []entry{dir("d", 0o755)}
	for i := range 3000 {
		es = append(es, dir(fmt.Sprintf("d/%d", i), 0o755), file(fmt.Sprintf("d/%d/x", i), 0o644, "x"))
	}
	p := "deep"
	for i := range 100 {
		es = append(es, dir(p, 0o755))
		p += fmt.Sprintf("/%d", i%10)
	}
	return tarOf(t, es...)
}

// layeredEntries is a base and two upper layers interleaved in tree
// order: an upper layer declares a base directory again, adds files in
// it, and links to a base file.
func layeredEntries(t testing.TB) []ports.TreeEntry {
	type le struct {
		e     entry
		layer int
	}
	ls := []le{
		{dir("./", 0o755), 0},
		{dir("app/", 0o700), 2},
		{file("app/main", 0o755, strings.Repeat("main", 5000)), 2},
		{entry{Header: tar.Header{Typeflag: tar.TypeLink, Name: "app/libc", Linkname: "usr/lib/libc.so"}}, 2},
		{dir("etc/", 0o755), 1},
		{file("etc/conf", 0o644, "conf"), 1},
		{dir("usr/", 0o755), 0},
		{dir("usr/lib/", 0o755), 1},
		{file("usr/lib/libc.so", 0o755, strings.Repeat("libc", 3000)), 0},
		{file("usr/lib/new.so", 0o755, "new"), 1},
		{file("usr/lib/z.so", 0o755, strings.Repeat("z", 9000)), 0},
	}
	var es []entry
	for _, l := range ls {
		es = append(es, l.e)
	}
	out := entriesOf(t, tarOf(t, es...), true)
	for i := range out {
		out[i].Layer = ls[i].layer
	}
	return out
}

// TestImagesArePinned: the images of goldenTrees have the sha256s pinned
// in testdata (run with -update-golden only when FormatVersion changes).
func TestImagesArePinned(t *testing.T) {
	want := map[string]string{}
	if f, err := os.Open(goldenFile); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, sum, ok := strings.Cut(sc.Text(), " "); ok {
				want[name] = sum
			}
		}
		f.Close()
	}
	head := func(s *ports.BuildSpec) { s.HeadroomBytes, s.HeadroomInodes = 3<<20, 100 }
	got := map[string]string{}
	for name, tree := range goldenTrees(t) {
		img, res, err := buildEntries(t, tree(), head)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[name] = res.SHA256
		if s := sha(t, img); s != res.SHA256 {
			t.Errorf("%s: reported sha256 %s, file %s", name, res.SHA256, s)
		}
		if rc, out := fsck(t, img); rc != 0 {
			t.Errorf("%s: e2fsck -fn exit %d:\n%s", name, rc, out)
		}
		if !*updateGolden && got[name] != want[name] {
			t.Errorf("%s: sha256 %s, pinned %s (FormatVersion %s)", name, got[name], want[name], FormatVersion)
		}
	}
	if *updateGolden {
		var lines []string
		for name, sum := range got {
			lines = append(lines, name+" "+sum)
		}
		slices.Sort(lines)
		if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
