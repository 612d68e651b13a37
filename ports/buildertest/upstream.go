package buildertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
	ft "github.com/cubesandbox/templatecenter/ports/flattenertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// UpstreamImage is one image of the upstream fidelity corpus: realistic
// layers that umoci unpacks, to compare a builder's image with, entry by
// entry.
type UpstreamImage struct {
	Name string
	// Layers writes the layer blobs under dir and returns them in order.
	Layers func(t *testing.T, dir string) []ports.FlattenLayer
	// Implied lists directories no layer declares. The flattener makes
	// them 0755 root:root with mtime 0; umoci stamps them, and the
	// directories it creates them in, with the time of extraction, so
	// their mtimes are not compared.
	Implied []string
	// Check asserts what the image is about on umoci's tree (and so, by
	// the comparison, on every builder's).
	Check func(t *testing.T, want Tree)
	// Allocated bounds the space files may take in the image of a builder
	// with Capabilities.SparseFiles.
	Allocated map[string]int64
	// UmociRefuses, when set, is what umoci's refusal of the image says;
	// the image must then have one layer, and GNU tar's extraction of it
	// is the reference instead.
	UmociRefuses string
}

// UpstreamImages returns the corpus:
//
//   - debian-merged-usr: a debootstrap minbase of Debian (lib, bin, sbin ->
//     usr/..., var/run -> /run, var/lock -> /run/lock) with a layer that
//     writes, links, whites out and makes opaque through those symlinks;
//   - busybox-hardlink-farm: 400 names of one inode across four
//     directories, one name replaced and one added by a later layer;
//   - many-entries: more than 25,000 entries in 105 directories, one made
//     opaque by a later layer;
//   - sparse-files: GNU tar sparse files (holes, all-hole, data at the end)
//     and a PAX 1.0 sparse file;
//   - odd-names: spaces, newlines, tabs, non-UTF-8 bytes, 255-byte file and
//     directory components, shell metacharacters, NFC/NFD twins;
//   - dir-replaced-by-symlink: a layer turns a directory into a symlink (to
//     an existing and to a missing directory), a later one writes beneath.
func UpstreamImages() []UpstreamImage {
	return []UpstreamImage{
		{Name: "debian-merged-usr", Layers: debianLayers, Check: checkDebian},
		{Name: "busybox-hardlink-farm", Layers: busyboxLayers, Check: checkBusybox},
		{Name: "many-entries", Layers: manyLayers, Check: func(t *testing.T, want Tree) {
			if len(want) < 25_000 {
				t.Errorf("%d entries, want at least 25,000", len(want))
			}
		}},
		{Name: "sparse-files", Layers: sparseLayers, Check: checkSparse, Allocated: sparseAllocated},
		{Name: "sparse-old-gnu-format", Layers: oldGNUSparseLayers, Check: checkSparse, Allocated: sparseAllocated,
			UmociRefuses: `unknown typeflag '\x53'`},
		{Name: "odd-names", Layers: oddNameLayers, Check: func(t *testing.T, want Tree) {
			for _, p := range []string{"names/new\nline", "names/caf\xe9", "names/" + strings.Repeat("d", 255) + "/" + strings.Repeat("f", 255)} {
				if want[p] == nil {
					t.Errorf("%q missing", p)
				}
			}
		}},
		{Name: "dir-replaced-by-symlink", Layers: dirToSymlinkLayers, Implied: []string{"var/cache", "var/cache/srv"}, Check: checkDirToSymlink},
	}
}

// RunUpstreamCorpus unpacks every image of UpstreamImages with
// `umoci unpack`, builds it with each builder (flattened by the harness's
// flattener) and compares the two trees entry by entry: type, mode,
// owner, mtime, size, content hash, symlink target, device numbers, xattrs
// and hard link groups. umoci runs once per image for all builders. It
// needs root, umoci, debugfs and e2fsck, and for the Debian image
// scripts/debian-testbase.sh (or CUBE_TEST_DEBIAN_BASE naming its tar).
func RunUpstreamCorpus(t *testing.T, builders map[string]HarnessMaker) {
	if testing.Short() {
		t.Skip("the upstream corpus unpacks and builds real images; skipped with -short")
	}
	for _, tool := range []string{"umoci", "debugfs", "e2fsck", "tar"} {
		testenv.Tool(t, tool)
	}
	testenv.Root(t, "umoci unpack keeps owners and devices only as root")
	names := make([]string, 0, len(builders))
	for n := range builders {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, img := range UpstreamImages() {
		t.Run(img.Name, func(t *testing.T) {
			dir := t.TempDir()
			ls := img.Layers(t, filepath.Join(dir, "layers"))
			want, err := umociUnpack(t, dir, ls)
			switch {
			case img.UmociRefuses == "" && err != nil:
				t.Fatalf("umoci unpack refuses the image: %v", err)
			case img.UmociRefuses != "" && (err == nil || !strings.Contains(err.Error(), img.UmociRefuses)):
				t.Fatalf("umoci unpack: %v (%d entries), want a refusal saying %q", err, len(want), img.UmociRefuses)
			case err != nil:
				t.Logf("umoci unpack refuses the image as expected: %v", err)
				want = tarExtract(t, dir, ls)
				t.Logf("GNU tar -x instead: %d entries", len(want))
			default:
				t.Logf("umoci unpack: %d entries", len(want))
			}
			if img.Check != nil {
				img.Check(t, want)
			}
			ref := "umoci unpack"
			if img.UmociRefuses != "" {
				ref = "tar -x"
			}
			for _, name := range names {
				t.Run(name, func(t *testing.T) { compareUpstream(t, builders[name], img, ls, want, ref) })
			}
		})
	}
}

// umociUnpack unpacks the layers with umoci, or returns its refusal.
func umociUnpack(t *testing.T, dir string, ls []ports.FlattenLayer) (Tree, error) {
	t.Helper()
	layout, bundle := filepath.Join(dir, "oci"), filepath.Join(FastTempDir(t), "bundle")
	if err := writeOCILayout(layout, "corpus", ls); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bundle)
	if out, err := exec.Command("umoci", "unpack", "--image", layout+":corpus", bundle).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	want, err := ReadDir(filepath.Join(bundle, "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	return want, nil
}

// tarExtract is the reference for a one-layer image umoci refuses: GNU
// tar's extraction, with numeric owners, modes and xattrs.
func tarExtract(t *testing.T, dir string, ls []ports.FlattenLayer) Tree {
	t.Helper()
	if len(ls) != 1 || ls[0].MediaType != ft.MediaTar {
		t.Fatal("GNU tar can stand in for umoci only for one uncompressed layer")
	}
	root := filepath.Join(FastTempDir(t), "tar-x")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	args := []string{"--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf", ls[0].Path, "-C", root}
	if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		t.Fatalf("tar %v: %v\n%s", args, err, out)
	}
	want, err := ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

func compareUpstream(t *testing.T, newH HarnessMaker, img UpstreamImage, ls []ports.FlattenLayer, want Tree, ref string) {
	ctx := context.Background()
	h := newHarness(t, newH)
	fl, err := h.MakeFlattener(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.MakeBuilder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := FastTempDir(t)
	treeFile := filepath.Join(dir, "tree.tar")
	flattenTo(t, fl, ls, treeFile)
	out := filepath.Join(dir, "rootfs.ext4")
	// Later than every mtime of the layers: builders may clamp to it.
	spec := ports.BuildSpec{OutPath: out, UUID: FixtureUUID, Time: time.Now().Add(24 * time.Hour).Truncate(time.Second)}
	if _, err := b.Build(ctx, spec, EntriesOf(t, treeFile)); err != nil {
		t.Fatalf("Build: %v", err)
	}
	os.Remove(treeFile)
	if err := Fsck(ctx, out); err != nil {
		t.Error(err)
	}
	got, err := ReadImage(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	diffs := Diff(want, got, DiffOptions{IgnoreRootMTime: true, AllowExtra: []string{"lost+found"}, IgnoreMTime: img.Implied})
	for i, d := range diffs {
		if i == 40 {
			t.Errorf("... and %d more differences", len(diffs)-i)
			break
		}
		t.Errorf("differs from %s: %s", ref, d)
	}
	if len(diffs) == 0 {
		t.Logf("%s: %d entries, identical to %s", b.Name(), len(got), ref)
	}
	if h.Capabilities().SparseFiles {
		for p, max := range img.Allocated {
			if e := got[p]; e != nil && e.Blocks*512 > max {
				t.Errorf("%s (%d bytes) takes %d bytes, want at most %d: zero blocks should not be allocated", p, e.Size, e.Blocks*512, max)
			}
		}
	}
}

// writeEntries writes entries as a layer file, gzip-compressed when gz.
func writeEntries(t *testing.T, dir, name string, gz bool, es ...ft.Entry) ports.FlattenLayer {
	t.Helper()
	b := ft.Tar(t, es...)
	mt := ft.MediaTar
	if gz {
		b, mt = ft.Gzip(t, b), ft.MediaGzip
	}
	return writeBlob(t, dir, name, b, mt)
}

func writeBlob(t *testing.T, dir, name string, b []byte, mediaType string) ports.FlattenLayer {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return ports.FlattenLayer{Path: p, MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:])}
}

func exe(e ft.Entry) ft.Entry { e.Header.Mode = 0o755; return e }

// debianBase returns the cached debootstrap tar, made by the script on
// first use.
func debianBase(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CUBE_TEST_DEBIAN_BASE"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "debian-testbase.sh")
	out, err := exec.Command(script).Output()
	if err != nil {
		msg := fmt.Sprintf("%s: %v", script, err)
		if ee, ok := err.(*exec.ExitError); ok {
			msg += "\n" + string(ee.Stderr)
		}
		if testenv.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return strings.TrimSpace(string(out))
}

func debianLayers(t *testing.T, dir string) []ports.FlattenLayer {
	base := debianBase(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The base is big: link it rather than copy it.
	p := filepath.Join(dir, "base.tar")
	if err := os.Link(base, p); err != nil {
		if err := copyFile(base, p); err != nil {
			t.Fatal(err)
		}
	}
	_, _, digest, err := layerDigests(ports.FlattenLayer{Path: p, MediaType: ft.MediaTar})
	if err != nil {
		t.Fatal(err)
	}
	capability := "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	overlay := writeEntries(t, dir, "overlay", true,
		ft.Dir("lib/x86_64-linux-gnu"),
		ft.Reg("lib/x86_64-linux-gnu/libcube.so.1", "\x7fELF libcube\n"),
		ft.Sym("lib/x86_64-linux-gnu/libcube.so", "libcube.so.1"),
		exe(ft.Reg("bin/cube-tool", "#!/bin/sh\necho cube\n")).With(ft.Xattrs("security.capability", capability, "user.origin", "overlay")),
		ft.Hard("sbin/cube-init", "bin/cube-tool"),
		ft.Hard("usr/bin/cube-tool2", "/bin/cube-tool"),
		ft.Dir("var/run/cube"),
		ft.Reg("var/run/cube/app.pid", "42\n"),
		ft.Reg("var/lock/cube.lock", ""),
		ft.Reg("var/spool/mail/root", "no mail\n"),
		ft.Whiteout("bin", "yes"),
		ft.Opaque("lib/terminfo/E"),
		ft.Reg("lib/terminfo/E/cube", "terminfo\n"),
		ft.Reg("etc/cube.conf", "key=value\n"),
	)
	return []ports.FlattenLayer{{Path: p, MediaType: ft.MediaTar, Digest: digest}, overlay}
}

func checkDebian(t *testing.T, want Tree) {
	for p, typ := range map[string]Type{
		"bin": TypeSymlink, "lib": TypeSymlink, "sbin": TypeSymlink, "var/run": TypeSymlink, "var/lock": TypeSymlink,
		"usr/lib/x86_64-linux-gnu/libcube.so.1": TypeReg, "usr/lib/x86_64-linux-gnu/libcube.so": TypeSymlink,
		"usr/bin/cube-tool": TypeReg, "usr/sbin/cube-init": TypeReg, "usr/bin/cube-tool2": TypeReg,
		"run/cube/app.pid": TypeReg, "run/lock/cube.lock": TypeReg, "var/mail/root": TypeReg,
		"usr/lib/terminfo/E/cube": TypeReg, "etc/cube.conf": TypeReg, "usr/bin/ls": TypeReg,
	} {
		if e := want[p]; e == nil || e.Type != typ {
			t.Errorf("%s: %+v, want a %s", p, e, typ)
		}
	}
	for _, p := range []string{"usr/bin/yes", "usr/lib/terminfo/E/Eterm"} {
		if want[p] != nil {
			t.Errorf("%s should be whited out", p)
		}
	}
	if links := want.links()["usr/bin/cube-tool"]; !slices.Equal(links, []string{"usr/bin/cube-tool2", "usr/sbin/cube-init"}) {
		t.Errorf("cube-tool hard links %q", links)
	}
}

func busyboxLayers(t *testing.T, dir string) []ports.FlattenLayer {
	es := []ft.Entry{ft.Dir("bin"), ft.Dir("sbin"), ft.Dir("usr"), ft.Dir("usr/bin"), ft.Dir("usr/sbin"),
		exe(ft.Reg("bin/busybox", string(randomBytes(256<<10, 5)))), ft.Sym("linuxrc", "bin/busybox")}
	dirs := []string{"bin", "sbin", "usr/bin", "usr/sbin"}
	for i := range 399 {
		es = append(es, ft.Hard(fmt.Sprintf("%s/applet%03d", dirs[i%4], i), "bin/busybox"))
	}
	upper := []ft.Entry{
		exe(ft.Reg("sbin/applet001", "#!/bin/sh\necho replaced\n")),
		ft.Hard("usr/bin/extra", "bin/busybox"),
		ft.Whiteout("usr/bin", "applet002"),
	}
	return []ports.FlattenLayer{writeEntries(t, dir, "farm", true, es...), writeEntries(t, dir, "upper", false, upper...)}
}

func checkBusybox(t *testing.T, want Tree) {
	if n := len(want.links()["bin/busybox"]); n != 398 {
		t.Errorf("bin/busybox has %d other names, want 398", n)
	}
}

func manyLayers(t *testing.T, dir string) []ports.FlattenLayer {
	var es []ft.Entry
	for d := range 105 {
		es = append(es, ft.Dir(fmt.Sprintf("d%03d", d)))
		for f := range 240 {
			e := ft.Reg(fmt.Sprintf("d%03d/f%05d", d, f), fmt.Sprintf("%d/%d\n", d, f))
			if f%1000 == 7 {
				e = e.With(ft.Xattrs("user.n", fmt.Sprint(f)))
			}
			es = append(es, e)
		}
	}
	upper := []ft.Entry{ft.Opaque("d007"), ft.Reg("d007/new", "new\n"), ft.Whiteout("d008", "f00010"), ft.Reg("d009/f00011", "changed\n")}
	return []ports.FlattenLayer{writeEntries(t, dir, "many", true, es...), writeEntries(t, dir, "upper", false, upper...)}
}

// sparseSource makes files with holes on the host, under dir/src/sparse.
func sparseSource(t *testing.T, dir string) string {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "sparse"), 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, size int64, marks ...int64) {
		f, err := os.Create(filepath.Join(src, "sparse", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, off := range marks {
			if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 4096), off); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
	}
	mk("big.img", 64<<20, 0, 32<<20, 64<<20-4096)
	mk("all-hole", 16<<20)
	mk("tail-only", 8<<20, 8<<20-4096)
	mk("dense", 1<<20, 0, 4096, 8192)
	filepath.Walk(src, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, ft.FixedTime, ft.FixedTime) })
	return src
}

// gnuTar packs dir/src/sparse with GNU tar and the given format options.
func gnuTar(t *testing.T, dir, name string, args ...string) ports.FlattenLayer {
	out := filepath.Join(dir, name)
	args = append(append([]string{"--sparse", "--numeric-owner"}, args...), "-C", filepath.Join(dir, "src"), "-cf", out, "sparse")
	if msg, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		t.Fatalf("tar %v: %v\n%s", args, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return writeBlob(t, dir, name, b, ft.MediaTar)
}

// sparseLayers has GNU tar pack files with holes as PAX sparse files
// (formats 1.0 and 0.1), and adds a hand-made PAX 1.0 sparse file.
func sparseLayers(t *testing.T, dir string) []ports.FlattenLayer {
	sparseSource(t, dir)
	pax := append(ft.SparseFile("sparse/pax.img", 32<<20, int64(0), "HEAD", int64(16<<20), "MIDDLE", int64(32<<20-4), "TAIL"), ft.EndOfArchive()...)
	return []ports.FlattenLayer{
		gnuTar(t, dir, "posix-1.0", "--format=posix", "--sparse-version=1.0"),
		gnuTar(t, dir, "posix-0.1", "--format=posix", "--sparse-version=0.1"),
		writeBlob(t, dir, "pax", pax, ft.MediaTar),
	}
}

// oldGNUSparseLayers is the GNU tar default: old GNU sparse headers
// (typeflag 'S').
func oldGNUSparseLayers(t *testing.T, dir string) []ports.FlattenLayer {
	sparseSource(t, dir)
	return []ports.FlattenLayer{gnuTar(t, dir, "gnu", "--format=gnu")}
}

// sparseAllocated bounds the sparse files: a few 4 KiB marks each, plus
// room for extent blocks.
var sparseAllocated = map[string]int64{"sparse/big.img": 64 << 10, "sparse/all-hole": 16 << 10, "sparse/tail-only": 16 << 10, "sparse/pax.img": 32 << 10}

func checkSparse(t *testing.T, want Tree) {
	for p, size := range map[string]int64{"sparse/big.img": 64 << 20, "sparse/all-hole": 16 << 20, "sparse/tail-only": 8 << 20, "sparse/dense": 1 << 20} {
		if e := want[p]; e == nil || e.Size != size {
			t.Errorf("%s: %+v, want %d bytes", p, e, size)
		}
	}
}

func oddNameLayers(t *testing.T, dir string) []ports.FlattenLayer {
	long := strings.Repeat("n", 255)
	longDir := "names/" + strings.Repeat("d", 255)
	es := []ft.Entry{
		ft.Dir("names"),
		ft.Reg("names/with space", "space\n"),
		ft.Reg("names/ leading and trailing ", "spaces\n"),
		ft.Reg("names/new\nline", "newline\n").With(ft.Xattrs("user.a", "1", "user.b", "2")),
		ft.Reg("names/trailing newline\n", "nl\n"),
		ft.Reg("names/tab\there", "tab\n"),
		ft.Reg("names/caf\xe9", "latin-1\n"),
		ft.Reg("names/\xff\xfe\x80", "invalid utf-8\n"),
		ft.Reg("names/caf\u00e9", "nfc\n"),
		ft.Reg("names/cafe\u0301", "nfd\n"),
		ft.Reg("names/日本語", "cjk\n"),
		ft.Reg("names/-dash", "dash\n"),
		ft.Reg("names/quote\"s'", "quotes\n"),
		ft.Reg(`names/back\slash`, "backslash\n"),
		ft.Reg("names/star*?[x]", "glob\n"),
		ft.Reg("names/"+long, "255 bytes\n"),
		ft.Dir(longDir),
		ft.Reg(longDir+"/"+strings.Repeat("f", 255), "255/255\n"),
		ft.Sym("names/link with space", "new\nline"),
		ft.Hard("names/hard\nlink", "names/new\nline"),
		ft.Fifo("names/fifo name"),
		ft.Dev("names/dev name", tar.TypeChar, 1, 3),
	}
	return []ports.FlattenLayer{writeEntries(t, dir, "names", false, es...)}
}

func dirToSymlinkLayers(t *testing.T, dir string) []ports.FlattenLayer {
	return []ports.FlattenLayer{
		writeEntries(t, dir, "l1", false, ft.Dir("srv"), ft.Dir("srv/data"), ft.Reg("srv/data/old", "old\n"),
			ft.Dir("srv/cache"), ft.Reg("srv/cache/stale", "stale\n"), ft.Dir("data"), ft.Reg("data/keep", "keep\n"), ft.Dir("var"), ft.Dir("var/cache")),
		writeEntries(t, dir, "l2", false, ft.Sym("srv/data", "/data"), ft.Sym("srv/cache", "../var/cache/srv")),
		writeEntries(t, dir, "l3", false, ft.Reg("srv/data/new.txt", "new\n"), ft.Dir("srv/data/sub"), ft.Reg("srv/data/sub/x", "x\n"),
			ft.Reg("srv/cache/c.bin", "cache\n")),
	}
}

func checkDirToSymlink(t *testing.T, want Tree) {
	for p, typ := range map[string]Type{
		"srv/data": TypeSymlink, "srv/cache": TypeSymlink, "data/keep": TypeReg, "data/new.txt": TypeReg,
		"data/sub": TypeDir, "data/sub/x": TypeReg, "var/cache/srv/c.bin": TypeReg,
	} {
		if e := want[p]; e == nil || e.Type != typ {
			t.Errorf("%s: %+v, want a %s", p, e, typ)
		}
	}
	for _, p := range []string{"srv/data/old", "srv/cache/stale"} {
		if want[p] != nil {
			t.Errorf("%s survived its directory's replacement", p)
		}
	}
}
