package mkfs

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/core"
)

// treeInfo is what the staged tree needs from the image, plus what the
// debugfs fixup pass must do.
type treeInfo struct {
	inodeCount  int64 // inodes of the tree, the root excluded
	dataBlocks  int64 // file data and extent tree blocks
	dirBlocks   int64
	linkBlocks  int64 // slow symlinks
	xattrBlocks int64

	rootMode uint32
	rootUID  uint32
	rootGID  uint32
	devices  []*tar.Header // created inside the image by debugfs
	// multiXattr lists staged entries (slash-separated, relative) with
	// two or more xattrs: mke2fs stores them in the order the host lists
	// them, which differs between host filesystems, so the fixup pass
	// rewrites them in sorted order.
	multiXattr []string

	// sparse holds the block counts Extract made while staging, by
	// (device, inode); files not in it are read by scanZeros.
	sparse  map[[2]uint64]layers.BlockCount
	scanBuf []byte
}

// buf is the read buffer scanZeros reuses.
func (t *treeInfo) buf() []byte {
	if t.scanBuf == nil {
		t.scanBuf = make([]byte, 1<<20)
	}
	return t.scanBuf
}

// need is the number of blocks the content plus headroom must find free in
// an empty filesystem of the chosen size.
func (t *treeInfo) need(headroomBytes int64) int64 {
	return t.dataBlocks + t.dirBlocks + t.linkBlocks + t.xattrBlocks + ceilDiv(headroomBytes, blockSize)
}

// inodes is the -N value: reserved inodes, the tree and the headroom.
func (t *treeInfo) inodes(headroom int64) int64 {
	return firstIno + t.inodeCount + headroom
}

const (
	// maxExtentLen is the longest initialized extent, in blocks.
	maxExtentLen = 32768
	// extentsPerBlock is how many 12-byte extent records a 4 KiB tree
	// block holds.
	extentsPerBlock = (blockSize - 12) / 12
	// inodeXattrSpace is what a 256-byte inode with 32 bytes of extra
	// fields leaves for in-inode xattrs, less the 4-byte magic.
	inodeXattrSpace = inodeSize - 128 - 32 - 4
	// fastSymlinkMax is the longest target stored inside the inode.
	fastSymlinkMax = 59
	// dirTail is the metadata_csum checksum tail of each directory block.
	dirTail = 12
)

// recLen is the size of a directory entry for a name of n bytes.
func recLen(n int) int64 { return int64(8+n+3) &^ 3 }

// dirBlocks bounds the blocks a directory with entries of total size n
// takes once e2fsck -D has rebuilt it (checksum). One that fits a block
// stays a single linear block; a larger one is indexed: a root block, leaf
// blocks packed in hash order (e2fsckConf leaves no slack, so a leaf
// wastes less than the longest entry, 264 bytes), one index block per 510
// leaves past the 508 the root holds, and an extent tree block when the
// blocks, allocated between the files' data, take more than four extents.
func dirBlocks(n int64) int64 {
	usable := int64(blockSize - dirTail)
	if n <= usable {
		return 1
	}
	leaves := ceilDiv(n, usable-264)
	b := 1 + leaves
	if leaves > 508 {
		b += ceilDiv(leaves, 510)
	}
	if b > 4 {
		b += ceilDiv(b, extentsPerBlock)
	}
	return b
}

// fileBlocks bounds the blocks a small regular file of size bytes takes
// (mke2fs leaves all-zero blocks out, which only makes it smaller).
func fileBlocks(size int64) int64 { return ceilDiv(size, blockSize) }

// extentBlocks is the extent tree blocks for a file whose data blocks
// form runs runs: an inode holds four extents. Runs longer than 32768
// blocks take several extents (at most data/32768 more), and the allocator
// splits one more time at each block group start whose superblock backup
// it crosses (at most ceil(data/32768)).
func extentBlocks(runs, data int64) int64 {
	extents := runs + data/maxExtentLen + ceilDiv(data, maxExtentLen)
	if extents <= 4 {
		return 0
	}
	leaves := ceilDiv(extents, extentsPerBlock)
	if leaves > 4 {
		leaves += ceilDiv(leaves, extentsPerBlock) // one index level
	}
	return leaves
}

const (
	// sparseScanMin: files from this size on are read to find the zero
	// blocks mke2fs will leave out; smaller ones are counted in full.
	sparseScanMin = 64 << 10
	// punchMin: zero runs from this length on become holes in the staged
	// file, so mke2fs skips them with SEEK_DATA instead of reading them.
	punchMin = 256 << 10
)

var zeroBlock [blockSize]byte

// scanZeros returns the blocks mke2fs will give the file at p: its
// non-zero 4 KiB blocks (mke2fs skips all-zero ones) plus the extent tree
// blocks their runs need. Long zero runs are punched out of the staged
// file on the way.
func scanZeros(p string, buf []byte) (int64, error) {
	f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW|unix.O_NOATIME, 0)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	var data, runs int64
	inRun := false
	zeroStart := int64(-1) // start of the current zero run
	punch := func(end int64) error {
		if zeroStart >= 0 && end-zeroStart >= punchMin {
			if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, zeroStart, end-zeroStart); err != nil && err != unix.EOPNOTSUPP {
				return fmt.Errorf("%s: punch hole: %w", p, err)
			}
		}
		zeroStart = -1
		return nil
	}
	for off := int64(0); off < size; {
		// Skip what is already a hole on the host.
		next, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil {
			next = off
		}
		if next > off {
			next &^= blockSize - 1
			if next > off {
				inRun = false
				off = next
			}
		}
		n, err := f.ReadAt(buf, off)
		if n == 0 && err != nil {
			if err == io.EOF {
				break
			}
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		for i := 0; i < n; i += blockSize {
			end := min(i+blockSize, n)
			blockOff := off + int64(i)
			if bytes.Equal(buf[i:end], zeroBlock[:end-i]) {
				if zeroStart < 0 {
					zeroStart = blockOff
				}
				inRun = false
				continue
			}
			if err := punch(blockOff); err != nil {
				return 0, err
			}
			data++
			if !inRun {
				runs++
				inRun = true
			}
		}
		off += int64(n)
	}
	if err := punch(size &^ (blockSize - 1)); err != nil {
		return 0, err
	}
	return data + extentBlocks(runs, data), nil
}

// xattrBytes is the space the xattrs of one inode take in ext4's layout
// (16-byte entry header, name and value padded to 4 bytes); the name is
// counted with its namespace prefix, which ext4 stores as an index, so
// this errs on the large side.
func xattrBytes(names []string, valueLen func(string) int) int64 {
	var n int64
	for _, name := range names {
		n += 16 + int64(len(name)+3)&^3 + int64(valueLen(name)+3)&^3
	}
	return n
}

type inodeKey struct{ dev, ino uint64 }

// scan walks the staged tree once, depth first: it sets atime and mtime of
// every entry to min(mtime, limit) (post-order for directories, so reading
// a directory cannot move its atime again), and measures the tree. Nothing
// is followed: symlinks are lstat'ed and their times set with
// AT_SYMLINK_NOFOLLOW.
func scan(ctx context.Context, stage string, limit time.Time, deferred []*tar.Header, sparse map[[2]uint64]layers.BlockCount) (*treeInfo, error) {
	t := &treeInfo{sparse: sparse}
	seen := map[inodeKey]bool{}

	// Deferred devices add an inode each and an entry to their parent.
	extra := map[string]int64{}
	for _, h := range deferred {
		// Checked again as fixupScript writes them; here so a build that
		// cannot finish fails before mke2fs runs.
		if why := unscriptable(h.Name); why != "" {
			return nil, fmt.Errorf("device %q: the name %s, so the device cannot be created inside the image: %w", h.Name, why, core.ErrUnsupported)
		}
		for n := range paxXattrs(h) {
			if why := unscriptable(n); why != "" {
				return nil, fmt.Errorf("device %q: xattr %q %s, so it cannot be set inside the image: %w", h.Name, n, why, core.ErrUnsupported)
			}
		}
		dir, base := path.Split(path.Clean(h.Name))
		extra[path.Clean("/"+dir)] += recLen(len(base))
		t.inodeCount++
		t.xattrBlocks += xattrBlockFor(paxXattrs(h))
		t.devices = append(t.devices, h)
	}
	sort.Slice(t.devices, func(i, j int) bool { return t.devices[i].Name < t.devices[j].Name })

	var walk func(rel string) error
	walk = func(rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		dir := filepath.Join(stage, rel)
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		total := recLen(1) + recLen(2) + extra[path.Clean("/"+filepath.ToSlash(rel))]
		for _, e := range ents {
			name := e.Name()
			total += recLen(len(name))
			p := filepath.Join(dir, name)
			fi, err := e.Info()
			if err != nil {
				return err
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("%s: no stat data", p)
			}
			if fi.IsDir() {
				if err := walk(filepath.Join(rel, name)); err != nil {
					return err
				}
			} else if fi.Mode().IsRegular() && st.Nlink > 1 {
				k := inodeKey{uint64(st.Dev), st.Ino}
				if seen[k] {
					continue // another name of an inode already counted
				}
				seen[k] = true
			}
			touched, err := account(t, p, path.Join(filepath.ToSlash(rel), name), fi)
			if err != nil {
				return err
			}
			// A directory's atime moved when walk read it (relatime), and
			// a scanned file's mtime when its zero blocks became holes, so
			// those are always set; other entries only when they differ.
			if err := clampTimes(p, st, limit, fi.IsDir() || touched); err != nil {
				return err
			}
		}
		t.dirBlocks += dirBlocks(total)
		return nil
	}
	if err := walk("."); err != nil {
		return nil, fmt.Errorf("staging tree: %w", err)
	}

	var root unix.Stat_t
	if err := unix.Lstat(stage, &root); err != nil {
		return nil, fmt.Errorf("staging tree: %w", err)
	}
	t.rootMode, t.rootUID, t.rootGID = root.Mode&0o7777, root.Uid, root.Gid
	return t, nil
}

// account adds one inode (staged at p, rel below the root) to the totals.
// It reports whether it changed the file (punched holes).
func account(t *treeInfo, p, rel string, fi os.FileInfo) (touched bool, err error) {
	t.inodeCount++
	switch {
	case fi.Mode().IsRegular() && fi.Size() >= sparseScanMin:
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if bc, ok := t.sparse[[2]uint64{uint64(st.Dev), st.Ino}]; ok {
				t.dataBlocks += bc.Data + extentBlocks(bc.Runs, bc.Data)
				break
			}
		}
		blocks, err := scanZeros(p, t.buf())
		if err != nil {
			return true, err
		}
		t.dataBlocks += blocks
		touched = true
	case fi.Mode().IsRegular():
		t.dataBlocks += fileBlocks(fi.Size())
	case fi.Mode()&os.ModeSymlink != 0:
		if fi.Size() > fastSymlinkMax {
			t.linkBlocks++
		}
	}
	names, err := listXattrs(p)
	if err != nil {
		return touched, err
	}
	if len(names) > 1 {
		t.multiXattr = append(t.multiXattr, rel)
	}
	if len(names) > 0 {
		sizes := map[string]int{}
		for _, n := range names {
			sz, err := unix.Lgetxattr(p, n, nil)
			if err != nil {
				return touched, fmt.Errorf("%s: xattr %s: %w", p, n, err)
			}
			sizes[n] = sz
		}
		if xattrBytes(names, func(n string) int { return sizes[n] }) > inodeXattrSpace {
			t.xattrBlocks++
		}
	}
	return touched, nil
}

func xattrBlockFor(x map[string]string) int64 {
	names := make([]string, 0, len(x))
	for n := range x {
		names = append(names, n)
	}
	if xattrBytes(names, func(n string) int { return len(x[n]) }) > inodeXattrSpace {
		return 1
	}
	return 0
}

// paxXattrs returns the xattrs a tar header carries.
func paxXattrs(h *tar.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			out[name] = v
		}
	}
	return out
}

func listXattrs(p string) ([]string, error) {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil {
		if err == unix.ENOTSUP {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: list xattrs: %w", p, err)
	}
	if sz == 0 {
		return nil, nil
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, fmt.Errorf("%s: list xattrs: %w", p, err)
	}
	var names []string
	for _, n := range strings.Split(string(buf[:sz]), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

// clampTimes sets atime and mtime to min(mtime, limit), keeping
// nanoseconds when the mtime is not clamped; st is the entry's stat from
// before anything read it.
func clampTimes(p string, st *syscall.Stat_t, limit time.Time, always bool) error {
	m := unix.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}
	if st.Mtim.Sec > limit.Unix() || (st.Mtim.Sec == limit.Unix() && st.Mtim.Nsec > 0) {
		m = unix.Timespec{Sec: limit.Unix()}
	}
	if !always && st.Atim == st.Mtim && m.Sec == st.Mtim.Sec && m.Nsec == st.Mtim.Nsec {
		return nil
	}
	ts := []unix.Timespec{m, m}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: set times: %w", p, err)
	}
	return nil
}

func getXattr(p, name string) ([]byte, error) {
	for {
		sz, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, name, err)
		}
		v := make([]byte, sz)
		n, err := unix.Lgetxattr(p, name, v)
		if err == unix.ERANGE {
			continue // grew in between
		}
		if err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, name, err)
		}
		return v[:n], nil
	}
}
