//go:build linux

package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ExtractEntries writes a flattened tree (the tree Flatten hands over)
// under root, which must be an existing empty directory. No write ever
// leaves root.
//
// Every entry is validated again with the rules Flatten applies, because
// the entries may come from anywhere. Parent directories are opened from a
// handle on root with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), falling
// back to a component-by-component O_NOFOLLOW walk, and every operation then
// names a single component relative to that handle without following it: a
// symlink in the tree is never traversed, and ownership, modes, xattrs and
// times are set on the entry itself, never through a link. It also
// remembers what it created so a tree that writes below its own symlink
// or file, or names an entry twice, is refused before any syscall.
//
// Ownership is applied before modes (chown clears setuid), xattrs such as
// security.capability after both, and directory modes and times after all
// entries. Hard links carry no metadata of their own. The root itself gets
// the metadata of a "." entry, or 0755 root:root with mtime 0, and loses
// the POSIX ACLs it inherited from its parent. On error root holds a
// partial tree that the caller discards.
//
// The content of a regular file is copied by the kernel from its File at
// Offset (sendfile), never through this process. With HoleMin, the
// all-zero blocks an entry lists (ZeroKnown) are left out as holes and
// counted in ExtractResult.Sparse without reading them; content without
// that list is read and scanned. With more than one CPU, regular files of
// up to 256 KiB are created by worker goroutines (one per CPU, at most
// four), each under its own handle on the parent directory that this
// goroutine opened and checked; a hard link, the directory metadata and
// the return wait for them. Every check above still runs here, before
// any worker sees the entry.
func ExtractEntries(ctx context.Context, tree ports.Tree, root string, opt ExtractOptions) (res ExtractResult, err error) {
	x, err := newExtractor(root, opt)
	if err != nil {
		return ExtractResult{}, err
	}
	defer x.closeInto(&res)
	for i := range tree.Len() {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if i >= x.lim.MaxEntries {
			return res, x.reject("", reject(RuleTooManyEntries, "more than %d entries", x.lim.MaxEntries))
		}
		te, err := tree.Entry(i)
		if err != nil {
			return res, fmt.Errorf("extract: read tree entry %d: %w", i, err)
		}
		if te.Header == nil {
			return res, x.reject("", reject(RuleCorruptArchive, "an entry without a header"))
		}
		e, err := x.check(te.Header)
		if err != nil {
			return res, err
		}
		if e == nil {
			continue
		}
		c := content{file: te.File, off: te.Offset, zero: te.Zero, zeroKnown: te.ZeroKnown}
		if e.typ == tar.TypeReg && e.size > 0 && te.File == nil {
			return res, x.reject(e.raw, reject(RuleCorruptArchive, "a regular file of %d bytes without content", e.size))
		}
		if err := x.add(e, c); err != nil {
			return res, err
		}
	}
	if err := x.finish(); err != nil {
		return res, err
	}
	return res, nil
}

// newExtractor opens root, which must be an empty directory, for Extract
// and ExtractEntries.
func newExtractor(root string, opt ExtractOptions) (*extractor, error) {
	d, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("extract: %w", err)
	}
	names, err := d.Readdirnames(1)
	d.Close()
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("extract: %w", err)
	}
	if len(names) > 0 {
		return nil, fmt.Errorf("extract: root %s is not empty: %w", root, core.ErrInvalidArgument)
	}
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("extract: open %s: %w", root, err)
	}
	if err := dropACLs(rootFD); err != nil {
		unix.Close(rootFD)
		return nil, fmt.Errorf("extract: %s: %w", root, err)
	}
	uid, gid, err := newOwner(rootFD)
	if err != nil {
		unix.Close(rootFD)
		return nil, fmt.Errorf("extract: %s: %w", root, err)
	}
	x := &extractor{
		rootFD:  rootFD,
		lim:     opt.Limits.orDefault(),
		opt:     opt,
		kinds:   map[string]byte{".": tar.TypeDir},
		meta:    map[string]*entry{},
		cacheFD: -1,
		w:       newFileWriter(opt.HoleMin > 0),
		newUID:  uid,
		newGID:  gid,
	}
	x.startWorkers()
	return x, nil
}

// dropACLs removes the POSIX ACLs root got from the directory it was made
// in: everything created below would inherit its default ACL, and the
// image would carry ACLs no layer declared (the tree's own, a "." entry's
// included, are set later, explicitly).
func dropACLs(rootFD int) error {
	for _, name := range []string{"system.posix_acl_default", "system.posix_acl_access"} {
		err := unix.Fremovexattr(rootFD, name)
		if err != nil && err != unix.ENODATA && err != unix.EOPNOTSUPP {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	return nil
}

// ownerProbe is the file newOwner creates and removes in the empty root.
const ownerProbe = ".cube-owner-probe"

// newOwner returns the owner a file created under rootFD gets: this
// process's user, and its group or, where the root directory is setgid or
// the filesystem is mounted grpid, the root's. The directories Extract
// makes below are 0700 and owned by it until finish, so files anywhere in
// the tree start out the same.
func newOwner(rootFD int) (uid, gid int, err error) {
	fd, err := unix.Openat(rootFD, ownerProbe, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, 0, err
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if uerr := unix.Unlinkat(rootFD, ownerProbe, 0); err == nil {
		err = uerr
	}
	return int(st.Uid), int(st.Gid), err
}

// check validates one header with Flatten's rules; nil, nil means an entry
// that carries nothing to create (a global header).
func (x *extractor) check(hdr *tar.Header) (*entry, error) {
	if hdr.Typeflag != tar.TypeXGlobalHeader {
		if rj := checkTreeName(hdr.Name, false); rj != nil {
			return nil, x.reject(hdr.Name, rj)
		}
		if hdr.Typeflag == tar.TypeLink {
			if rj := checkTreeName(hdr.Linkname, true); rj != nil {
				return nil, x.reject(hdr.Name, rj)
			}
		}
	}
	e, rj := parseHeader(hdr, x.lim)
	if rj != nil {
		return nil, x.reject(hdr.Name, rj)
	}
	if e != nil && e.wh != whNone {
		return nil, x.reject(hdr.Name, reject(RuleWhiteoutInTree, "a flattened tree has no whiteouts"))
	}
	return e, nil
}

// content is where a regular file's bytes come from: a file at an offset,
// with its zero blocks when known.
type content struct {
	file      *os.File
	off       int64
	zero      [][2]uint32
	zeroKnown bool
}

// kindImplied marks a directory Extract created for a missing parent.
const kindImplied = 'i'

type extractor struct {
	rootFD int
	lim    Limits
	opt    ExtractOptions
	res    ExtractResult
	total  int64

	kinds map[string]byte   // what Extract created at each path
	dirs  []string          // directories in creation order
	meta  map[string]*entry // metadata of declared directories (and the root)

	cachePath string // last parent directory opened
	cacheFD   int
	w         *fileWriter // the buffers of files written in this goroutine
	// newUID and newGID own a file this process creates in the tree
	// (newOwner): files meant to be theirs need no chown.
	newUID, newGID int

	// Small regular files are read here and written by workers (see
	// writeFile); sparseMu guards res.Sparse, which workers fill.
	jobs     chan fileJob
	pending  sync.WaitGroup // jobs sent and not done
	workers  sync.WaitGroup
	sparseMu sync.Mutex
	errMu    sync.Mutex
	jobErr   error
}

// fileWriter holds the buffers one goroutine writes files with.
type fileWriter struct {
	buf   []byte
	chunk []byte // what writeSparse reads into (buf holds what it writes)
}

func newFileWriter(sparse bool) *fileWriter {
	w := &fileWriter{buf: make([]byte, 1<<20)}
	if sparse {
		w.chunk = make([]byte, len(w.buf))
	}
	return w
}

// fileJob is a small regular file for a worker to create under its own
// handle on the parent directory.
type fileJob struct {
	pfd  int
	base string
	e    *entry
	c    content
}

const (
	// asyncMax is the largest file handed to a worker: tens of thousands
	// of small files cost far more in syscalls (create, write, chown,
	// chmod, xattrs, times) than in bytes.
	asyncMax = 256 << 10
	// asyncBufs bounds the files queued and not yet written.
	asyncBufs = 32
)

// startWorkers starts the goroutines that write small files, when there
// is more than one CPU to run them on.
func (x *extractor) startWorkers() {
	n := min(runtime.GOMAXPROCS(0), 4)
	if n < 2 {
		return
	}
	x.jobs = make(chan fileJob, asyncBufs)
	for range n {
		x.workers.Add(1)
		go func() {
			defer x.workers.Done()
			w := newFileWriter(x.opt.HoleMin > 0)
			for j := range x.jobs {
				err := x.createFile(w, j.pfd, j.base, j.e, j.c)
				unix.Close(j.pfd)
				if err != nil {
					x.errMu.Lock()
					if x.jobErr == nil {
						x.jobErr = err
					}
					x.errMu.Unlock()
				}
				x.pending.Done()
			}
		}()
	}
}

// wait returns once every file handed to a worker is written, with the
// first error a worker met.
func (x *extractor) wait() error {
	if x.jobs == nil {
		return nil
	}
	x.pending.Wait()
	return x.workerErr()
}

func (x *extractor) workerErr() error {
	x.errMu.Lock()
	defer x.errMu.Unlock()
	return x.jobErr
}

// closeInto closes x and then sets *res to its result: only then have the
// workers, which count sparse files into it, stopped.
func (x *extractor) closeInto(res *ExtractResult) {
	x.close()
	*res = x.res
}

func (x *extractor) close() {
	if x.jobs != nil {
		close(x.jobs)
		x.workers.Wait()
	}
	if x.cacheFD >= 0 {
		unix.Close(x.cacheFD)
	}
	unix.Close(x.rootFD)
}

func (x *extractor) reject(entry string, rj *rejection) error {
	return &RejectError{Layer: -1, Entry: entry, Rule: rj.rule, Detail: rj.detail}
}

func opErr(op, name string, err error) error {
	return fmt.Errorf("extract: %s %q: %w", op, name, err)
}

func (x *extractor) add(e *entry, c content) error {
	if e.name == "." {
		x.meta["."] = e // parseHeader refused non-directories
		return nil
	}
	if k, ok := x.kinds[e.name]; ok {
		if k == kindImplied && e.typ == tar.TypeDir {
			x.kinds[e.name] = tar.TypeDir
			x.meta[e.name] = e
			return nil
		}
		return x.reject(e.raw, reject(RuleDuplicateEntry, "%q already exists", e.name))
	}
	dir, base := path.Split(e.name)
	dir = path.Clean(dir)
	if err := x.ensureDir(dir, e); err != nil {
		return err
	}
	pfd, err := x.parent(dir)
	if err != nil {
		return opErr("open parent of", e.name, err)
	}

	switch e.typ {
	case tar.TypeDir:
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return opErr("mkdir", e.name, err)
		}
		x.dirs = append(x.dirs, e.name)
		x.meta[e.name] = e
	case tar.TypeReg:
		if err := x.writeFile(pfd, base, e, c); err != nil {
			return err
		}
	case tar.TypeLink:
		if err := x.link(pfd, base, e); err != nil {
			return err
		}
		x.kinds[e.name] = tar.TypeReg
		x.res.Stats.count(tar.TypeLink, 0)
		return nil
	case tar.TypeSymlink:
		if err := unix.Symlinkat(e.link, pfd, base); err != nil {
			return opErr("symlink", e.name, err)
		}
		if err := x.setSpecialMeta(pfd, base, e); err != nil {
			return err
		}
	case tar.TypeFifo:
		if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
			return opErr("mkfifo", e.name, err)
		}
		if err := x.setSpecialMeta(pfd, base, e); err != nil {
			return err
		}
	case tar.TypeChar, tar.TypeBlock:
		if x.opt.SkipDevices {
			x.res.Deferred = append(x.res.Deferred, e.header())
			break
		}
		mode := uint32(unix.S_IFCHR)
		if e.typ == tar.TypeBlock {
			mode = unix.S_IFBLK
		}
		dev := unix.Mkdev(uint32(e.major), uint32(e.minor))
		if err := unix.Mknodat(pfd, base, mode|0o600, int(dev)); err != nil {
			return opErr("mknod", e.name, err)
		}
		if err := x.setSpecialMeta(pfd, base, e); err != nil {
			return err
		}
	}
	x.kinds[e.name] = e.typ
	x.res.Stats.count(e.typ, e.size)
	return nil
}

// ensureDir checks that every component of dir is a directory Extract
// made, creating missing ones (0755 root:root, epoch mtime, like Flatten).
func (x *extractor) ensureDir(dir string, e *entry) error {
	if dir == "." {
		return nil
	}
	if k := x.kinds[dir]; k == tar.TypeDir || k == kindImplied {
		return nil
	}
	done := ""
	for rest := dir; rest != ""; {
		var c string
		c, rest, _ = cutSlash(rest)
		parent := done
		done = path.Join(done, c)
		k, ok := x.kinds[done]
		switch {
		case !ok:
			if len(x.kinds) > x.lim.MaxEntries {
				return x.reject(e.raw, reject(RuleTooManyEntries, "more than %d entries with implied directories", x.lim.MaxEntries))
			}
			pfd, err := x.parent(path.Clean(parent))
			if err != nil {
				return opErr("open parent of", done, err)
			}
			if err := unix.Mkdirat(pfd, c, 0o700); err != nil {
				return opErr("mkdir", done, err)
			}
			x.kinds[done] = kindImplied
			x.dirs = append(x.dirs, done)
			x.res.Stats.count(tar.TypeDir, 0)
		case k == tar.TypeDir || k == kindImplied:
		case k == tar.TypeSymlink:
			return x.reject(e.raw, reject(RuleParentSymlink, "%q is a symlink", done))
		default:
			return x.reject(e.raw, reject(RuleParentNotDir, "%q is not a directory", done))
		}
	}
	return nil
}

// parent returns a handle on directory dir (clean, "." for root), cached
// because consecutive entries usually share it.
func (x *extractor) parent(dir string) (int, error) {
	if x.cacheFD >= 0 && x.cachePath == dir {
		return x.cacheFD, nil
	}
	fd, err := openBeneath(x.rootFD, dir)
	if err != nil {
		return -1, err
	}
	if x.cacheFD >= 0 {
		unix.Close(x.cacheFD)
	}
	x.cachePath, x.cacheFD = dir, fd
	return fd, nil
}

// noOpenat2 is set once openat2 turns out to be missing (Linux < 5.6).
var noOpenat2 atomic.Bool

// openBeneath opens directory p below rootFD without following any symlink
// and without leaving rootFD.
func openBeneath(rootFD int, p string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(rootFD, p, &unix.OpenHow{
			Flags:   flags,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if !errors.Is(err, unix.ENOSYS) {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	// Old kernel: walk one component at a time; O_NOFOLLOW refuses a
	// symlink and clean paths have no "..".
	fd, err := unix.Dup(rootFD)
	if err != nil {
		return -1, err
	}
	for rest := p; rest != "" && rest != "."; {
		var c string
		c, rest, _ = cutSlash(rest)
		next, err := unix.Openat(fd, c, flags, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

func (x *extractor) writeFile(pfd int, base string, e *entry, c content) error {
	x.total += e.size
	if x.total > x.lim.MaxTotalBytes {
		return x.reject(e.raw, reject(RuleImageTooLarge, "declared sizes %d > %d", x.total, x.lim.MaxTotalBytes))
	}
	if x.jobs == nil || e.size > asyncMax {
		return x.createFile(x.w, pfd, base, e, c)
	}
	if err := x.workerErr(); err != nil {
		return err
	}
	// The worker gets its own handle on the parent: ours is cached and
	// may be closed before the worker runs.
	dfd, err := unix.Dup(pfd)
	if err != nil {
		return opErr("open parent of", e.name, err)
	}
	x.pending.Add(1)
	x.jobs <- fileJob{pfd: dfd, base: base, e: e, c: c}
	return nil
}

// createFile creates regular file base in directory pfd with the content
// read from src and applies its metadata, with w's buffers.
//
// Staging makes tens of thousands of files, and a system call costs
// microseconds on a paravirtualized guest (each entry to the kernel is a
// hypercall there), so this makes no call it can do without: content the
// kernel copies needs no *os.File (whose creation asks fcntl for the
// descriptor's flags), a file whose last block was copied needs no
// truncate, and a file to be owned by whom a new file belongs to anyway
// (newOwner) needs no chown.
func (x *extractor) createFile(w *fileWriter, pfd int, base string, e *entry, c content) error {
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return opErr("create", e.name, err)
	}
	var f *os.File // only where the content goes through Go's I/O
	closeFD := func() error {
		if f != nil {
			return f.Close()
		}
		return unix.Close(fd)
	}
	closed := false
	defer func() {
		if !closed {
			closeFD()
		}
	}()
	var src io.Reader
	if c.file != nil {
		src = io.NewSectionReader(c.file, c.off, e.size)
	}
	var n int64
	counted := x.opt.HoleMin > 0 && e.size >= x.opt.SparseMin
	switch {
	case e.size == 0:
		// Nothing to copy (an entry of an empty file names no content).
	case c.file != nil && (!counted || c.zeroKnown):
		// The kernel copies the content; with HoleMin, the zero blocks
		// the entry lists stay holes.
		var bc BlockCount
		n, bc, err = copyRuns(fd, c, e.size, x.opt.HoleMin > 0)
		if err == nil && counted {
			err = x.recordSparse(fd, bc)
		}
	case counted:
		f = os.NewFile(uintptr(fd), e.name)
		var bc BlockCount
		if n, bc, err = x.writeSparse(w, f, src, e.size); err == nil {
			err = x.recordSparse(fd, bc)
		}
	default:
		f = os.NewFile(uintptr(fd), e.name)
		n, err = io.CopyBuffer(hostWriter{f}, src, w.buf)
	}
	if err == nil && n != e.size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		if isWriteErr(err) {
			return opErr("write", e.name, err)
		}
		rj, ioErr := classify(err)
		if ioErr != nil {
			return opErr("read", e.name, ioErr)
		}
		return x.reject(e.raw, rj)
	}
	if e.uid != x.newUID || e.gid != x.newGID {
		if err := unix.Fchown(fd, e.uid, e.gid); err != nil {
			return opErr("chown", e.name, err)
		}
	}
	if err := unix.Fchmod(fd, uint32(e.mode)); err != nil {
		return opErr("chmod", e.name, err)
	}
	for _, xa := range e.xattrs {
		if err := unix.Fsetxattr(fd, xa.name, []byte(xa.value), 0); err != nil {
			return opErr("setxattr "+xa.name+" on", e.name, err)
		}
	}
	closed = true
	if err := closeFD(); err != nil {
		return opErr("close", e.name, err)
	}
	return setTimes(pfd, base, e, e.name)
}

// recordSparse files the block count of the file open at fd under its
// device and inode.
func (x *extractor) recordSparse(fd int, bc BlockCount) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	x.sparseMu.Lock()
	defer x.sparseMu.Unlock()
	if x.res.Sparse == nil {
		x.res.Sparse = map[[2]uint64]BlockCount{}
	}
	x.res.Sparse[[2]uint64{uint64(st.Dev), st.Ino}] = bc
	return nil
}

// copyRuns copies size bytes of c.file from c.off into the file open at fd
// (just created: its offset is 0) with sendfile and counts its non-zero
// 4 KiB blocks and their runs. With holes, the zero blocks c lists (when
// known) are not copied and stay holes (the file gets its full length at
// the end).
func copyRuns(fd int, c content, size int64, holes bool) (int64, BlockCount, error) {
	blocks := (size + zeroBlockSize - 1) / zeroBlockSize
	var bc BlockCount
	var runs [][2]int64 // blocks [first, end) to copy
	next := int64(0)
	if holes && c.zeroKnown {
		for _, z := range c.zero {
			first, end := int64(z[0]), int64(z[0])+int64(z[1])
			if first < next || end > blocks {
				return 0, bc, fmt.Errorf("zero blocks %d+%d out of order or past the %d blocks of the content", z[0], z[1], blocks)
			}
			if first > next {
				runs = append(runs, [2]int64{next, first})
			}
			next = end
		}
	}
	if next < blocks {
		runs = append(runs, [2]int64{next, blocks})
	}
	pos := int64(0) // fd's offset: sendfile writes there and moves it
	for _, r := range runs {
		bc.Runs++
		bc.Data += r[1] - r[0]
		start, end := r[0]*zeroBlockSize, min(r[1]*zeroBlockSize, size)
		if start != pos {
			if _, err := unix.Seek(fd, start, io.SeekStart); err != nil {
				return 0, bc, &hostWriteError{err}
			}
		}
		if err := sendRange(fd, c.file, c.off+start, end-start); err != nil {
			return 0, bc, err
		}
		pos = end
	}
	if pos != size { // zeros at the end, or nothing but zeros
		if err := unix.Ftruncate(fd, size); err != nil {
			return 0, bc, &hostWriteError{err}
		}
	}
	return size, bc, nil
}

// sendRange copies n bytes of src from srcOff to the file open at fd, at
// its offset, in the kernel.
func sendRange(fd int, src *os.File, srcOff, n int64) error {
	sfd := int(src.Fd())
	for n > 0 {
		off := srcOff
		w, err := unix.Sendfile(fd, sfd, &off, int(min(n, 1<<30)))
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return &hostWriteError{err}
		}
		if w == 0 {
			return io.ErrUnexpectedEOF
		}
		srcOff += int64(w)
		n -= int64(w)
	}
	return nil
}

// writeSparse copies size bytes of content from tr into f, counting its
// non-zero 4 KiB blocks and their runs, and leaving zero runs of at least
// HoleMin bytes unwritten (the file gets its full length at the end).
func (x *extractor) writeSparse(w *fileWriter, f *os.File, tr io.Reader, size int64) (int64, BlockCount, error) {
	var bc BlockCount
	var n int64
	inRun := false
	zeroStart := int64(-1)
	pending := w.buf[:0] // bytes to write at pendingOff
	pendingOff := int64(0)
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		_, err := f.WriteAt(pending, pendingOff)
		pending = pending[:0]
		if err != nil {
			return &hostWriteError{err}
		}
		return nil
	}
	chunk := w.chunk
	for n < size {
		c := chunk[:min(int64(len(chunk)), size-n)]
		got, rerr := io.ReadFull(tr, c)
		c = c[:got]
		for i := 0; i < len(c); i += zeroBlockSize {
			b := c[i:min(i+zeroBlockSize, len(c))]
			off := n + int64(i)
			if bytes.Equal(b, zeroBlock[:len(b)]) {
				if zeroStart < 0 {
					zeroStart = off
				}
				inRun = false
				continue
			}
			if zeroStart >= 0 {
				if off-zeroStart >= x.opt.HoleMin {
					if err := flush(); err != nil {
						return n, bc, err
					}
				} else {
					// A short zero run is written like data.
					if len(pending) == 0 {
						pendingOff = zeroStart
					}
					for z := zeroStart; z < off; z += zeroBlockSize {
						pending = append(pending, zeroBlock[:min(zeroBlockSize, off-z)]...)
					}
				}
				zeroStart = -1
			}
			if len(pending) == 0 {
				pendingOff = off
			}
			if len(pending)+len(b) > cap(pending) {
				if err := flush(); err != nil {
					return n, bc, err
				}
				pendingOff = off
			}
			pending = append(pending, b...)
			if len(b) == zeroBlockSize || off+int64(len(b)) == size {
				bc.Data++
				if !inRun {
					bc.Runs++
					inRun = true
				}
			}
		}
		n += int64(got)
		if rerr != nil {
			if rerr == io.EOF {
				rerr = io.ErrUnexpectedEOF
			}
			return n, bc, rerr
		}
	}
	if zeroStart >= 0 && size-zeroStart < x.opt.HoleMin {
		if len(pending) == 0 {
			pendingOff = zeroStart
		}
		for z := zeroStart; z < size; z += zeroBlockSize {
			if len(pending)+zeroBlockSize > cap(pending) {
				if err := flush(); err != nil {
					return n, bc, err
				}
				pendingOff = z
			}
			pending = append(pending, zeroBlock[:min(zeroBlockSize, size-z)]...)
		}
	}
	if err := flush(); err != nil {
		return n, bc, err
	}
	if err := f.Truncate(size); err != nil {
		return n, bc, &hostWriteError{err}
	}
	return n, bc, nil
}

// link makes a hard link to an earlier regular file of this stream. The
// target's parent is opened like any other (no symlinks), linkat does not
// follow a symlink target, and the result is checked to be a regular file;
// no metadata is applied through it (CVE-2021-32760).
func (x *extractor) link(pfd int, base string, e *entry) error {
	switch k, ok := x.kinds[e.link]; {
	case !ok:
		return x.reject(e.raw, reject(RuleHardlinkMissing, "target %q is not an earlier entry", e.link))
	case k == tar.TypeDir || k == kindImplied:
		return x.reject(e.raw, reject(RuleHardlinkDir, "target %q is a directory", e.link))
	case k != tar.TypeReg:
		return x.reject(e.raw, reject(RuleHardlinkNotRegular, "target %q is of type %q", e.link, k))
	}
	// The target may still be with a worker.
	if err := x.wait(); err != nil {
		return err
	}
	tdir, tbase := path.Split(e.link)
	tfd, err := openBeneath(x.rootFD, path.Clean(tdir))
	if err != nil {
		return opErr("open parent of", e.link, err)
	}
	defer unix.Close(tfd)
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return opErr("link", e.name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return opErr("stat", e.name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return x.reject(e.raw, reject(RuleHardlinkNotRegular, "target %q is not a regular file on disk", e.link))
	}
	return nil
}

// setSpecialMeta applies metadata to a symlink, FIFO or device node that
// was just created, without opening it (opening a device or FIFO has side
// effects) and without following it.
func (x *extractor) setSpecialMeta(pfd int, base string, e *entry) error {
	if err := unix.Fchownat(pfd, base, e.uid, e.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return opErr("chown", e.name, err)
	}
	if e.typ != tar.TypeSymlink { // Linux symlinks have no mode
		if err := chmodNoFollow(pfd, base, uint32(e.mode)); err != nil {
			return opErr("chmod", e.name, err)
		}
	}
	if len(e.xattrs) > 0 {
		// The parent handle through /proc names the entry without a path
		// walk; lsetxattr does not follow the entry itself.
		p := "/proc/self/fd/" + strconv.Itoa(pfd) + "/" + base
		for _, xa := range e.xattrs {
			if err := unix.Lsetxattr(p, xa.name, []byte(xa.value), 0); err != nil {
				return opErr("setxattr "+xa.name+" on", e.name, err)
			}
		}
	}
	return setTimes(pfd, base, e, e.name)
}

// chmodNoFollow uses fchmodat2(AT_SYMLINK_NOFOLLOW) (Linux 6.6+) or, on
// older kernels, an O_PATH handle checked not to be a symlink.
func chmodNoFollow(pfd int, base string, mode uint32) error {
	err := unix.Fchmodat(pfd, base, mode, unix.AT_SYMLINK_NOFOLLOW)
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.ELOOP
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}

func setTimes(dirFD int, base string, e *entry, name string) error {
	ts := unix.NsecToTimespec(time.Unix(e.mtime, 0).UnixNano())
	if err := unix.UtimesNanoAt(dirFD, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return opErr("set times of", name, err)
	}
	return nil
}

// finish applies directory metadata, deepest first so that a restrictive
// mode never blocks a later step, and the root's last.
func (x *extractor) finish() error {
	if err := x.wait(); err != nil {
		return err
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		if err := x.dirMeta(x.dirs[i]); err != nil {
			return err
		}
	}
	// The root always gets metadata, declared or the implied default, so
	// the staging directory is a deterministic image root (mkfs -d copies
	// it) whatever mode and time the caller created it with.
	return x.dirMeta(".")
}

func (x *extractor) dirMeta(p string) error {
	e := x.meta[p]
	if e == nil {
		e = impliedEntry
	}
	fd, err := openBeneath(x.rootFD, p)
	if err != nil {
		return opErr("open", p, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, e.uid, e.gid); err != nil {
		return opErr("chown", p, err)
	}
	if err := unix.Fchmod(fd, uint32(e.mode)); err != nil {
		return opErr("chmod", p, err)
	}
	for _, xa := range e.xattrs {
		if err := unix.Fsetxattr(fd, xa.name, []byte(xa.value), 0); err != nil {
			return opErr("setxattr "+xa.name+" on", p, err)
		}
	}
	if p == "." {
		return setTimes(fd, ".", e, p)
	}
	dir, base := path.Split(p)
	pfd, err := openBeneath(x.rootFD, path.Clean(dir))
	if err != nil {
		return opErr("open parent of", p, err)
	}
	defer unix.Close(pfd)
	return setTimes(pfd, base, e, p)
}
