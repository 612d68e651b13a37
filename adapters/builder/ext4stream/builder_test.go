package ext4stream

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const testUUID = "6f1c2a8e-3d4b-4c5d-9e6f-0a1b2c3d4e5f"

var buildTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// capV2 is a security.capability value (v2, cap_net_raw).
const capV2 = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

var (
	future = time.Date(2040, 3, 4, 5, 6, 7, 0, time.UTC)
	past   = time.Date(1960, 3, 4, 5, 6, 7, 0, time.UTC)
)

// richTree exercises what tar2ext4 gets wrong or might: xattrs spilling
// into a block, xattrs on directories, long symlinks, hard links, devices,
// FIFOs, setuid, large ids, times past 2038 and before 1970, many entries.
func richTree(t testing.TB) []byte {
	es := []entry{
		dir(".", 0o755),
		dir("bin", 0o755),
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "bin/ping", Mode: 0o4755, Uid: 70000, Gid: 70001,
			PAXRecords: map[string]string{
				"SCHILY.xattr.security.capability": capV2,
				"SCHILY.xattr.user.zz":             strings.Repeat("q", 40),
				"SCHILY.xattr.trusted.a":           strings.Repeat("r", 40),
				"SCHILY.xattr.user.a":              strings.Repeat("s", 40),
				"SCHILY.xattr.security.b":          strings.Repeat("t", 40),
			}}, Body: "\x7fELF"},
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "etc", Mode: 0o755,
			PAXRecords: map[string]string{"SCHILY.xattr.user.dirattr": "v"}}},
		file("etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\n"),
		{Header: tar.Header{Typeflag: tar.TypeLink, Name: "etc/passwd-link", Linkname: "etc/passwd"}},
		{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/long", Linkname: strings.Repeat("a/", 100) + "x"}},
		{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/short", Linkname: "passwd"}},
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "etc/future", Mode: 0o644, ModTime: future}},
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "etc/past", Mode: 0o644, ModTime: past}},
		dir("dev", 0o755),
		{Header: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}},
		{Header: tar.Header{Typeflag: tar.TypeBlock, Name: "dev/loop9", Mode: 0o660, Devmajor: 7, Devminor: 300}},
		{Header: tar.Header{Typeflag: tar.TypeFifo, Name: "dev/fifo", Mode: 0o600}},
		dir("tmp", 0o1777),
		file("big", 0o644, strings.Repeat("0123456789abcdef", 300_000)), // 4.8 MB, several extents' worth
		dir("many", 0o755),
	}
	for i := range 2000 {
		es = append(es, file(fmt.Sprintf("many/file-with-a-longish-name-%05d", i), 0o644, "x"))
	}
	return tarOf(t, es...)
}

func build(t testing.TB, tree []byte, mutate ...func(*ports.BuildSpec)) (string, ports.BuildResult, error) {
	t.Helper()
	return buildEntries(t, entriesOf(t, tree, false), mutate...)
}

func sha(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func TestBuildIsFsckCleanAndAligned(t *testing.T) {
	img, res, err := build(t, richTree(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != res.SizeBytes || st.Size()%Alignment != 0 {
		t.Errorf("size %d, result %d: want equal and a multiple of 2 MiB", st.Size(), res.SizeBytes)
	}
	if rc, out := fsck(t, img); rc != 0 {
		t.Fatalf("e2fsck -fn exit %d:\n%s", rc, out)
	}
	noLeftovers(t, filepath.Dir(img), img)
	sb := debugfs(t, img, "stats")
	mustContain(t, "superblock", sb,
		"Filesystem UUID:          "+testUUID,
		"Block size:               4096",
		"Filesystem created:       Thu Jan  2 03:04:05 2025",
		"Directory Hash Seed:      "+testUUID,
	)
}

func TestBuildFidelity(t *testing.T) {
	img, _, err := build(t, richTree(t))
	if err != nil {
		t.Fatal(err)
	}
	ping := debugfs(t, img, "stat bin/ping")
	mustContain(t, "bin/ping", ping, "Mode:  04755", "User: 70000   Group: 70001", "Size: 4",
		"security.capability (20)", "user.a (40)", "user.zz (40)", "trusted.a (40)", "security.b (40)",
		" ctime: 0x67760225:00000000", " atime: 0x67760225:00000000") // buildTime: no atime/ctime in the tar
	mustContain(t, "etc", debugfs(t, img, "stat etc"), "user.dirattr (1) = \"v\"")
	mustContain(t, "hard link", debugfs(t, img, "stat etc/passwd"), "Links: 2")
	mustContain(t, "long symlink", debugfs(t, img, "stat etc/long"), "Type: symlink", "Size: 201")
	mustContain(t, "char dev", debugfs(t, img, "stat dev/null"), "Type: character special", "Device major/minor number: 01:03")
	mustContain(t, "block dev", debugfs(t, img, "stat dev/loop9"), "Type: block special", "Device major/minor number: 07:300")
	mustContain(t, "fifo", debugfs(t, img, "stat dev/fifo"), "Type: FIFO")
	mustContain(t, "sticky", debugfs(t, img, "stat tmp"), "Mode:  01777")
	mustContain(t, "future", debugfs(t, img, "stat etc/future"), "mtime: 0x83fdd4bf:00000001")     // 2040: epoch bit 1
	mustContain(t, "past", debugfs(t, img, "stat etc/past"), "mtime: 0xed835ebf:00000000")         // 1960: negative, epoch 0
	mustContain(t, "root", debugfs(t, img, "stat /"), "mtime: 0x663881d9:1d6f3454", "Mode:  0755") // from the tree
	mustContain(t, "lost+found", debugfs(t, img, "stat lost+found"), "ctime: 0x67760225:00000000")
	mustContain(t, "lost+found", debugfs(t, img, "stat lost+found"), "mtime: 0x67760225", "Mode:  0700")
	mustContain(t, "big", debugfs(t, img, "stat big"), "Size: 4800000")
	if got := debugfs(t, img, "cat etc/passwd"); !strings.Contains(got, "root:x:0:0:root:/root:/bin/sh") {
		t.Errorf("etc/passwd content: %q", got)
	}
	if n := strings.Count(debugfs(t, img, "ls -l many"), "file-with-a-longish-name-"); n != 2000 {
		t.Errorf("many/ lists %d entries, want 2000", n)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	tree := richTree(t)
	a, _, err := build(t, tree)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := build(t, tree)
	if err != nil {
		t.Fatal(err)
	}
	if sha(t, a) != sha(t, b) {
		t.Fatal("two builds of the same tree and spec differ")
	}
	c, _, err := build(t, tree, func(s *ports.BuildSpec) { s.UUID = "00000000-0000-4000-8000-000000000001" })
	if err != nil {
		t.Fatal(err)
	}
	if sha(t, a) == sha(t, c) {
		t.Fatal("a different UUID gave the same bytes")
	}
}

// A cap the image fits under must not change its bytes (up to
// DefaultMaxSize; larger caps make tar2ext4 reserve more descriptor blocks).
func TestMaxSizeDoesNotChangeBytes(t *testing.T) {
	tree := richTree(t)
	a, res, err := build(t, tree)
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{res.SizeBytes, res.SizeBytes + 1, DefaultMaxSize} {
		b, _, err := build(t, tree, func(s *ports.BuildSpec) { s.MaxSizeBytes = limit })
		if err != nil {
			t.Fatalf("cap %d: %v", limit, err)
		}
		if sha(t, a) != sha(t, b) {
			t.Errorf("cap %d changed the image", limit)
		}
	}
	if _, _, err := build(t, tree, func(s *ports.BuildSpec) { s.MaxSizeBytes = res.SizeBytes - 1 }); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("cap one byte below the size: err = %v, want ErrInvalidArgument", err)
	}
}

func TestBuildErrors(t *testing.T) {
	ok := tarOf(t, dir("etc", 0o755), file("etc/a", 0o644, "a"))
	// The tree's inodes and the headroom, each allowed, round to more than
	// a 32-bit inode count.
	var many []entry
	for i := range 40_000 {
		many = append(many, file(fmt.Sprintf("f%05d", i), 0o644, ""))
	}
	// A header announcing a file over the builder's maximum; it is refused
	// before any content is read.
	huge := func(t *testing.T) ports.TreeSlice {
		f, err := os.Create(filepath.Join(t.TempDir(), "content"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return ports.TreeSlice{{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "huge", Mode: 0o644, Size: 2 << 40}, File: f}}
	}
	tests := []struct {
		name    string
		tree    []byte
		mutate  func(*ports.BuildSpec)
		want    error
		msg     string
		entries func(*testing.T) ports.TreeSlice // instead of tree
	}{
		{"headroom over the cap", ok, func(s *ports.BuildSpec) { s.HeadroomBytes, s.MaxSizeBytes = 8<<20, 8<<20 }, core.ErrInvalidArgument, "exceeds MaxSizeBytes", nil},
		{"absurd headroom inodes", ok, func(s *ports.BuildSpec) { s.HeadroomInodes = 1 << 40 }, core.ErrInvalidArgument, "HeadroomInodes", nil},
		{"negative headroom", ok, func(s *ports.BuildSpec) { s.HeadroomBytes = -1 }, core.ErrInvalidArgument, "Headroom", nil},
		{"headroom over the largest image", ok, func(s *ports.BuildSpec) { s.HeadroomBytes = math.MaxInt64 }, core.ErrInvalidArgument, "HeadroomBytes", nil},
		{"more inode groups than descriptors reserved", ok, func(s *ports.BuildSpec) { s.HeadroomInodes = 34_000_000 }, core.ErrUnsupported, "HeadroomInodes", nil},
		{"bad uuid", ok, func(s *ports.BuildSpec) { s.UUID = "nope" }, core.ErrInvalidArgument, "UUID", nil},
		{"cap below 2 MiB", ok, func(s *ports.BuildSpec) { s.MaxSizeBytes = 1 << 20 }, core.ErrInvalidArgument, "MaxSizeBytes", nil},
		{"too large", tarOf(t, file("big", 0o644, strings.Repeat("x", 3<<20))),
			func(s *ports.BuildSpec) { s.MaxSizeBytes = 2 << 20 }, core.ErrInvalidArgument, "exceeds MaxSizeBytes", nil},
		{"absolute name", tarOf(t, file("/etc", 0o644, "")), nil, core.ErrInvalidArgument, `"/etc" rejected: absolute-name`, nil},
		{"dotdot", tarOf(t, file("a/../../b", 0o644, "")), nil, core.ErrInvalidArgument, "rejected: path-traversal", nil},
		{"duplicate", tarOf(t, file("a", 0o644, ""), file("a", 0o644, "")), nil, core.ErrInvalidArgument, "rejected: duplicate-entry", nil},
		{"file under file", tarOf(t, file("a", 0o644, ""), file("a/b", 0o644, "")), nil, core.ErrInvalidArgument, "rejected: parent-not-dir", nil},
		{"dangling hard link", tarOf(t, entry{Header: tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "nope"}}),
			nil, core.ErrInvalidArgument, "rejected: hardlink-target-missing", nil},
		{"hard link to dir", tarOf(t, dir("d", 0o755), entry{Header: tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "d"}}),
			nil, core.ErrInvalidArgument, "rejected: hardlink-target-dir", nil},
		{"root not a dir", tarOf(t, file("lost+found", 0o644, "")), nil, core.ErrInvalidArgument, "rejected: reserved-name", nil},
		{"xattrs too big", tarOf(t, entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: "x", Mode: 0o644,
			PAXRecords: map[string]string{"SCHILY.xattr.user.big": strings.Repeat("v", 5000)}}}),
			nil, core.ErrUnsupported, "more than one 4096-byte block", nil},
		{"inode count over 32 bits", tarOf(t, many...),
			func(s *ports.BuildSpec) { s.HeadroomInodes, s.MaxSizeBytes = maxInodes, MaxSize }, core.ErrInvalidArgument, "HeadroomInodes", nil},
		{"file over 1 TiB", nil, nil, core.ErrUnsupported, `"huge"`, huge},
		{"content without a file", nil, nil, core.ErrInvalidArgument, "no file", func(*testing.T) ports.TreeSlice {
			return ports.TreeSlice{{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, Size: 10}}}
		}},
		{"entry without a header", nil, nil, core.ErrInvalidArgument, "no header", func(*testing.T) ports.TreeSlice {
			return ports.TreeSlice{{}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m []func(*ports.BuildSpec)
			if tt.mutate != nil {
				m = append(m, tt.mutate)
			}
			es := entriesOf(t, tt.tree, false)
			if tt.entries != nil {
				es = tt.entries(t)
			}
			out, _, err := buildEntries(t, es, m...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want class %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %q, want it to mention %q", err, tt.msg)
			}
			noLeftovers(t, filepath.Dir(out))
		})
	}
}

// TestInodeHeavyImagesAreFsckClean: an image with many inodes for its
// blocks gets small groups, each still spanning its inode table and four
// blocks more, as e2fsck requires.
func TestInodeHeavyImagesAreFsckClean(t *testing.T) {
	for _, inodes := range []int64{400_000, 3_271_989} {
		t.Run(fmt.Sprint(inodes), func(t *testing.T) {
			img, _, err := build(t, tarOf(t), func(s *ports.BuildSpec) { s.HeadroomInodes = inodes })
			if err != nil {
				t.Fatal(err)
			}
			if rc, out := fsck(t, img); rc != 0 {
				t.Fatalf("e2fsck -fn exit %d:\n%s", rc, out)
			}
		})
	}
}

// TestLayoutGeometry holds layout to what e2fsck checks in a superblock,
// over a grid of used blocks and inode counts.
func TestLayoutGeometry(t *testing.T) {
	// Dense where groups shrink for inodes (about 300k-5M inodes with few
	// blocks), sparse elsewhere.
	next := func(n int64) int64 {
		if n >= 300_000 && n < 5_000_000 {
			return n + 1009
		}
		return n*5/4 + 7
	}
	for _, used := range []int64{1, 100, 600, 5000, 40_000, 300_000} {
		for inodes := int64(11); inodes < 20_000_000; inodes = next(inodes) {
			g := layout(used, inodes, 0)
			bad := func(what string) {
				t.Helper()
				t.Fatalf("layout(%d, %d, 0) = %+v: %s", used, inodes, g, what)
			}
			switch {
			case g.blocks%alignBlocks != 0:
				bad("size not 2 MiB aligned")
			case g.blocksPerGroup > blocksPerGroup || g.blocksPerGroup%alignBlocks != 0:
				bad("blocks per group not a multiple of 512 up to 32768")
			case g.inodesPerGroup > blockSize*8 || g.inodesPerGroup%inodesPerBlock != 0:
				bad("inodes per group not whole blocks up to a bitmap's worth")
			case g.inodesPerGroup > inodesPerBlock*(g.blocksPerGroup-4):
				bad("a group smaller than its inode table and four blocks")
			case g.groups*g.inodesPerGroup < inodes:
				bad("fewer inodes than asked")
			case (g.groups-1)*g.blocksPerGroup >= g.blocks || g.groups*g.blocksPerGroup < g.blocks:
				bad("group count does not match the blocks")
			case g.blocks < used+g.groups*g.inodesPerGroup/inodesPerBlock+2*g.groups:
				bad("no room for the metadata")
			}
		}
	}
}

func TestBuildCancelRemovesTemp(t *testing.T) {
	es := entriesOf(t, richTree(t), false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	if _, err := New().Build(ctx, ports.BuildSpec{OutPath: out, UUID: testUUID, Time: buildTime}, es); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	noLeftovers(t, filepath.Dir(out))
}

func TestBuildEmptyTree(t *testing.T) {
	for _, when := range []time.Time{buildTime, {}} {
		img, res, err := build(t, tarOf(t), func(s *ports.BuildSpec) { s.Time, s.UUID = when, "" })
		if err != nil {
			t.Fatal(err)
		}
		if res.SizeBytes != Alignment {
			t.Errorf("empty tree: %d bytes, want %d", res.SizeBytes, Alignment)
		}
		if rc, out := fsck(t, img); rc != 0 {
			t.Fatalf("time %v: e2fsck -fn exit %d:\n%s", when, rc, out)
		}
	}
}
