package buildertest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// Harness makes builders for one adapter.
type Harness interface {
	// MakeBuilder returns the builder under test.
	MakeBuilder(ctx context.Context) (ports.RootfsBuilder, error)
	// MakeFlattener returns the flattener whose output the builder is fed
	// in production; the suite passes its layer fixtures through it.
	MakeFlattener(ctx context.Context) (ports.TreeFlattener, error)
	// Capabilities says what the builder does beyond the common contract.
	Capabilities() Capabilities
	// Close releases what the harness holds.
	Close()
}

// LimitsHarness is a Harness whose flattener can be bounded by the budgets
// of the hostile corpus (ports/flattenertest), so that the corpus's budget
// cases run end to end too; without it they are skipped.
type LimitsHarness interface {
	MakeLimitedFlattener(ctx context.Context, lim flattenertest.Limits) (ports.TreeFlattener, error)
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// Capabilities says what a builder does beyond the common contract.
type Capabilities struct {
	// Headroom: the builder honours BuildSpec.HeadroomBytes and
	// HeadroomInodes. Without it, a build that asks for headroom must fail
	// with an error wrapping core.ErrUnsupported.
	Headroom bool
	// SparseFiles: all-zero blocks of regular files take no space in the
	// image.
	SparseFiles bool
}

// FixtureUUID is the BuildSpec.UUID the suite uses.
const FixtureUUID = "6f1c0b52-3b7e-4c1a-9d7e-2f5a8c9e0b11"

// Size bound. An image may be at most
//
//	roundUp2MiB(alloc + headroom + 256×inodes + 4 KiB×(dirs+symlinks+entries with xattrs) + alloc/16 + 8 MiB)
//
// where alloc is the sum over distinct regular files of their size rounded
// up to 4 KiB and inodes counts the tree plus HeadroomInodes: room for
// inode tables, directory and extent blocks, bitmaps, superblock copies and
// alignment, and nothing like a power-of-two rounding.
const (
	overheadFixed   = 8 << 20
	overheadDivisor = 16
)

// MaxImageSize returns the bound above for want.
func MaxImageSize(want Tree, headroomBytes, headroomInodes int64) int64 {
	var alloc, meta int64
	seen := map[uint64]bool{}
	for _, e := range want {
		if e.Type == TypeReg {
			if seen[e.Inode] {
				continue
			}
			seen[e.Inode] = true
			alloc += (e.Size + 4095) &^ 4095
		}
		if e.Type == TypeDir || e.Type == TypeSymlink || len(e.Xattrs) > 0 {
			meta += 4096
		}
	}
	inodes := int64(len(seen)) + int64(len(want)) + headroomInodes
	n := alloc + headroomBytes + 256*inodes + meta + alloc/overheadDivisor + overheadFixed
	return (n + 2<<20 - 1) &^ (2<<20 - 1)
}

// fixture holds the inputs shared by the subtests.
type fixture struct {
	dir        string
	tree       string // flattened fidelity tree
	want       Tree
	small      string // flattened small tree
	smallWant  Tree
	image      string // fidelity image, once built
	imageSHA   string
	caps       Capabilities
	newHarness HarnessMaker
}

// newBuilder makes a builder from a fresh harness closed with t.
func (fx *fixture) newBuilder(t *testing.T) ports.RootfsBuilder {
	t.Helper()
	h := newHarness(t, fx.newHarness)
	b, err := h.MakeBuilder(context.Background())
	if err != nil {
		t.Fatalf("MakeBuilder: %v", err)
	}
	return b
}

func newHarness(t *testing.T, newHarness HarnessMaker) Harness {
	t.Helper()
	h, err := newHarness(context.Background(), t)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// RunConformanceTests runs the fidelity suite against the builders the
// harness makes. It needs debugfs, dumpe2fs and e2fsck on PATH.
func RunConformanceTests(t *testing.T, newH HarnessMaker) {
	for _, tool := range []string{"debugfs", "dumpe2fs", "e2fsck"} {
		testenv.Tool(t, tool)
	}
	h := newHarness(t, newH)
	fl, err := h.MakeFlattener(context.Background())
	if err != nil {
		t.Fatalf("MakeFlattener: %v", err)
	}
	fx := &fixture{dir: t.TempDir(), newHarness: newH, caps: h.Capabilities()}
	ls, want := FidelityInput(t, fx.dir)
	fx.want = want
	fx.tree = filepath.Join(fx.dir, "fidelity.tar")
	flattenTo(t, fl, ls, fx.tree)
	fx.smallWant = smallInput(t, fx.dir)
	fx.small = filepath.Join(fx.dir, "small.tar")
	flattenTo(t, fl, []ports.FlattenLayer{{Path: filepath.Join(fx.dir, "small-layer"), MediaType: layerMediaTypes[1]}}, fx.small)

	t.Run("Name", func(t *testing.T) {
		if fx.newBuilder(t).Name() == "" {
			t.Error("Name() is empty")
		}
	})
	t.Run("Fidelity", func(t *testing.T) { testFidelity(t, fx, fx.caps) })
	t.Run("LoopMount", func(t *testing.T) { testLoopMount(t, fx) })
	t.Run("Reproducible", func(t *testing.T) { testReproducible(t, fx) })
	t.Run("Headroom", func(t *testing.T) { testHeadroom(t, fx, fx.caps) })
	t.Run("MaxSizeBytes", func(t *testing.T) { testMaxSize(t, fx) })
	t.Run("CanceledBeforeStart", func(t *testing.T) { testCanceledBeforeStart(t, fx) })
	t.Run("CanceledMidway", func(t *testing.T) { testCanceledMidway(t, fx) })
	t.Run("TreeCorpus", func(t *testing.T) { testTreeCorpus(t, fx) })
	t.Run("HostileLayers", func(t *testing.T) { testHostileLayers(t, fx) })
	t.Run("FromFlattener", func(t *testing.T) { testFromFlattener(t, fx, fl, ls) })
	t.Run("Injected", func(t *testing.T) { testInjected(t, fx, fl) })
}

// flattenTo writes the tree fl makes of ls to the file out, as tar
// (EntriesOf reads it back as entries).
func flattenTo(t testing.TB, fl ports.TreeFlattener, ls []ports.FlattenLayer, out string) {
	t.Helper()
	var tree []byte
	if _, err := fl.Flatten(context.Background(), ls, func(es ports.Tree) error {
		tree = flattenertest.EntriesTar(t, es)
		return nil
	}); err != nil {
		t.Fatalf("flatten: %v", err)
	}
	if err := os.WriteFile(out, tree, 0o644); err != nil {
		t.Fatal(err)
	}
}

// smallInput writes a one-layer input with a 6 MiB file and returns its
// expected tree.
func smallInput(t testing.TB, dir string) Tree {
	t.Helper()
	tick := 0
	l := &layerBuilder{tick: &tick}
	l.dir("etc", 0o755, 0, 0)
	l.file("etc/hostname", 0o644, 0, 0, []byte("small\n"))
	l.dir("opt", 0o755, 0, 0)
	l.file("opt/blob", 0o644, 0, 0, randomBytes(6<<20, 2))
	l.symlink("opt/link", "blob", 0, 0)
	if err := writeLayer(filepath.Join(dir, "small-layer"), l.ops, layerMediaTypes[1]); err != nil {
		t.Fatal(err)
	}
	return expectedTree([][]op{l.ops})
}

func baseSpec(out string) ports.BuildSpec {
	return ports.BuildSpec{OutPath: out, UUID: FixtureUUID, Time: FixtureTime}
}

// build runs one build of the tree file into a fresh directory.
func build(t *testing.T, b ports.RootfsBuilder, treeFile string, mod func(*ports.BuildSpec)) (string, ports.BuildResult, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	spec := baseSpec(out)
	if mod != nil {
		mod(&spec)
	}
	res, err := b.Build(context.Background(), spec, EntriesOf(t, treeFile))
	return out, res, err
}

// fidelityImage builds the fidelity image once and returns its path.
func (fx *fixture) fidelityImage(t *testing.T) string {
	t.Helper()
	if fx.image != "" {
		return fx.image
	}
	img, res, err := build(t, fx.newBuilder(t), fx.tree, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkResultSize(t, img, res)
	// Keep it for the later subtests: this subtest's TempDir goes away.
	keep := filepath.Join(fx.dir, "fidelity.ext4")
	if err := os.Rename(img, keep); err != nil {
		t.Fatal(err)
	}
	fx.image = keep
	if fx.imageSHA, err = FileSHA256(keep); err != nil {
		t.Fatal(err)
	}
	return keep
}

func checkResultSize(t *testing.T, img string, res ports.BuildResult) {
	t.Helper()
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatalf("image: %v", err)
	}
	if fi.Size() != res.SizeBytes {
		t.Errorf("BuildResult.SizeBytes = %d, file has %d bytes", res.SizeBytes, fi.Size())
	}
	if fi.Size()%(2<<20) != 0 {
		t.Errorf("image size %d is not a multiple of 2 MiB", fi.Size())
	}
	if res.SHA256 != "" {
		if sum, err := FileSHA256(img); err != nil || sum != res.SHA256 {
			t.Errorf("BuildResult.SHA256 %s, the file's is %s (%v)", res.SHA256, sum, err)
		}
	}
}

// checkImage runs the structural checks every image must pass.
func checkImage(t *testing.T, img string, want Tree, headroomBytes, headroomInodes int64) ImageInfo {
	t.Helper()
	ctx := context.Background()
	if err := Fsck(ctx, img); err != nil {
		t.Errorf("fsck: %v", err)
	}
	info, err := ReadImageInfo(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	if info.BlockSize != 4096 {
		t.Errorf("block size %d, want 4096", info.BlockSize)
	}
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < info.BlockCount*info.BlockSize {
		t.Errorf("file has %d bytes, filesystem claims %d blocks of %d", fi.Size(), info.BlockCount, info.BlockSize)
	}
	if max := MaxImageSize(want, headroomBytes, headroomInodes); fi.Size() > max {
		t.Errorf("image is %d bytes, over the documented bound %d for this content", fi.Size(), max)
	}
	t.Logf("image %d bytes (%.1f MiB), %d/%d blocks free, %d/%d inodes free, features %v",
		fi.Size(), float64(fi.Size())/(1<<20), info.FreeBlocks, info.BlockCount, info.FreeInodes, info.InodeCount, info.Features)
	return info
}

func compareTree(t *testing.T, what string, want, got Tree) {
	t.Helper()
	diffs := Diff(want, got, DiffOptions{IgnoreRootMTime: true, AllowExtra: []string{"lost+found"}})
	for i, d := range diffs {
		if i == 40 {
			t.Errorf("%s: ... and %d more differences", what, len(diffs)-i)
			break
		}
		t.Errorf("%s: %s", what, d)
	}
}

func testFidelity(t *testing.T, fx *fixture, caps Capabilities) {
	img := fx.fidelityImage(t)
	checkImage(t, img, fx.want, 0, 0)
	got, err := ReadImage(context.Background(), img)
	if err != nil {
		t.Fatalf("ReadImage: %v", err)
	}
	compareTree(t, "debugfs", fx.want, got)
	for _, p := range WhitedOut {
		if got[p] != nil {
			t.Errorf("%s was whited out but is in the image", p)
		}
	}
	if caps.SparseFiles {
		if e := got["opt/sparse.img"]; e != nil && e.Blocks*512 > 64<<10 {
			t.Errorf("opt/sparse.img (%d bytes, three small marks) takes %d bytes; zero blocks should not be allocated", e.Size, e.Blocks*512)
		}
	}
}

// testLoopMount reads the image through the kernel's ext4 driver, which
// also proves the kernel accepts the features the builder chose.
func testLoopMount(t *testing.T, fx *fixture) {
	testenv.Root(t, "loop mounts need root")
	img := fx.fidelityImage(t)
	mnt := t.TempDir()
	testenv.LoopMount(t, img, mnt)
	got, err := ReadDir(mnt, "lost+found")
	if err != nil {
		t.Fatalf("read mounted image: %v", err)
	}
	compareTree(t, "kernel", fx.want, got)
	if sha, _ := FileSHA256(img); sha != fx.imageSHA {
		t.Error("a read-only mount changed the image bytes")
	}
}

func testReproducible(t *testing.T, fx *fixture) {
	fx.fidelityImage(t)
	img, res, err := build(t, fx.newBuilder(t), fx.tree, nil)
	if err != nil {
		t.Fatalf("second Build: %v", err)
	}
	checkResultSize(t, img, res)
	sha, err := FileSHA256(img)
	if err != nil {
		t.Fatal(err)
	}
	if sha != fx.imageSHA {
		t.Errorf("two builds of the same tree, UUID and Time differ: sha256 %s vs %s", fx.imageSHA, sha)
	}

	// A different UUID must give a different image with that UUID.
	img2, _, err := build(t, fx.newBuilder(t), fx.small, func(s *ports.BuildSpec) { s.UUID = "0b6f5a9e-1d2c-4e3f-8a7b-9c0d1e2f3a4b" })
	if err != nil {
		t.Fatalf("Build with another UUID: %v", err)
	}
	out, err := exec.Command("dumpe2fs", "-h", img2).Output()
	if err != nil || !bytes.Contains(out, []byte("0b6f5a9e-1d2c-4e3f-8a7b-9c0d1e2f3a4b")) {
		t.Errorf("filesystem UUID is not BuildSpec.UUID (err %v)", err)
	}
}

func testHeadroom(t *testing.T, fx *fixture, caps Capabilities) {
	const hb, hi = 8<<20 + 1, 2000
	img, res, err := build(t, fx.newBuilder(t), fx.small, func(s *ports.BuildSpec) {
		s.HeadroomBytes, s.HeadroomInodes = hb, hi
	})
	if !caps.Headroom {
		if !errors.Is(err, core.ErrUnsupported) {
			t.Fatalf("Build with headroom = %v, want an error wrapping core.ErrUnsupported", err)
		}
		assertNothingAt(t, img)
		return
	}
	if err != nil {
		t.Fatalf("Build with headroom: %v", err)
	}
	checkResultSize(t, img, res)
	info := checkImage(t, img, fx.smallWant, hb, hi)
	if free := info.FreeBlocks * info.BlockSize; free < hb {
		t.Errorf("%d bytes free, headroom asked for %d", free, hb)
	}
	if info.FreeInodes < hi {
		t.Errorf("%d inodes free, headroom asked for %d", info.FreeInodes, hi)
	}
	got, err := ReadImage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	compareTree(t, "debugfs", fx.smallWant, got)
}

func testMaxSize(t *testing.T, fx *fixture) {
	b := fx.newBuilder(t)
	img, res, err := build(t, b, fx.small, func(s *ports.BuildSpec) { s.MaxSizeBytes = 4 << 20 })
	if err == nil {
		t.Fatalf("Build of a 6 MiB tree with MaxSizeBytes 4 MiB succeeded (%d bytes)", res.SizeBytes)
	}
	t.Logf("over the cap: %v", err)
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("an image over MaxSizeBytes fails with %v, want an error wrapping core.ErrInvalidArgument", err)
	}
	assertNothingAt(t, img)

	_, res, err = build(t, b, fx.small, nil)
	if err != nil {
		t.Fatalf("Build without cap: %v", err)
	}
	size := res.SizeBytes
	img, res, err = build(t, b, fx.small, func(s *ports.BuildSpec) { s.MaxSizeBytes = size })
	if err != nil {
		t.Fatalf("Build with MaxSizeBytes equal to the uncapped size %d: %v", size, err)
	}
	if res.SizeBytes != size {
		t.Errorf("capped build is %d bytes, uncapped %d", res.SizeBytes, size)
	}
	checkImage(t, img, fx.smallWant, 0, 0)
}

func testCanceledBeforeStart(t *testing.T, fx *fixture) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	if _, err := fx.newBuilder(t).Build(ctx, baseSpec(out), EntriesOf(t, fx.small)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Build with a canceled context = %v, want an error wrapping context.Canceled", err)
	}
	assertNothingAt(t, out)
}

// countdown is a context that ends once it has been asked whether it
// ended (Err or Done) more than left times: a build canceled at its
// left-th check, wherever that falls, the same way on every run.
type countdown struct {
	context.Context
	mu    sync.Mutex
	left  int
	fired bool
	done  chan struct{}
}

func newCountdown(left int) *countdown {
	return &countdown{Context: context.Background(), left: left, done: make(chan struct{})}
}

func (c *countdown) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left--; c.left < 0 && !c.fired {
		c.fired = true
		close(c.done)
	}
}

func (c *countdown) Done() <-chan struct{} { c.tick(); return c.done }

func (c *countdown) Err() error {
	c.tick()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fired {
		return context.Canceled
	}
	return nil
}

// testCanceledMidway cancels builds at their 1st, 2nd, 4th, ... check of
// the context, until one runs to the end unasked: every canceled build
// fails with an error wrapping context.Canceled and leaves nothing behind.
func testCanceledMidway(t *testing.T, fx *fixture) {
	for n := 0; ; n = max(1, 2*n) {
		if n > 1<<12 {
			t.Fatal("the builder checks its context more than 4096 times on a small tree")
		}
		ctx := newCountdown(n)
		out := filepath.Join(t.TempDir(), "rootfs.ext4")
		_, err := fx.newBuilder(t).Build(ctx, baseSpec(out), EntriesOf(t, fx.small))
		ctx.mu.Lock()
		fired := ctx.fired
		ctx.mu.Unlock()
		if !fired {
			if err != nil {
				t.Fatalf("Build never canceled: %v", err)
			}
			if n == 0 {
				t.Fatal("the builder never checks its context")
			}
			return
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Build canceled at check %d = %v, want an error wrapping context.Canceled", n+1, err)
		}
		assertNothingAt(t, out)
	}
}

// testTreeCorpus holds the builder to the tree-level hostile corpus: it
// must refuse, with the contract's rule, every tree a hostile or buggy
// flattener could hand it, leave nothing behind, write nothing outside its
// output directory and create no device node on the host.
func testTreeCorpus(t *testing.T, fx *fixture) {
	flattenertest.RunTreeCorpus(t, func(ctx context.Context, tree ports.Tree, dest string) error {
		_, err := fx.newBuilder(t).Build(ctx, baseSpec(filepath.Join(dest, "rootfs.ext4")), tree)
		return err
	}, flattenertest.TreeOptions{CleansUp: true})
}

// testHostileLayers runs every layer-level case of the hostile corpus end
// to end, as a build does: the layers (gzip) go through the harness's
// flattener (bounded by the case's budgets) and its output streams
// straight into the builder. A case the flattener refuses must fail the
// build with the flattener's rule and leave nothing at the output; a case
// it accepts keeps its writes inside the root (through symlinks, they land
// where the symlinks resolve in the image), so the image must hold exactly
// the flattened tree. Either way nothing outside the output directory
// changes and no device node appears on the host.
func testHostileLayers(t *testing.T, fx *fixture) {
	var refused, built int
	for _, c := range flattenertest.Cases() {
		if c.Layers == nil && c.Blobs == nil {
			continue // tree-level only: TreeCorpus
		}
		if c.Flatten != "" {
			refused++
		} else {
			built++
		}
		t.Run(c.Name, func(t *testing.T) {
			h := newHarness(t, fx.newHarness)
			fl := limitedFlattener(t, h, c.Limits)
			b, err := h.MakeBuilder(context.Background())
			if err != nil {
				t.Fatalf("MakeBuilder: %v", err)
			}
			v := flattenertest.NewVictim(t)
			ls := flattenertest.WriteLayers(t, c.LayerBlobs(t, v, flattenertest.MediaGzip)...)
			img := filepath.Join(v.Root, "rootfs.ext4")
			tree, ferr, berr := flattenAndBuild(t, fl, b, ls, img)
			v.Check(t)
			if devs := flattenertest.DeviceNodes(v.Root); len(devs) > 0 {
				t.Errorf("device nodes created on the host: %v", devs)
			}
			if c.Flatten != "" {
				flattenertest.WantRule(t, ferr, c.Flatten)
				if berr == nil {
					t.Fatalf("the builder made an image of the broken stream of a refused image (%s)", c.Flatten)
				}
				assertNothingAt(t, img)
				return
			}
			if ferr != nil || berr != nil {
				t.Fatalf("an image the flattener accepts did not build: flatten: %v; build: %v", ferr, berr)
			}
			want, err := TreeOf(bytes.NewReader(tree))
			if err != nil {
				t.Fatal(err)
			}
			if err := Fsck(context.Background(), img); err != nil {
				t.Error(err)
			}
			got, err := ReadImage(context.Background(), img)
			if err != nil {
				t.Fatal(err)
			}
			compareTree(t, "debugfs", want, got)
		})
	}
	if built < 15 || refused < 30 {
		t.Errorf("the corpus has %d accepted and %d refused layer cases, want at least 15 and 30", built, refused)
	}
}

// limitedFlattener returns the harness's flattener bounded by lim, skipping
// the test when the harness cannot bound it.
func limitedFlattener(t *testing.T, h Harness, lim flattenertest.Limits) ports.TreeFlattener {
	t.Helper()
	if lim.IsZero() {
		fl, err := h.MakeFlattener(context.Background())
		if err != nil {
			t.Fatalf("MakeFlattener: %v", err)
		}
		return fl
	}
	lh, ok := h.(LimitsHarness)
	if !ok {
		t.Skip("depends on budgets this harness's flattener cannot take")
	}
	fl, err := lh.MakeLimitedFlattener(context.Background(), lim)
	if err != nil {
		t.Fatalf("MakeLimitedFlattener: %v", err)
	}
	return fl
}

// flattenAndBuild hands the flattened layers to the builder as the build
// pipeline does and returns the tree the builder was given (as tar), the
// flattener's error and the builder's.
func flattenAndBuild(t *testing.T, fl ports.TreeFlattener, b ports.RootfsBuilder, ls []ports.FlattenLayer, out string) ([]byte, error, error) {
	var tree []byte
	var berr error
	_, ferr := fl.Flatten(context.Background(), ls, func(es ports.Tree) error {
		tree = flattenertest.EntriesTar(t, es)
		_, berr = b.Build(context.Background(), baseSpec(out), es)
		return berr
	})
	if ferr != nil && ferr == berr {
		ferr = nil // the builder's own error, returned as is
	}
	if ferr != nil && berr == nil {
		berr = errNotBuilt // a refused tree never reaches the builder
	}
	return tree, ferr, berr
}

// errNotBuilt stands for the build a refused tree never got.
var errNotBuilt = errors.New("the flattener refused the layers: nothing was built")

// assertNothingAt checks a failed build left neither the image nor any
// temporary file in the output directory.
func assertNothingAt(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after a failed build (err %v)", out, err)
	}
	ents, err := os.ReadDir(filepath.Dir(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("failed build left %s behind", e.Name())
	}
}
