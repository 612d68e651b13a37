package mkfs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/builder/mkfs"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// needRoot skips when the builder cannot run: it stages with real owners.
func needRoot(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "tune2fs", "debugfs", "e2fsck", "dumpe2fs"} {
		testenv.Tool(t, tool)
	}
	testenv.Root(t, "the mkfs builder stages trees with their owners")
}

// harness makes mkfs builders with a private work directory per subtest,
// fed by the layers flattener.
type harness struct{ work string }

func (h harness) MakeBuilder(context.Context) (ports.RootfsBuilder, error) {
	return mkfs.New(mkfs.Options{WorkDir: h.work}), nil
}

func (harness) MakeFlattener(context.Context) (ports.TreeFlattener, error) {
	return layers.Flattener{}, nil
}

func (harness) MakeLimitedFlattener(_ context.Context, l flattenertest.Limits) (ports.TreeFlattener, error) {
	return layers.Flattener{Limits: layers.Limits{MaxEntries: l.MaxEntries, MaxTotalBytes: l.MaxTotalBytes,
		MaxFileBytes: l.MaxFileBytes, MaxPathDepth: l.MaxPathDepth, MaxXattrBytes: l.MaxXattrBytes}}, nil
}

func (harness) Capabilities() buildertest.Capabilities {
	return buildertest.Capabilities{Headroom: true, SparseFiles: true}
}

func (harness) Close() {}

func newHarness(_ context.Context, t *testing.T) (buildertest.Harness, error) {
	return harness{work: t.TempDir()}, nil
}

func TestConformance(t *testing.T) {
	needRoot(t)
	buildertest.RunConformanceTests(t, newHarness)
}

// TestConformanceTmpfsWorkDir runs the suite with the work directory on
// tmpfs, where the image is made in the work directory and copied out,
// hashed on the way.
func TestConformanceTmpfsWorkDir(t *testing.T) {
	needRoot(t)
	buildertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (buildertest.Harness, error) {
		return harness{work: buildertest.FastTempDir(t)}, nil
	})
}

// entry is one tar entry of the hand-written trees below.
type entry struct {
	hdr  tar.Header
	body []byte
}

// orderTree is a tree whose entries can be written in several valid
// orders (parents first).
func orderTree() []entry {
	mt := time.Unix(1_650_000_000, 0)
	var es []entry
	add := func(h tar.Header, body []byte) {
		h.ModTime = mt.Add(time.Duration(len(es)) * time.Second)
		h.Size = int64(len(body))
		es = append(es, entry{h, body})
	}
	for _, d := range []string{"a", "a/deep", "b", "c", "zz"} {
		add(tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}, nil)
	}
	for i := range 120 {
		dir := []string{"a", "a/deep", "b", "c", "zz"}[i%5]
		var body []byte
		if i%3 == 0 {
			body = bytes.Repeat([]byte{byte(i)}, 100+i*97)
		}
		add(tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%s/f-%03d", dir, 119-i), Mode: 0o644, Uid: i, Gid: i + 1,
			PAXRecords: map[string]string{"SCHILY.xattr.user.i": strconv.Itoa(i), "SCHILY.xattr.user.a": "second"}}, body)
	}
	add(tar.Header{Typeflag: tar.TypeReg, Name: "b/big", Mode: 0o600}, bytes.Repeat([]byte("0123456789abcdef"), 200<<10))
	add(tar.Header{Typeflag: tar.TypeSymlink, Name: "c/link", Linkname: "../b/big", Mode: 0o777}, nil)
	add(tar.Header{Typeflag: tar.TypeChar, Name: "zz/null", Mode: 0o666, Devmajor: 1, Devminor: 3}, nil)
	add(tar.Header{Typeflag: tar.TypeBlock, Name: "zz/loop9", Mode: 0o660, Devmajor: 7, Devminor: 9}, nil)
	add(tar.Header{Typeflag: tar.TypeFifo, Name: "zz/fifo", Mode: 0o600}, nil)
	// A name debugfs scripts cannot spell, on a file whose xattrs the
	// builder rewrites through debugfs.
	add(tar.Header{Typeflag: tar.TypeReg, Name: "zz/new\nline", Mode: 0o644,
		PAXRecords: map[string]string{"SCHILY.xattr.user.z": "z", "SCHILY.xattr.user.b": "b", "SCHILY.xattr.trusted.t": "t"}}, []byte("nl\n"))
	return es
}

func tarOf(t testing.TB, es []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestReproducibleAcrossStagingOrder builds the same tree written in
// different entry orders (so the staging directories are created in
// different orders) on different host filesystems (ext4 hashes readdir
// order, tmpfs returns newest first) and requires identical bytes.
func TestReproducibleAcrossStagingOrder(t *testing.T) {
	needRoot(t)
	es := orderTree()
	var dirs, files []entry
	for _, e := range es {
		if e.hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, e)
		} else {
			files = append(files, e)
		}
	}
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b entry) int { return strings.Compare(a.hdr.Name, b.hdr.Name) })
	reversed := slices.Clone(sorted)
	slices.Reverse(reversed)
	orders := map[string][]byte{
		"written":  tarOf(t, es),
		"sorted":   tarOf(t, append(slices.Clone(dirs), sorted...)),
		"reversed": tarOf(t, append(slices.Clone(dirs), reversed...)),
	}
	workDirs := map[string]func(t *testing.T) string{"disk": func(t *testing.T) string { return t.TempDir() }}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		workDirs["tmpfs"] = func(t *testing.T) string {
			d, err := os.MkdirTemp("/dev/shm", "mkfs-test-")
			if err != nil {
				t.Skip("cannot use /dev/shm")
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	// Same host filesystem, different orders; same order, different
	// filesystems; and both different.
	cases := [][2]string{{"written", "disk"}, {"reversed", "disk"}, {"reversed", "tmpfs"}, {"sorted", "tmpfs"}}
	sums := map[string]string{}
	for _, c := range cases {
		order, where := c[0], c[1]
		newWork, ok := workDirs[where]
		if !ok {
			continue
		}
		work := newWork(t)
		out := filepath.Join(t.TempDir(), "img")
		_, err := mkfs.New(mkfs.Options{WorkDir: work}).Build(context.Background(), ports.BuildSpec{
			OutPath: out, UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime,
		}, flattenertest.TarEntries(t, orders[order], false))
		if err != nil {
			t.Fatalf("%s order in %s: %v", order, where, err)
		}
		if left, _ := os.ReadDir(work); len(left) != 0 {
			t.Errorf("%s: work dir not cleaned: %v", where, left)
		}
		sum, err := buildertest.FileSHA256(out)
		if err != nil {
			t.Fatal(err)
		}
		sums[order+"/"+where] = sum
	}
	first := sums["written/disk"]
	for _, v := range sums {
		if v != first {
			t.Fatalf("sha256 differs across staging orders: %v", sums)
		}
	}
	t.Logf("%d builds, one sha256 %s", len(sums), first)
}

// TestTimesClamped: mtimes after spec.Time become spec.Time; the root and
// every ctime are spec.Time.
func TestTimesClamped(t *testing.T) {
	needRoot(t)
	spec := time.Unix(1_700_000_000, 0)
	tr := tarOf(t, []entry{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, ModTime: spec.Add(time.Hour)}},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d/future", Mode: 0o644, ModTime: spec.Add(24 * time.Hour)}},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d/past", Mode: 0o644, ModTime: spec.Add(-time.Hour)}},
		{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "d/dev", Mode: 0o644, ModTime: spec.Add(time.Hour), Devmajor: 1, Devminor: 5}},
	})
	out := filepath.Join(t.TempDir(), "img")
	if _, err := mkfs.New(mkfs.Options{WorkDir: t.TempDir()}).Build(context.Background(),
		ports.BuildSpec{OutPath: out, UUID: buildertest.FixtureUUID, Time: spec}, flattenertest.TarEntries(t, tr, false)); err != nil {
		t.Fatal(err)
	}
	got, err := buildertest.ReadImage(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{".": spec.Unix(), "d": spec.Unix(), "d/future": spec.Unix(), "d/past": spec.Add(-time.Hour).Unix(), "d/dev": spec.Unix()}
	for p, m := range want {
		if got[p] == nil || got[p].MTime != m {
			t.Errorf("%s: mtime %v, want %d", p, got[p], m)
		}
	}
}

// TestLargeDirectoryIndexed: a directory of several blocks comes out
// indexed (e2fsck -D rebuilt it after the checksums were turned on), holds
// every name, and the superblock's check and write times are spec.Time,
// not the clock's.
func TestLargeDirectoryIndexed(t *testing.T) {
	needRoot(t)
	spec := time.Unix(1_700_000_000, 0)
	es := []entry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "big/", Mode: 0o755, ModTime: spec}}}
	for i := range 3000 {
		es = append(es, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("big/entry-with-a-longish-name-%05d", i), Mode: 0o644, ModTime: spec}})
	}
	out := filepath.Join(t.TempDir(), "img")
	if _, err := mkfs.New(mkfs.Options{WorkDir: t.TempDir()}).Build(context.Background(),
		ports.BuildSpec{OutPath: out, UUID: buildertest.FixtureUUID, Time: spec}, flattenertest.TarEntries(t, tarOf(t, es), false)); err != nil {
		t.Fatal(err)
	}
	if err := buildertest.Fsck(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	stat, err := exec.Command("debugfs", "-R", "stat /big", out).Output()
	if err != nil {
		t.Fatal(err)
	}
	// EXT4_INDEX_FL is 0x1000; debugfs prints the flags in hex.
	m := regexp.MustCompile(`Flags: 0x([0-9a-f]+)`).FindSubmatch(stat)
	if m == nil {
		t.Fatalf("no flags in debugfs stat:\n%s", stat)
	}
	if flags, _ := strconv.ParseUint(string(m[1]), 16, 32); flags&0x1000 == 0 {
		t.Errorf("big/ is not indexed (flags %#x)", flags)
	}
	got, err := buildertest.ReadImage(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es[1:] {
		if got[e.hdr.Name] == nil {
			t.Fatalf("%s missing from the image", e.hdr.Name)
		}
	}
	sb, err := exec.Command("dumpe2fs", "-h", out).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := spec.UTC().Format("Mon Jan _2 15:04:05 2006")
	for _, field := range []string{"Last checked", "Last write time"} {
		m := regexp.MustCompile(field + `:\s+(.*)`).FindSubmatch(sb)
		if m == nil || strings.TrimSpace(string(m[1])) != want {
			t.Errorf("%s = %q, want %q", field, m, want)
		}
	}
}

func TestEmptyTree(t *testing.T) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "img")
	empty := make([]byte, 1024) // an empty tar: just the end-of-archive marker
	res, err := mkfs.New(mkfs.Options{WorkDir: t.TempDir()}).Build(context.Background(),
		ports.BuildSpec{OutPath: out, UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime}, flattenertest.TarEntries(t, empty, false))
	if err != nil {
		t.Fatal(err)
	}
	if res.SizeBytes != 2<<20 {
		t.Errorf("empty tree gave %d bytes, want the 2 MiB minimum", res.SizeBytes)
	}
	if err := buildertest.Fsck(context.Background(), out); err != nil {
		t.Error(err)
	}
}

func TestInvalidSpec(t *testing.T) {
	dir := t.TempDir()
	ok := func() ports.BuildSpec {
		return ports.BuildSpec{OutPath: filepath.Join(dir, "img"), UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime}
	}
	cases := []struct {
		name  string
		mod   func(*ports.BuildSpec)
		field string
	}{
		{"no out path", func(s *ports.BuildSpec) { s.OutPath = "" }, "OutPath"},
		{"missing out dir", func(s *ports.BuildSpec) { s.OutPath = filepath.Join(dir, "no", "img") }, "OutPath"},
		{"empty uuid", func(s *ports.BuildSpec) { s.UUID = "" }, "UUID"},
		{"bad uuid", func(s *ports.BuildSpec) { s.UUID = "not-a-uuid" }, "UUID"},
		{"nil uuid", func(s *ports.BuildSpec) { s.UUID = "00000000-0000-0000-0000-000000000000" }, "UUID"},
		{"zero time", func(s *ports.BuildSpec) { s.Time = time.Time{} }, "Time"},
		{"negative headroom", func(s *ports.BuildSpec) { s.HeadroomBytes = -1 }, "HeadroomBytes"},
		{"negative inodes", func(s *ports.BuildSpec) { s.HeadroomInodes = -1 }, "HeadroomInodes"},
		{"negative cap", func(s *ports.BuildSpec) { s.MaxSizeBytes = -1 }, "MaxSizeBytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ok()
			c.mod(&s)
			_, err := mkfs.New(mkfs.Options{WorkDir: t.TempDir()}).Build(context.Background(), s, ports.TreeSlice(nil))
			var fe *core.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("err = %v, want a FieldError for %s", err, c.field)
			}
		})
	}
}

func TestMissingTool(t *testing.T) {
	needRoot(t)
	_, err := mkfs.New(mkfs.Options{WorkDir: t.TempDir(), Debugfs: "/nonexistent/debugfs"}).Build(context.Background(),
		ports.BuildSpec{OutPath: filepath.Join(t.TempDir(), "img"), UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime}, flattenertest.TarEntries(t, nil, false))
	if !errors.Is(err, core.ErrUnsupported) || !strings.Contains(err.Error(), "debugfs") {
		t.Fatalf("err = %v, want ErrUnsupported naming debugfs", err)
	}
}

// TestToolFailureReported: a failing tool's output reaches the error, and
// nothing is left behind.
func TestToolFailureReported(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	fake := filepath.Join(dir, "e2fsck")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'Pass 2: something is very wrong' >&2\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	_, err := mkfs.New(mkfs.Options{WorkDir: t.TempDir(), E2fsck: fake}).Build(context.Background(), ports.BuildSpec{
		OutPath: filepath.Join(outDir, "img"),
		UUID:    buildertest.FixtureUUID, Time: buildertest.FixtureTime,
	}, flattenertest.TarEntries(t, tarOf(t, orderTree()), false))
	if err == nil || !strings.Contains(err.Error(), "something is very wrong") || !strings.Contains(err.Error(), "e2fsck") {
		t.Fatalf("err = %v, want e2fsck and its output", err)
	}
	if left, _ := os.ReadDir(outDir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestFinalCheckFailure: the last check (e2fsck -fn) runs while the image
// is copied out of a tmpfs work directory, or before it is renamed into
// place from any other; OutPath never holds an image that has not passed
// it (the fake check looks, after the copy had time to finish), and when
// it fails the build fails with its output and nothing is left behind.
func TestFinalCheckFailure(t *testing.T) {
	needRoot(t)
	real, err := exec.LookPath("e2fsck")
	if err != nil {
		t.Skip("no e2fsck")
	}
	works := map[string]string{"disk": t.TempDir()}
	if shm := mkfs.FastWorkDir("", 1<<30); shm == "/dev/shm" {
		d, err := os.MkdirTemp(shm, "mkfs-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		works["tmpfs"] = d
	}
	for name, work := range works {
		t.Run(name, func(t *testing.T) {
			outDir := t.TempDir()
			out := filepath.Join(outDir, "img")
			fake := filepath.Join(t.TempDir(), "e2fsck")
			script := "#!/bin/sh\nif [ \"$1\" = -fn ]; then sleep 0.5; [ -e " + out + " ] && echo 'OutPath is already there' >&2\n" +
				"echo 'Pass 5: bitmap differences' >&2; exit 4; fi\nexec " + real + " \"$@\"\n"
			if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := mkfs.New(mkfs.Options{WorkDir: work, E2fsck: fake}).Build(context.Background(), ports.BuildSpec{
				OutPath: out,
				UUID:    buildertest.FixtureUUID, Time: buildertest.FixtureTime,
			}, flattenertest.TarEntries(t, tarOf(t, orderTree()), false))
			if err == nil || !strings.Contains(err.Error(), "bitmap differences") || !strings.Contains(err.Error(), "failed its check") {
				t.Fatalf("err = %v, want the final check's failure and output", err)
			}
			if strings.Contains(err.Error(), "already there") {
				t.Errorf("the image reached OutPath before its check passed: %v", err)
			}
			if left, _ := os.ReadDir(outDir); len(left) != 0 {
				t.Errorf("left at OutPath's directory: %v", left)
			}
			if left, _ := os.ReadDir(work); len(left) != 0 {
				t.Errorf("left in the work directory: %v", left)
			}
		})
	}
}

// TestCancelKillsTool replaces mkfs.ext4 with a script that hangs, cancels
// the build, and checks the child is gone and nothing is left behind.
func TestCancelKillsTool(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	fake := filepath.Join(dir, "fake-mkfs")
	script := "#!/bin/sh\necho $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + "\nexec sleep 600\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	work, outDir := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := mkfs.New(mkfs.Options{WorkDir: work, Mkfs: fake}).Build(ctx, ports.BuildSpec{
			OutPath: filepath.Join(outDir, "img"),
			UUID:    buildertest.FixtureUUID, Time: buildertest.FixtureTime,
		}, flattenertest.TarEntries(t, tarOf(t, orderTree()), false))
		errc <- err
	}()
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		} else if time.Now().After(deadline) {
			t.Fatal("the fake mkfs never started")
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("mkfs child %d still exists after cancel", pid)
	}
	for _, d := range []string{work, outDir} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("%s not cleaned: %v", d, left)
		}
	}
}

// TestHostileXattrNamesNeverReachDebugfs: xattr names are passed to the
// debugfs fixup script (device xattrs, and the sorted rewrite of entries
// with several), which runs one command per line as root on the host. A
// newline in a name would end the argument and run the rest, writing a
// host file with "dump" or running a shell with "!". Each tree must fail
// the build and leave the sentinel host path absent.
func TestHostileXattrNamesNeverReachDebugfs(t *testing.T) {
	needRoot(t)
	mt := time.Unix(1_700_000_000, 0)
	payload := []byte("written to the host by debugfs\n")
	cases := []struct {
		name  string
		entry func(sentinel string) entry
	}{
		{"device xattr", func(s string) entry {
			return entry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: mt,
				Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.security.x\ndump -p /payload " + s + "\n": "v"}}}
		}},
		{"second xattr of a file", func(s string) entry {
			return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "etc/f", Mode: 0o644, ModTime: mt, Format: tar.FormatPAX,
				PAXRecords: map[string]string{"SCHILY.xattr.user.a": "1", "SCHILY.xattr.user.x\ndump -p /payload " + s + "\n": "v"}}}
		}},
		{"shell escape", func(s string) entry {
			return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "etc/g", Mode: 0o644, ModTime: mt, Format: tar.FormatPAX,
				PAXRecords: map[string]string{"SCHILY.xattr.user.a": "1", "SCHILY.xattr.user.x\n!touch " + s + "\n": "v"}}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sentinel := filepath.Join(t.TempDir(), "pwned")
			tree := tarOf(t, []entry{
				{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "payload", Mode: 0o644, Size: int64(len(payload)), ModTime: mt}, body: payload},
				c.entry(sentinel),
			})
			_, err := mkfs.New(mkfs.Options{WorkDir: t.TempDir()}).Build(context.Background(), ports.BuildSpec{
				OutPath: filepath.Join(t.TempDir(), "img"), UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime,
			}, flattenertest.TarEntries(t, tree, false))
			if _, serr := os.Lstat(sentinel); serr == nil {
				t.Errorf("debugfs wrote %s on the host", sentinel)
			}
			if err == nil {
				t.Fatal("Build accepted an xattr name with a newline")
			}
			if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "xattr") {
				t.Errorf("err = %v, want an invalid-argument error naming the xattr", err)
			}
		})
	}
}
