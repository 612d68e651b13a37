package mkfs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func TestParseDumpe2fs(t *testing.T) {
	out, err := os.ReadFile("testdata/dumpe2fs.txt")
	if err != nil {
		t.Fatal(err)
	}
	info, err := parseDumpe2fs(out, true)
	if err != nil {
		t.Fatal(err)
	}
	got := []int64{info.blockSize, info.blockCount, info.inodeCount, info.freeInodes, info.inodesPerGroup}
	if want := []int64{4096, 76800, 40032, 37018, 13344}; !slices.Equal(got, want) {
		t.Errorf("parsed %v, want %v", got, want)
	}
	if !slices.Equal(info.usedInodes, []span{{1, 3014}}) {
		t.Errorf("used inodes %v, want [{1 3014}]", info.usedInodes)
	}
	if !slices.Contains(info.features, "metadata_csum") || slices.Contains(info.features, "has_journal") {
		t.Errorf("features %v", info.features)
	}
	if _, err := parseDumpe2fs([]byte("Block size: 4096\n"), false); err == nil {
		t.Error("incomplete output accepted")
	}
}

func TestComplement(t *testing.T) {
	cases := []struct {
		free []span
		want []span
	}{
		{nil, []span{{1, 100}}},
		{[]span{{1, 100}}, nil},
		{[]span{{12, 20}, {50, 100}}, []span{{1, 11}, {21, 49}}},
		{[]span{{50, 100}, {12, 20}}, []span{{1, 11}, {21, 49}}},
		{[]span{{12, 20}, {15, 30}}, []span{{1, 11}, {31, 100}}},
	}
	for _, c := range cases {
		if got := complement(slices.Clone(c.free), 1, 100); !slices.Equal(got, c.want) {
			t.Errorf("complement(%v) = %v, want %v", c.free, got, c.want)
		}
	}
}

func TestParseSpans(t *testing.T) {
	got, err := parseSpans(" 12-2512, 2600, 2700-2800")
	if err != nil || !slices.Equal(got, []span{{12, 2512}, {2600, 2600}, {2700, 2800}}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"x", "5-1", "1-"} {
		if _, err := parseSpans(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseLs(t *testing.T) {
	out := "/12/040755/0/0/.//\n/2/040755/0/0/..//\n/0/000000/0/0//0/\n/13/100644/5/6/new\nline/3/\n/14/120777/0/0/a b\"c/5/\n\n"
	got, err := parseLs([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"new\nline": 13, `a b"c`: 14}
	if len(got) != len(want) || got["new\nline"] != 13 || got[`a b"c`] != 14 {
		t.Errorf("parseLs = %v, want %v", got, want)
	}
	if _, err := parseLs([]byte("garbage\n")); err == nil {
		t.Error("garbage accepted")
	}
}

func TestEncodeDev(t *testing.T) {
	cases := []struct{ major, minor, b0, b1 int64 }{
		{1, 3, 0x103, 0},
		{8, 0, 0x800, 0},
		{255, 255, 0xffff, 0},
		{256, 0, 0, 0x10000},
		{300, 70000, 0, 70000&0xff | 300<<8 | (70000&^0xff)<<12},
		{4095, 1<<20 - 1, 0, 0xff | 4095<<8 | (1<<20-1)&^0xff<<12},
	}
	for _, c := range cases {
		if b0, b1 := encodeDev(c.major, c.minor); b0 != c.b0 || b1 != c.b1 {
			t.Errorf("encodeDev(%d, %d) = %#x, %#x, want %#x, %#x", c.major, c.minor, b0, b1, c.b0, c.b1)
		}
	}
}

func TestDebugfsQuote(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:      `"plain"`,
		`with space`: `"with space"`,
		`q"uote`:     `"q""uote"`,
		`<12>`:       `"<12>"`,
	} {
		if got := debugfsQuote(in); got != want {
			t.Errorf("debugfsQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestUnscriptable(t *testing.T) {
	for _, c := range []struct {
		in, why string
	}{
		{"plain", ""},
		{`q"uote and space`, ""},
		{"tab\tand\x7f are quoted", ""},
		{"utf-8 \u00e9", ""},
		{"user.x\ndump -p /payload /tmp/x", "holds a newline"},
		{"\n", "holds a newline"},
		{"user.x\r", "holds a carriage return"},
		{"a\x00b", "holds a NUL byte"},
		{"\r\n", "holds a carriage return"},
	} {
		if got := unscriptable(c.in); got != c.why {
			t.Errorf("unscriptable(%q) = %q, want %q", c.in, got, c.why)
		}
	}
}

// TestFixupScriptRefusesWhatDebugfsCannotRead: a string debugfs would
// read as more than one argument, or a line longer than it reads as one,
// fails the script (naming the entry) instead of reaching debugfs; names
// of entries that are only named by inode pass, however odd.
func TestFixupScriptRefusesWhatDebugfsCannotRead(t *testing.T) {
	when := time.Unix(1_700_000_000, 0)
	device := func(name string, kv ...string) *tar.Header {
		h := &tar.Header{Typeflag: tar.TypeChar, Name: name, Mode: 0o600, Devmajor: 1, Devminor: 3, ModTime: when, PAXRecords: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.PAXRecords["SCHILY.xattr."+kv[i]] = kv[i+1]
		}
		return h
	}
	// staged makes one staged file named name with the given xattrs.
	staged := func(t *testing.T, stage, name string, names ...string) {
		p := filepath.Join(stage, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := unix.Lsetxattr(p, n, []byte("v"), 0); err != nil {
				t.Skipf("cannot set xattr %q in %s: %v", n, stage, err)
			}
		}
	}
	var many []string
	for i := range 12 {
		many = append(many, fmt.Sprintf("user.%02d-%s", i, strings.Repeat("n", 100)))
	}
	cases := []struct {
		name    string
		devices []*tar.Header
		multi   func(t *testing.T, stage string) string // stages one entry, returns its name
		wantErr string                                  // "" means the script is made
	}{
		{name: "device xattr with a newline", devices: []*tar.Header{device("dev/null", "security.x\ndump -p /payload /tmp/x\n", "v")},
			wantErr: `entry "dev/null": "security.x\ndump -p /payload /tmp/x\n" holds a newline`},
		{name: "device xattr with a carriage return", devices: []*tar.Header{device("dev/null", "security.x\r", "v")},
			wantErr: "holds a carriage return"},
		{name: "device name with a newline", devices: []*tar.Header{device("dev/a\n!touch /tmp/x")}, wantErr: "holds a newline"},
		{name: "device directory with a NUL", devices: []*tar.Header{device("d\x00/null")}, wantErr: "holds a NUL byte"},
		// Doubled quotes make the line longer than the path.
		{name: "device path longer than a line", devices: []*tar.Header{device(strings.Repeat(strings.Repeat(`"`, 200)+"/", 3) + "null")},
			wantErr: "more than the 1022 debugfs reads as one line"},
		{name: "second xattr with a newline", multi: func(t *testing.T, stage string) string {
			staged(t, stage, "f", "user.a", "user.x\n!touch /tmp/x")
			return "f"
		}, wantErr: `entry "f": "user.x\n!touch /tmp/x" holds a newline`},
		{name: "newline in a name debugfs never sees", multi: func(t *testing.T, stage string) string {
			staged(t, stage, "new\nline", "user.a", "user.b")
			return "new\nline"
		}},
		{name: "many long xattr names", multi: func(t *testing.T, stage string) string {
			staged(t, stage, "f", many...)
			return "f"
		}},
		{name: "ordinary device", devices: []*tar.Header{device("dev/null", "security.x", "v", "user.y", "w")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stage, work := t.TempDir(), t.TempDir()
			tree := &treeInfo{rootMode: 0o755, devices: c.devices}
			inos := map[string]uint64{}
			if c.multi != nil {
				rel := c.multi(t, stage)
				tree.multiXattr = []string{rel}
				inos[rel] = 12
			}
			script, err := fixupScript(tree, &fsInfo{}, when.Unix(), work, stage, inos)
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, core.ErrUnsupported) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want ErrUnsupported with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(strings.TrimSuffix(script, "\n"), "\n") {
				if len(l) > maxScriptLine || strings.ContainsAny(l, "\r\x00") {
					t.Errorf("line debugfs cannot read as one: %q", clip(l))
				}
			}
		})
	}
}

func TestSizingRules(t *testing.T) {
	if got := dirBlocks(recLen(1) + recLen(2)); got != 1 {
		t.Errorf("empty dir: %d blocks", got)
	}
	// 3000 names of 9 bytes: 20 bytes each, 60000 bytes: 16 blocks when
	// packed, the bound may not be below that.
	if got := dirBlocks(24 + 3000*recLen(9)); got < 15 || got > 20 {
		t.Errorf("3000 entries: %d blocks", got)
	}
	if got := extentBlocks(1, 5000); got != 0 {
		t.Errorf("contiguous 20 MiB file: %d extent blocks", got)
	}
	if got := extentBlocks(3, 3); got != 0 {
		t.Errorf("three runs: %d extent blocks", got)
	}
	if got := extentBlocks(1000, 2000); got != 3 {
		t.Errorf("1000 runs: %d extent blocks, want 3", got)
	}
	if recLen(1) != 12 || recLen(4) != 12 || recLen(5) != 16 || recLen(255) != 264 {
		t.Error("recLen does not pad to 4 bytes")
	}
}

func TestScanZeros(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	const mib = 1 << 20
	content := make([]byte, 4*mib+100)
	copy(content, "head")                  // block 0
	copy(content[2*mib+4096*3:], "middle") // one block in the middle
	copy(content[4*mib+10:], "tail")       // partial last block
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := scanZeros(p, make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if blocks != 3 {
		t.Errorf("scanZeros = %d blocks, want 3", blocks)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("scanZeros changed the content (err %v)", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > mib {
		t.Logf("zero runs were not punched (%d bytes allocated); the filesystem may not support it", st.Blocks*512)
	}
}

// TestRetryWhenFull makes the first estimate half the truth, so mke2fs
// runs out of blocks and inodes; the build must grow and succeed, or fail
// with a clear error when the cap forbids growing.
func TestRetryWhenFull(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "tune2fs", "debugfs", "e2fsck", "dumpe2fs"} {
		testenv.Tool(t, tool)
	}
	stage := t.TempDir()
	for i := range 300 {
		name := filepath.Join(stage, "f"+strings.Repeat("x", i%40)+string(rune('a'+i%26))+time.Duration(i).String())
		if err := os.WriteFile(name, bytes.Repeat([]byte{byte(i + 1)}, 12<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := New(Options{})
	tl, err := b.lookTools()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	conf, err := writeConfs(work)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Unix(1_700_000_000, 0)
	// Devices are added by debugfs after mke2fs, so they run out of
	// inodes there, in the fixup pass.
	var devs []*tar.Header
	for i := range 200 {
		devs = append(devs, &tar.Header{Typeflag: tar.TypeChar, Name: fmt.Sprintf("dev%03d", i), Mode: 0o600, Devmajor: 1, Devminor: int64(i), ModTime: when})
	}
	newJob := func(out string, max int64) *job {
		return &job{
			r:    &runner{tools: tl, env: childEnv(conf, when)},
			spec: ports.BuildSpec{OutPath: out, UUID: "6f1c0b52-3b7e-4c1a-9d7e-2f5a8c9e0b11", Time: when, MaxSizeBytes: max},
			// Claims half the blocks and inodes the staged tree needs.
			tree:  &treeInfo{rootMode: 0o755, dataBlocks: 450, inodeCount: 150, devices: devs},
			work:  work,
			stage: stage,
			uuid:  "6f1c0b52-3b7e-4c1a-9d7e-2f5a8c9e0b11",
		}
	}

	out := filepath.Join(t.TempDir(), "img")
	j := newJob(out, 0)
	size, _, err := j.build(context.Background())
	if err != nil {
		t.Fatalf("build with a tiny estimate: %v", err)
	}
	if j.formats < 3 {
		t.Errorf("%d formats; mke2fs and then debugfs should have run out first", j.formats)
	}
	if out, err := exec.Command("debugfs", "-R", "stat /dev199", out).Output(); err != nil || !bytes.Contains(out, []byte("character special")) {
		t.Errorf("dev199 not in the image: %v", err)
	}
	t.Logf("%d formats, %d bytes", j.formats, size)
	if fi, err := os.Stat(out); err != nil || fi.Size() != size || size%(2<<20) != 0 {
		t.Fatalf("image: %v, size %d", err, size)
	}

	out = filepath.Join(t.TempDir(), "img")
	_, _, err = newJob(out, 2<<20).build(context.Background())
	if err == nil || !strings.Contains(err.Error(), "MaxSizeBytes") {
		t.Fatalf("err = %v, want the size cap named", err)
	}
	if left, _ := os.ReadDir(filepath.Dir(out)); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// manyPieces is a size of several copy pieces.
const manyPieces = 8 * copyPiece

// TestCopyHashing: the copy out of the work directory keeps every byte
// and the length, leaves zero pieces as holes, and hashes the source,
// across several ranges and with a tail that is not a whole piece (it
// takes the page-cache path).
func TestCopyHashing(t *testing.T) {
	tests := []struct {
		name string
		size int64
		zero []int // pieces left all zero
	}{
		{name: "one piece", size: 64 << 10},
		{name: "many pieces, holes, short tail", size: 2*manyPieces + 3*copyPiece + 12345, zero: []int{1, 8, 9, 17}},
		{name: "all zero", size: manyPieces + copyPiece, zero: []int{0, 1, 2, 3, 4, 5, 6, 7, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			want := make([]byte, tt.size)
			for i := range want {
				if !slices.Contains(tt.zero, i/copyPiece) {
					want[i] = byte(i*7 + i/4096)
				}
			}
			srcPath := filepath.Join(dir, "src")
			if err := os.WriteFile(srcPath, want, 0o600); err != nil {
				t.Fatal(err)
			}
			src, err := os.Open(srcPath)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			sum, dst := copyTo(t, src, dir)
			checkCopy(t, sum, dst, want)
			var st unix.Stat_t
			if err := unix.Stat(dst, &st); err != nil {
				t.Fatal(err)
			}
			if allocated, most := st.Blocks*512, tt.size-int64(len(tt.zero))*copyPiece+copyPiece; allocated > most {
				t.Errorf("copy allocates %d bytes, more than its %d non-zero ones: zero pieces were written", allocated, most)
			}
		})
	}
}

// TestCopyHashingSparseTmpfs: the image mke2fs leaves in a tmpfs work
// directory is mostly holes; copying it out must skip them, not read
// gigabytes of zeros (nor, were the image mapped, make tmpfs allocate
// them: a read fault on a mapped tmpfs hole does). The copy still holds
// every byte and the sha256 is the source's.
func TestCopyHashingSparseTmpfs(t *testing.T) {
	if !onTmpfs("/dev/shm") {
		t.Skip("/dev/shm is not a tmpfs")
	}
	const page = 4096
	tests := []struct {
		name string
		size int64
		data [][2]int64 // written ranges [from, to); the rest stays a hole
	}{
		{name: "all hole", size: manyPieces + copyPiece + 123},
		{name: "data at both ends", size: 3 * manyPieces,
			data: [][2]int64{{0, 3 * page}, {3*manyPieces - 5*page, 3 * manyPieces}}},
		{name: "data off piece boundaries, short tail", size: 2*manyPieces + 12345,
			data: [][2]int64{{copyPiece + 7*page, 3*copyPiece + 100}, {manyPieces - page, manyPieces + page}, {2*manyPieces + 4000, 2*manyPieces + 12345}}},
		{name: "written zeros between holes", size: manyPieces,
			data: [][2]int64{{copyPiece, 2 * copyPiece}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("/dev/shm", "copyhashing-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			want := make([]byte, tt.size)
			src, err := os.Create(filepath.Join(dir, "src"))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if err := src.Truncate(tt.size); err != nil {
				t.Fatal(err)
			}
			for i, r := range tt.data {
				for o := r[0]; o < r[1]; o++ {
					if tt.name != "written zeros between holes" {
						want[o] = byte(o*7 + o/4096 + int64(i) + 1)
					}
				}
				if _, err := src.WriteAt(want[r[0]:r[1]], r[0]); err != nil {
					t.Fatal(err)
				}
			}
			allocated := func(f *os.File) int64 {
				var st unix.Stat_t
				if err := unix.Fstat(int(f.Fd()), &st); err != nil {
					t.Fatal(err)
				}
				return st.Blocks * 512
			}
			before := allocated(src)
			sum, dst := copyTo(t, src, t.TempDir())
			if after := allocated(src); after != before {
				t.Errorf("the tmpfs source holds %d bytes after the copy, %d before: its holes were filled", after, before)
			}
			checkCopy(t, sum, dst, want)
		})
	}
}

// TestCopyHashingCanceled: a build canceled once the copy is under way
// does not go on hashing the zeros of a long hole (an image's headroom
// may be gigabytes).
func TestCopyHashingCanceled(t *testing.T) {
	if !onTmpfs("/dev/shm") {
		t.Skip("/dev/shm is not a tmpfs")
	}
	const hole = 16 << 30 // seconds of hashing
	for _, tt := range []struct {
		name string
		data int64 // bytes written after the hole
	}{
		{name: "only a hole"},
		{name: "a hole, then data", data: copyPiece},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("/dev/shm", "copyhashing-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			src, err := os.Create(filepath.Join(dir, "src"))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if _, err := src.WriteAt(bytes.Repeat([]byte{1}, int(tt.data)), hole); err != nil {
				t.Fatal(err)
			}
			if err := src.Truncate(hole + tt.data); err != nil {
				t.Fatal(err)
			}
			dst, err := os.Create(filepath.Join(t.TempDir(), "dst"))
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			ctx := &canceledAfter{Context: context.Background(), checks: 1}
			if _, err := copyHashing(ctx, dst, src); !errors.Is(err, context.Canceled) {
				t.Fatalf("copyHashing = %v, want context.Canceled", err)
			}
		})
	}
}

// canceledAfter is a context that reports itself canceled from its
// checks+1st Err on: canceled at a set point of the work.
type canceledAfter struct {
	context.Context
	checks int
	n      int
}

func (c *canceledAfter) Err() error {
	if c.n++; c.n > c.checks {
		return context.Canceled
	}
	return nil
}

// checkCopy: the copy at dst holds want and sum is want's sha256.
func checkCopy(t *testing.T, sum, dst string, want []byte) {
	t.Helper()
	if h := sha256.Sum256(want); sum != hex.EncodeToString(h[:]) {
		t.Errorf("sha256 %s, want the source's %x", sum, h)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("copy holds %d bytes, not the %d of the source", len(got), len(want))
	}
}

// copyTo copies src with copyHashing into a new file dst under dir.
func copyTo(t *testing.T, src *os.File, dir string) (sum, dst string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err = copyHashing(context.Background(), f, src)
	if err != nil {
		t.Fatalf("copyHashing: %v", err)
	}
	return sum, f.Name()
}
