package mkfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/adapters/diskio"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const (
	blockSize = 4096
	// alignBlocks is 2 MiB in blocks: virtio-pmem wants images aligned to
	// it, and every size we choose is a multiple of it.
	alignBlocks = (2 << 20) / blockSize
	// maxAttempts bounds the rebuilds when mke2fs runs out of blocks or
	// inodes, or the headroom came out short. Each rebuild after running
	// out grows by a quarter, so an estimate off by 2.4× still succeeds.
	maxAttempts = 6
)

// Options configures a Builder.
type Options struct {
	// WorkDir is where private staging directories are made; "" means
	// os.TempDir(). It needs room for the unpacked tree.
	WorkDir string
	// Paths of the e2fsprogs tools; "" means mkfs.ext4, tune2fs,
	// debugfs, e2fsck and dumpe2fs looked up on PATH.
	Mkfs, Tune2fs, Debugfs, E2fsck, Dumpe2fs string
}

// Builder builds ext4 images with mkfs.ext4 -d. It is safe for concurrent
// use; every Build has its own work directory.
type Builder struct {
	opts Options

	formatOnce sync.Once
	format     string
}

// FormatVersion is the version of this builder's own layout choices
// (sizing, features, the pinned mke2fs.conf and e2fsck.conf, the steps
// that write the image); bump it when they change. 2: directories
// rebuilt and indexed by e2fsck -D.
const FormatVersion = "2"

var _ ports.RootfsBuilder = (*Builder)(nil)

// New returns a Builder. Tools are looked up at Build time so that a
// missing tool is reported where it matters, with its name.
func New(opts Options) *Builder { return &Builder{opts: opts} }

// Name implements ports.RootfsBuilder.
func (b *Builder) Name() string { return "mkfs" }

// Format implements ports.RootfsBuilder: "mkfs/<FormatVersion>/e2fsprogs-<v>",
// with the version mke2fs reports, since another e2fsprogs may lay out the
// same tree differently.
func (b *Builder) Format() string {
	b.formatOnce.Do(func() {
		b.format = "mkfs/" + FormatVersion + "/e2fsprogs-" + e2fsprogsVersion(b.opts.Mkfs)
	})
	return b.format
}

// e2fsprogsVersion is the version in `mkfs.ext4 -V` ("mke2fs 1.47.0
// (5-Feb-2023)"), or "unknown" when the tool cannot tell.
func e2fsprogsVersion(mkfs string) string {
	if mkfs == "" {
		mkfs = "mkfs.ext4"
	}
	out, _ := exec.Command(mkfs, "-V").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "mke2fs" {
			return f[1]
		}
	}
	return "unknown"
}

// Build implements ports.RootfsBuilder. See the package documentation for
// the steps, the filesystem choices and the sizing rule. The tree is
// staged from entries whose content the kernel copies from the
// flattener's files, so no byte of content passes through this process.
func (b *Builder) Build(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
	return b.build(ctx, spec, func(stage string, opt layers.ExtractOptions) (layers.ExtractResult, error) {
		return layers.ExtractEntries(ctx, tree, stage, opt)
	})
}

// build is Build with the staging step given: stage writes the tree under
// the staging directory with the options it is given.
func (b *Builder) build(ctx context.Context, spec ports.BuildSpec, stage func(string, layers.ExtractOptions) (layers.ExtractResult, error)) (ports.BuildResult, error) {
	fsUUID, err := validate(spec)
	if err != nil {
		return ports.BuildResult{}, err
	}
	if os.Geteuid() != 0 {
		// Staging must keep owners, setuid bits and trusted.*/security.*
		// xattrs, which only root can set on the host.
		return ports.BuildResult{}, fmt.Errorf("mkfs builder: staging needs root to keep ownership and xattrs: %w", core.ErrUnsupported)
	}
	t, err := b.lookTools()
	if err != nil {
		return ports.BuildResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return ports.BuildResult{}, fmt.Errorf("mkfs builder: %w", err)
	}

	workDir := b.opts.WorkDir
	if workDir == "" {
		workDir = os.TempDir()
	}
	work, err := os.MkdirTemp(workDir, "mkfs-") // mode 0700: nobody else may reach the staged setuid files
	if err != nil {
		return ports.BuildResult{}, fmt.Errorf("mkfs builder: work dir: %w", err)
	}
	defer removeTree(work)

	// The root keeps 0755 root:root unless the tree has a "." entry; chmod
	// because Mkdir is subject to the umask.
	root := filepath.Join(work, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return ports.BuildResult{}, fmt.Errorf("mkfs builder: staging dir: %w", err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return ports.BuildResult{}, fmt.Errorf("mkfs builder: staging dir: %w", err)
	}
	// Extract counts the zero blocks mke2fs will leave out and leaves long
	// runs of them as holes, so that nothing is read twice.
	xr, err := stage(root, layers.ExtractOptions{SkipDevices: true, HoleMin: punchMin, SparseMin: sparseScanMin})
	if err != nil {
		return ports.BuildResult{}, fmt.Errorf("mkfs builder: extract tree: %w", err)
	}
	tree, err := scan(ctx, root, spec.Time, xr.Deferred, xr.Sparse)
	if err != nil {
		return ports.BuildResult{}, fmt.Errorf("mkfs builder: %w", err)
	}

	conf, err := writeConfs(work)
	if err != nil {
		return ports.BuildResult{}, err
	}
	r := &runner{tools: t, env: childEnv(conf, spec.Time)}
	j := &job{
		r:     r,
		spec:  spec,
		tree:  tree,
		work:  work,
		stage: root,
		uuid:  fsUUID,
	}
	size, sum, err := j.build(ctx)
	if err != nil {
		return ports.BuildResult{}, err
	}
	return ports.BuildResult{SizeBytes: size, SHA256: sum}, nil
}

// validate checks spec and returns its UUID in canonical lower case.
func validate(spec ports.BuildSpec) (string, error) {
	switch {
	case spec.OutPath == "":
		return "", &core.FieldError{Field: "OutPath", Reason: "is empty"}
	case spec.Time.Unix() <= 0:
		return "", &core.FieldError{Field: "Time", Reason: "must be after 1970-01-01T00:00:00Z (it is the reproducible timestamp)"}
	case spec.Time.Unix() > 1<<32-1:
		return "", &core.FieldError{Field: "Time", Reason: "must fit ext4's 32-bit seconds"}
	case spec.HeadroomBytes < 0:
		return "", &core.FieldError{Field: "HeadroomBytes", Reason: "is negative"}
	case spec.HeadroomInodes < 0:
		return "", &core.FieldError{Field: "HeadroomInodes", Reason: "is negative"}
	case spec.MaxSizeBytes < 0:
		return "", &core.FieldError{Field: "MaxSizeBytes", Reason: "is negative"}
	}
	u, err := uuid.Parse(spec.UUID)
	if err != nil || len(spec.UUID) != 36 {
		return "", &core.FieldError{Field: "UUID", Reason: fmt.Sprintf("%q is not a UUID in 8-4-4-4-12 form", spec.UUID)}
	}
	if u == uuid.Nil {
		return "", &core.FieldError{Field: "UUID", Reason: "is the nil UUID"}
	}
	if fi, err := os.Stat(filepath.Dir(spec.OutPath)); err != nil || !fi.IsDir() {
		return "", &core.FieldError{Field: "OutPath", Reason: fmt.Sprintf("directory of %q does not exist", spec.OutPath)}
	}
	return u.String(), nil
}

// confs are the pinned configuration files of mke2fs and e2fsck.
type confs struct{ mke2fs, e2fsck string }

// writeConfs writes the pinned configuration files into the work
// directory.
func writeConfs(work string) (confs, error) {
	c := confs{mke2fs: filepath.Join(work, "mke2fs.conf"), e2fsck: filepath.Join(work, "e2fsck.conf")}
	for _, f := range [][2]string{{c.mke2fs, mke2fsConf}, {c.e2fsck, e2fsckConf}} {
		if err := os.WriteFile(f[0], []byte(f[1]), 0o600); err != nil {
			return confs{}, fmt.Errorf("mkfs builder: %w", err)
		}
	}
	return c, nil
}

// childEnv is the whole environment of every tool we run: nothing from the
// host may change the image (locale changes alphasort, MKE2FS_* variables
// change layout, /etc/e2fsck.conf the directories e2fsck rebuilds, the
// clock the superblock's check and write times).
func childEnv(c confs, t time.Time) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/sbin:/usr/bin:/sbin:/bin"
	}
	now := strconv.FormatInt(t.Unix(), 10)
	return []string{
		"PATH=" + path,
		"LC_ALL=C",
		"TZ=UTC",
		"MKE2FS_CONFIG=" + c.mke2fs,
		"E2FSCK_CONFIG=" + c.e2fsck,
		"E2FSPROGS_FAKE_TIME=" + now,
		"E2FSCK_TIME=" + now,
	}
}

// job is one Build past staging.
type job struct {
	r     *runner
	spec  ports.BuildSpec
	tree  *treeInfo
	work  string
	stage string
	uuid  string
	// formats counts mke2fs runs on the output file (tests look at it).
	formats int
}

// build sizes, formats, fixes up and verifies the image, then moves it
// onto OutPath. It returns the image size in bytes and, when the image
// was copied out of a tmpfs work directory, its sha256 (computed on the
// way).
func (j *job) build(ctx context.Context) (int64, string, error) {
	need := j.tree.need(j.spec.HeadroomBytes)
	inodes := j.tree.inodes(j.spec.HeadroomInodes)
	blocks, err := j.minBlocks(ctx, need, inodes)
	if err != nil {
		return 0, "", err
	}

	// On a tmpfs work directory the image is made there too (its fsyncs
	// cost nothing) and copied out once, hashed on the way; elsewhere it
	// is made beside OutPath and renamed.
	dir, base := filepath.Split(j.spec.OutPath)
	inWork := onTmpfs(j.work)
	if inWork {
		dir = j.work
	}
	f, err := os.CreateTemp(dir, base+".tmp.")
	if err != nil {
		return 0, "", fmt.Errorf("mkfs builder: temp image: %w", err)
	}
	tmp := f.Name()
	f.Close()
	done := false
	defer func() {
		if !done {
			os.Remove(tmp)
		}
	}()

	var lastErr error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err := j.checkMax(blocks, need); err != nil {
			return 0, "", err
		}
		res, err := j.attempt(ctx, tmp, blocks, inodes)
		if err != nil {
			return 0, "", err
		}
		if res.ok() {
			if err := ctx.Err(); err != nil { // a canceled build never publishes
				return 0, "", fmt.Errorf("mkfs builder: %w", err)
			}
			var sum string
			if inWork {
				// The staged tree is no longer needed: delete it, and
				// run the final check (read only), while the image is
				// copied out; the copy is renamed onto OutPath only
				// once the check passed.
				removed := make(chan struct{})
				go func() { removeTree(j.stage); close(removed) }()
				checkCtx, stopCheck := context.WithCancel(ctx)
				checked := make(chan error, 1)
				go func() { checked <- j.r.fsck(checkCtx, tmp) }()
				waited := false
				sum, err = copyOut(ctx, tmp, j.spec.OutPath, func() error { waited = true; return <-checked })
				if !waited { // the copy failed: the check is moot
					stopCheck()
					<-checked
				}
				stopCheck()
				<-removed
			} else if err = j.r.fsck(ctx, tmp); err == nil {
				err = publish(tmp, j.spec.OutPath)
			}
			if err != nil {
				return 0, "", err
			}
			done = true
			return blocks * blockSize, sum, nil
		}
		lastErr = res.shortage
		// Grow by what was missing; the next attempt is a fresh format of
		// the same staging tree.
		if res.blocksShort > 0 {
			blocks = roundUp(blocks+res.blocksShort, alignBlocks)
		}
		if res.inodesShort > 0 {
			inodes += res.inodesShort
		}
	}
	return 0, "", fmt.Errorf("mkfs builder: image still too small after %d attempts (last: %v)", maxAttempts, lastErr)
}

func (j *job) checkMax(blocks, need int64) error {
	if j.spec.MaxSizeBytes > 0 && blocks*blockSize > j.spec.MaxSizeBytes {
		return fmt.Errorf("mkfs builder: image needs %d bytes (content and headroom %d bytes plus filesystem metadata, 2 MiB aligned), over MaxSizeBytes %d: %w",
			blocks*blockSize, need*blockSize, j.spec.MaxSizeBytes, core.ErrInvalidArgument)
	}
	return nil
}

// attemptResult says whether an attempt produced a valid image, or by how
// much it fell short.
type attemptResult struct {
	blocksShort, inodesShort int64
	shortage                 error
}

func (a attemptResult) ok() bool { return a.blocksShort == 0 && a.inodesShort == 0 }

// attempt formats tmp at the given size. A shortage of blocks or inodes is
// reported in the result (the caller retries bigger); anything else is an
// error.
func (j *job) attempt(ctx context.Context, tmp string, blocks, inodes int64) (attemptResult, error) {
	if err := zeroFile(tmp, blocks*blockSize); err != nil {
		return attemptResult{}, err
	}
	j.formats++
	err := j.r.mkfs(ctx, mkfsArgs{
		stage:  j.stage,
		image:  tmp,
		blocks: blocks,
		inodes: inodes,
		uuid:   j.uuid,
		noCsum: true,
	})
	if err == nil {
		err = j.r.checksum(ctx, tmp)
	}
	if res, ok := shortage(err, blocks, inodes); ok {
		return res, nil
	}
	if err != nil {
		return attemptResult{}, err
	}

	pre, err := j.r.dumpe2fs(ctx, tmp, true)
	if err != nil {
		return attemptResult{}, err
	}
	var inos map[string]uint64
	if len(j.tree.multiXattr) > 0 {
		if inos, err = j.r.lookupInodes(ctx, tmp, j.stage, j.work, j.tree.multiXattr); err != nil {
			return attemptResult{}, err
		}
	}
	script, err := fixupScript(j.tree, pre, j.spec.Time.Unix(), j.work, j.stage, inos)
	if err != nil {
		return attemptResult{}, err
	}
	err = j.r.debugfsScript(ctx, tmp, script, filepath.Join(j.work, "fixup.debugfs"))
	if res, ok := shortage(err, blocks, inodes); ok {
		return res, nil
	}
	if err != nil {
		return attemptResult{}, err
	}
	post, err := j.r.dumpe2fs(ctx, tmp, false)
	if err != nil {
		return attemptResult{}, err
	}
	if err := post.verify(); err != nil {
		return attemptResult{}, fmt.Errorf("mkfs builder: %w", err)
	}
	res := attemptResult{}
	wantBlocks := ceilDiv(j.spec.HeadroomBytes, blockSize)
	if post.freeBlocks < wantBlocks {
		res.blocksShort = wantBlocks - post.freeBlocks
	}
	if post.freeInodes < j.spec.HeadroomInodes {
		res.inodesShort = j.spec.HeadroomInodes - post.freeInodes
	}
	if !res.ok() {
		res.shortage = fmt.Errorf("%d free blocks and %d free inodes, headroom wants %d and %d",
			post.freeBlocks, post.freeInodes, wantBlocks, j.spec.HeadroomInodes)
	}
	return res, nil
}

// shortage turns a tool running out of blocks or inodes into a result
// asking for more (ok is true, err nil); other errors pass through.
func shortage(err error, blocks, inodes int64) (res attemptResult, ok bool) {
	var full *fullError
	if !errors.As(err, &full) {
		return attemptResult{}, false
	}
	res.shortage = err
	// The tools do not say how much was missing.
	if full.inodes {
		res.inodesShort = max(256, inodes/4)
	} else {
		res.blocksShort = max(alignBlocks, blocks/4)
	}
	return res, true
}

// minBlocks finds the smallest 2 MiB-aligned size whose empty filesystem
// (same options, same inode count) has need free blocks, by formatting a
// sparse probe file: overhead is measured rather than modelled.
func (j *job) minBlocks(ctx context.Context, need, inodes int64) (int64, error) {
	probe := filepath.Join(j.work, "probe.img")
	defer os.Remove(probe)
	// First guess: content plus inode tables plus a little per-group
	// metadata; the probe corrects it.
	guess := need + ceilDiv(inodes*inodeSize, blockSize) + 64
	guess += 2 * ceilDiv(guess, blocksPerGroup)
	blocks := roundUp(guess, alignBlocks)
	for range 16 {
		if err := j.checkMax(blocks, need); err != nil {
			return 0, err
		}
		if err := zeroFile(probe, blocks*blockSize); err != nil {
			return 0, err
		}
		err := j.r.mkfs(ctx, mkfsArgs{image: probe, blocks: blocks, inodes: inodes, uuid: j.uuid})
		if err != nil {
			return 0, fmt.Errorf("mkfs builder: sizing probe at %d blocks: %w", blocks, err)
		}
		info, err := j.r.dumpe2fs(ctx, probe, false)
		if err != nil {
			return 0, err
		}
		short := need - info.freeBlocks
		if short <= 0 {
			return blocks, nil
		}
		blocks = roundUp(blocks+short, alignBlocks)
	}
	return 0, fmt.Errorf("mkfs builder: sizing did not converge for %d blocks of content", need)
}

// zeroFile makes path a sparse, all-zero file of exactly size bytes.
func zeroFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("mkfs builder: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("mkfs builder: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("mkfs builder: %w", err)
	}
	return nil
}

// publish moves the finished image onto out. It is not fsynced (mke2fs
// synced it already; the artifact store makes its own copy durable).
func publish(tmp, out string) error {
	err := os.Chmod(tmp, 0o644)
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		return fmt.Errorf("mkfs builder: publish %s: %w", out, err)
	}
	return nil
}

// copyOut copies the image from the work directory to a temporary file
// beside out, hashing it in a second goroutine as it goes, and, if check
// (called once the copy is complete) passes, renames it onto out. It
// returns the sha256.
func copyOut(ctx context.Context, img, out string, check func() error) (string, error) {
	src, err := os.Open(img)
	if err != nil {
		return "", fmt.Errorf("mkfs builder: %w", err)
	}
	defer src.Close()
	dir, base := filepath.Split(out)
	dst, err := os.CreateTemp(dir, base+".tmp.")
	if err != nil {
		return "", fmt.Errorf("mkfs builder: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			dst.Close()
			os.Remove(dst.Name())
		}
	}()
	sum, err := copyHashing(ctx, dst, src)
	if err == nil {
		err = dst.Chmod(0o644)
	}
	if err == nil {
		err = dst.Close()
	}
	if err != nil {
		return "", fmt.Errorf("mkfs builder: copy image to %s: %w", out, err)
	}
	if err := check(); err != nil {
		return "", err
	}
	if err := os.Rename(dst.Name(), out); err != nil {
		return "", fmt.Errorf("mkfs builder: copy image to %s: %w", out, err)
	}
	ok = true
	return sum, nil
}

// copyHashing copies src to dst and returns src's sha256. src's data is
// read in order, a 4 MiB piece at a time, into diskio.Buffers (huge
// pages where the kernel gives them); this goroutine hashes each piece
// and hands the non-zero ones to a diskio.Writer, which writes them with
// direct I/O where dst's filesystem takes it, several at once. The image
// is read back in order by the artifact store, so filling a gigabyte of
// page cache on the way buys nothing. src's holes (SEEK_DATA, SEEK_HOLE)
// are hashed as zeros without being read, so an image that is mostly
// headroom costs only its data. Pieces of zeros are left as holes in dst
// (the file keeps its length), as they were in src.
//
// Reading beats mapping the image here: on a paravirtualized guest,
// populating page tables for a gigabyte of tmpfs made the copy 1.5-1.85 s
// where reading it into the same few buffers takes 1.15-1.2 s.
func copyHashing(ctx context.Context, dst, src *os.File) (string, error) {
	fi, err := src.Stat()
	if err != nil {
		return "", err
	}
	size := fi.Size()
	h := sha256.New()
	hashed := int64(0)                 // bytes of src hashed so far
	hashZeros := func(n int64) error { // a hole: gigabytes, maybe
		for i := 0; n > 0; i++ {
			if i%1024 == 0 { // every 64 MiB
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			h.Write(zeroPiece[:min(n, int64(len(zeroPiece)))])
			n -= int64(len(zeroPiece))
		}
		return nil
	}
	const pieces = diskio.DefaultDepth + 2 // one hashed, the rest in flight
	mem := diskio.NewBuffers(pieces, copyPiece)
	defer mem.Release() // after dw.Close, which waits for every write
	free := make(chan []byte, pieces)
	for _, b := range mem.Pieces() {
		free <- b
	}
	dw := diskio.NewWriter(dst, diskio.DefaultDepth)
	err = eachData(ctx, src, size, func(start, end int64) error {
		if err := hashZeros(start - hashed); err != nil { // the hole before
			return err
		}
		for at := start; at < end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := dw.Err(); err != nil {
				return fmt.Errorf("copy image: %w", err)
			}
			b := (<-free)[:min(int64(copyPiece), end-at)]
			if n, err := src.ReadAt(b, at); n < len(b) {
				free <- b[:copyPiece]
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF // the image shrank under us
				}
				return fmt.Errorf("copy image: read at %d: %w", at, err)
			}
			h.Write(b)
			if isZero(b) {
				free <- b[:copyPiece]
			} else {
				dw.WriteAt(b, at, func() { free <- b[:copyPiece] })
			}
			at += int64(len(b))
			hashed = at
		}
		return nil
	})
	if cerr := dw.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("copy image: %w", cerr)
	}
	if err == nil {
		err = hashZeros(size - hashed) // the hole at the end
	}
	if err == nil {
		err = dst.Truncate(size)
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyPiece is what copyHashing reads, hashes and writes at a time.
const copyPiece = 4 << 20

// eachData calls fn with each range [start, end) of f's first size bytes
// that holds data, in order (SEEK_DATA, SEEK_HOLE; the caller takes the
// bytes between as zeros), stopping at the first error or when ctx ends.
// A range starts on a page boundary, so a piece that starts there is
// aligned for direct I/O. Where the filesystem does not tell holes apart,
// everything is one range.
func eachData(ctx context.Context, f *os.File, size int64, fn func(start, end int64) error) error {
	fd := int(f.Fd())
	page := int64(os.Getpagesize())
	for pos := int64(0); pos < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		start, end := pos, size
		if d, err := unix.Seek(fd, pos, unix.SEEK_DATA); errors.Is(err, unix.ENXIO) {
			return nil // nothing but holes from pos on
		} else if err == nil {
			start = max(pos, d-d%page)
			if e, err := unix.Seek(fd, d, unix.SEEK_HOLE); err == nil {
				end = min(e, size)
			}
		}
		if start >= size {
			return nil
		}
		if err := fn(start, end); err != nil {
			return err
		}
		pos = end
	}
	return nil
}

var zeroPiece [64 << 10]byte

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPiece))
		if !bytes.Equal(b[:n], zeroPiece[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// onTmpfs reports whether dir is on a tmpfs.
func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}

// removeTree deletes a work directory even when the staged tree holds
// directories without write permission (mode 0555) for the caller.
func removeTree(dir string) {
	if err := os.RemoveAll(dir); err == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func roundUp(a, m int64) int64 { return ceilDiv(a, m) * m }

// FastWorkDir returns /dev/shm when it is a tmpfs that keeps user.* xattrs
// (Linux 6.6 and later) with at least minFree bytes free, else fallback.
// Staging there is much cheaper than on a disk file system (tens of
// thousands of files written, then deleted; mke2fs's fsyncs cost nothing),
// and /dev/shm is usually nosuid,nodev, as the staging should be. The
// price is memory: the staged tree and the image live in RAM until the
// build ends.
func FastWorkDir(fallback string, minFree int64) string {
	const shm = "/dev/shm"
	var st unix.Statfs_t
	if unix.Statfs(shm, &st) != nil || st.Type != unix.TMPFS_MAGIC || int64(st.Bavail)*st.Bsize < minFree {
		return fallback
	}
	d, err := os.MkdirTemp(shm, "mkfs-probe-")
	if err != nil {
		return fallback
	}
	defer os.Remove(d)
	if unix.Setxattr(d, "user.cube-probe", []byte("1"), 0) != nil {
		return fallback
	}
	return shm
}
