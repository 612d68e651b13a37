package ext4stream

import (
	"archive/tar"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// The writer lays the file system out in one pass over the tree:
//
//	block 0                 superblock (at byte 1024)
//	blocks 1..gdtReserve    group descriptors (reserved for the largest
//	                        image the cap allows; the unused ones are free)
//	data                    file contents and slow symlink targets, in tree
//	                        order, written as they arrive; all-zero blocks
//	                        are left out (holes)
//	tail                    extent tree blocks, directories, xattr blocks,
//	                        inode tables, block bitmaps, inode bitmaps
//	free                    headroom and the 2 MiB alignment
//
// flex_bg lets group metadata live anywhere, so nothing interrupts the data
// and the tail can be sized once the tree has ended; sparse_super2 without
// backup groups keeps every group but the first free of superblock copies.
// Everything is a function of the tree and the spec, so the bytes are
// reproducible.

// The writer keeps what it learns about the tree compact, since it holds
// all of it until the metadata is written: one fixed-size record per inode
// in one slice, the common case inline (one extent, mtime; atime, ctime
// and crtime are the build time) and the rare parts in side tables keyed
// by inode number; directory entries hold their leaf name in one byte
// arena, and a name is found by walking its components from the root
// (lookup.go). A tree of small files costs about 130 bytes per entry
// (TestPlanHeapPerEntry).

// inode is one inode under construction. Reserved inodes are all zero
// (mode 0).
type inode struct {
	size     int64
	mtime    int64  // seconds (stamp.sec)
	mtimeNs  uint32 // stamp.nsec
	uid, gid uint32
	// The extents: data, then the directory blocks. The only one is
	// held here (most files have exactly one); more than one are
	// w.extents[more:more+extents].
	extents     uint32
	more        uint32
	lblk, start uint32 // the only extent
	n           uint16
	mode        uint16 // type and permission bits
	links       uint16 // names; directories count their subdirectories (dirInfo)
	flags       uint8
	// dir is, for a directory, its index in w.dirs; for a fast symlink,
	// where its target starts in w.text.
	dir uint32
}

// inode flags: which side tables hold something for the inode.
const (
	flagImplied uint8 = 1 << iota // a directory no entry declared (yet)
	flagTimes                     // w.times holds its atime and ctime
	flagXattrs                    // w.xattrs holds its xattrs
	flagTree                      // w.trees holds its extent tree
)

func (n *inode) isDir() bool { return n.mode&sIFMT == sIFDIR }

type extent struct {
	lblk, start uint32
	n           uint16
}

// dirInfo is what a directory holds beyond its inode.
type dirInfo struct {
	first, last uint32 // its entries: a list through w.dirents (0 ends it), in link order
	parent      uint32 // the inode of ".."
	subdirs     uint32
}

// dirent is one name in a directory: the leaf name is w.text[name:name+nameLen].
type dirent struct {
	parent, ino uint32
	name        uint32
	next        uint32 // the directory's next entry
	nameLen     uint8
	ft          uint8
}

// inodeXattrs are an inode's xattrs: in the inode record, and in its
// xattr block (blk, set by finish).
type inodeXattrs struct {
	inInode, inBlock []*xattr
	blk              uint32
}

// extentTree is the extent tree of an inode with more extents than the
// inode record holds: its i_block and the tree blocks (for i_blocks).
type extentTree struct {
	root   [60]byte
	blocks uint32
}

// An inode's extents are placed by appending them to w.extents from
// where they begin (addRun) and then handing them to the inode
// (setExtents): one moves into the inode record, more stay where they
// are. Nothing is copied, so a file of a million extents needs their
// 12 bytes each once.

// addRun maps count logical blocks from lblk to physical blocks from phys
// for the inode whose extents begin at w.extents[from], merging into
// extents as block-by-block mapping would.
func (w *fsWriter) addRun(from int, lblk, phys, count uint32) {
	for count > 0 {
		if k := len(w.extents); k > from {
			e := &w.extents[k-1]
			if e.lblk+uint32(e.n) == lblk && e.start+uint32(e.n) == phys && e.n < maxExtentLen {
				take := min(count, maxExtentLen-uint32(e.n))
				e.n += uint16(take)
				lblk, phys, count = lblk+take, phys+take, count-take
				continue
			}
		}
		take := min(count, maxExtentLen)
		w.extents = append(w.extents, extent{lblk: lblk, start: phys, n: uint16(take)})
		lblk, phys, count = lblk+take, phys+take, count-take
	}
}

// setExtents gives the inode the extents w.extents[from:] (it had none).
func (w *fsWriter) setExtents(ino uint32, from int) {
	n := w.node(ino)
	ext := w.extents[from:]
	n.extents = uint32(len(ext))
	switch len(ext) {
	case 0:
	case 1:
		n.lblk, n.start, n.n = ext[0].lblk, ext[0].start, ext[0].n
		w.extents = w.extents[:from]
	default:
		n.more = uint32(from)
	}
}

// extentsOf returns the inode's extents; one is copied into one, so
// that the common case allocates nothing.
func (w *fsWriter) extentsOf(n *inode, one *[1]extent) []extent {
	switch n.extents {
	case 0:
		return nil
	case 1:
		one[0] = extent{lblk: n.lblk, start: n.start, n: n.n}
		return one[:]
	}
	return w.extents[n.more : n.more+n.extents]
}

// firstBlock is where the inode's first extent starts.
func (w *fsWriter) firstBlock(n *inode) uint32 {
	if n.extents == 1 {
		return n.start
	}
	return w.extents[n.more].start
}

// dataBlocks counts the blocks the extents map.
func (w *fsWriter) dataBlocks(n *inode) int64 {
	var one [1]extent
	var b int64
	for _, e := range w.extentsOf(n, &one) {
		b += int64(e.n)
	}
	return b
}

// writeBuf is the data staging buffer: blocks are appended and flushed to
// the image in large sequential writes.
const writeBuf = 1 << 20

// fsWriter builds one image.
type fsWriter struct {
	f           *os.File
	now         stamp  // BuildSpec.Time: invented times
	limitBlocks int64  // the image may not exceed this many blocks
	gdtReserve  uint32 // descriptor blocks reserved after the superblock
	dataStart   uint32
	next        uint32 // next free block
	buf         []byte // blocks from bufStart not written yet
	bufStart    uint32
	exceeded    bool // the image outgrew limitBlocks

	nodes   []inode  // index ino-1
	extents []extent // extents of inodes with more than one
	dirs    []dirInfo
	dirents []dirent // [0] is unused: index 0 ends a list
	text    []byte   // leaf names, fast symlink targets, slow symlink targets to copy
	lookup  lookupIndex
	// Side tables of the rare parts, by inode number.
	times  map[uint32][2]stamp // atime and ctime the tree carried
	devs   map[uint32][2]uint32
	xattrs map[uint32]*inodeXattrs
	trees  map[uint32]*extentTree

	// Content is only allocated here and copied after the metadata is
	// written (content.go); src is the entry being added's.
	src     plannedSource
	files   sources
	jobs    []copyJob
	scratch []byte // zeroRuns' read buffer
	// dataEnd and metaEnd are the first block after the data and after
	// the metadata, set by finish.
	dataEnd, metaEnd int64
	// progress, when set, is told the data blocks the build copied
	// of all of them (ports.BuildSpec.Progress).
	progress func(done, total int64)
}

var zeroBlock [blockSize]byte

func newFSWriter(f *os.File, now stamp, limitBlocks int64, gdtReserve uint32) *fsWriter {
	w := &fsWriter{
		f:           f,
		now:         now,
		limitBlocks: limitBlocks,
		gdtReserve:  gdtReserve,
		dataStart:   1 + gdtReserve,
		buf:         make([]byte, 0, writeBuf),
		nodes:       make([]inode, firstIno-1),
		dirents:     make([]dirent, 1),
		lookup:      newLookupIndex(),
		times:       map[uint32][2]stamp{},
		devs:        map[uint32][2]uint32{},
		xattrs:      map[uint32]*inodeXattrs{},
		trees:       map[uint32]*extentTree{},
	}
	w.next, w.bufStart = w.dataStart, w.dataStart
	w.nodes[rootIno-1] = w.newDir(0o755)
	w.dirs[w.nodes[rootIno-1].dir].parent = rootIno
	// lost+found takes the first regular inode, as mke2fs gives it.
	w.nodes = append(w.nodes, w.newDir(0o700))
	w.link(rootIno, "lost+found", lostFoundNo)
	return w
}

// grow makes room for about n more inodes and names at once (the tree's
// size is known), so that the big slices are not grown by doubling.
func (w *fsWriter) grow(n int) {
	w.nodes = slices.Grow(w.nodes, n)
	w.dirents = slices.Grow(w.dirents, n)
}

// newDir returns an implied directory's inode, its dirInfo added.
func (w *fsWriter) newDir(perm uint16) inode {
	w.dirs = append(w.dirs, dirInfo{})
	return inode{mode: sIFDIR | perm, mtime: w.now.sec, mtimeNs: w.now.nsec, flags: flagImplied, dir: uint32(len(w.dirs) - 1)}
}

// link adds name for ino to the directory dirIno.
func (w *fsWriter) link(dirIno uint32, name string, ino uint32) {
	n := w.node(ino)
	d := &w.dirs[w.node(dirIno).dir]
	at := uint32(len(w.dirents))
	w.dirents = append(w.dirents, dirent{parent: dirIno, ino: ino, name: uint32(len(w.text)), nameLen: uint8(len(name)), ft: fileType(n.mode)})
	w.text = append(w.text, name...)
	if d.last == 0 {
		d.first = at
	} else {
		w.dirents[d.last].next = at
	}
	d.last = at
	w.lookup.add(at, dirIno, name)
	n.links++
	if n.isDir() {
		d.subdirs++
		w.dirs[n.dir].parent = dirIno
	}
}

// direntName is the leaf name of dirent i.
func (w *fsWriter) direntName(i uint32) []byte {
	e := &w.dirents[i]
	return w.text[e.name : e.name+uint32(e.nameLen)]
}

func fileType(mode uint16) uint8 {
	switch mode & sIFMT {
	case sIFREG:
		return ftReg
	case sIFDIR:
		return ftDir
	case sIFLNK:
		return ftSymlink
	case sIFCHR:
		return ftChr
	case sIFBLK:
		return ftBlk
	case sIFIFO:
		return ftFifo
	}
	return 0
}

func (w *fsWriter) node(ino uint32) *inode { return &w.nodes[ino-1] }

// errLimit reports that the image outgrew limitBlocks.
var errLimit = errors.New("image size limit reached")

// add places one entry; a regular file's content (w.src) and a slow
// symlink's target get their blocks in the data area.
func (w *fsWriter) add(it *item) error {
	if ino, ok := w.find(it.name); ok {
		n := w.node(ino)
		if n.flags&flagImplied == 0 || it.typ != tar.TypeDir {
			if it.name == "lost+found" {
				return reject(it.raw, ruleReservedName, "lost+found must be a directory, named at most once")
			}
			return reject(it.raw, ruleDuplicateEntry, "%q already exists", it.name)
		}
		// A directory declared after it was implied (or one of the
		// invented ones): the declaration sets its metadata.
		n.flags &^= flagImplied
		n.mode = sIFDIR | it.perm
		w.setMeta(ino, it)
		return w.setXattrs(it, ino)
	}
	// Names and symlink targets are found by 32-bit offsets in w.text.
	if len(w.text) > math.MaxUint32-2*maxPath {
		return fmt.Errorf("tree entry %q: more than 4 GiB of names and symlink targets: %w", it.raw, core.ErrUnsupported)
	}
	parent, err := w.parentOf(it)
	if err != nil {
		return err
	}
	base := path.Base(it.name)
	if it.typ == tar.TypeLink {
		ino, ok := w.find(it.link)
		switch {
		case !ok:
			return reject(it.raw, ruleHardlinkMissing, "target %q is not an earlier entry", it.link)
		case w.node(ino).isDir():
			return reject(it.raw, ruleHardlinkDir, "target %q is a directory", it.link)
		case w.node(ino).mode&sIFMT != sIFREG:
			return reject(it.raw, ruleHardlinkNotRegular, "target %q is not a regular file", it.link)
		case w.node(ino).links >= linkMax:
			return fmt.Errorf("tree entry %q: more than %d names for one file (ext4's maximum link count): %w",
				it.raw, linkMax, core.ErrUnsupported)
		}
		w.link(parent, base, ino)
		return nil
	}
	var n inode
	switch it.typ {
	case tar.TypeDir:
		n = w.newDir(0)
		n.flags = 0
	case tar.TypeReg:
		n.mode, n.size = sIFREG, it.size
	case tar.TypeSymlink:
		n.mode, n.size = sIFLNK, int64(len(it.link))
	case tar.TypeChar:
		n.mode = sIFCHR
	case tar.TypeBlock:
		n.mode = sIFBLK
	case tar.TypeFifo:
		n.mode = sIFIFO
	}
	n.mode = n.mode&sIFMT | it.perm
	if it.typ == tar.TypeSymlink {
		n.mode = sIFLNK | 0o777 // symlink permissions mean nothing; 0777 as everywhere
	}
	w.nodes = append(w.nodes, n)
	ino := uint32(len(w.nodes))
	w.setMeta(ino, it)
	if err := w.setXattrs(it, ino); err != nil {
		return err
	}
	if it.typ == tar.TypeChar || it.typ == tar.TypeBlock {
		w.devs[ino] = [2]uint32{it.major, it.minor}
	}
	w.link(parent, base, ino)
	switch {
	case it.typ == tar.TypeReg:
		return w.allocData(ino, it.size)
	case it.typ == tar.TypeSymlink && len(it.link) > fastSymlinkMax:
		return w.allocInline(ino, it.link)
	case it.typ == tar.TypeSymlink:
		w.node(ino).dir = uint32(len(w.text))
		w.text = append(w.text, it.link...)
	}
	return nil
}

// setMeta copies owner and times; atime and ctime the tree does not carry
// are the build time (w.times holds the others).
func (w *fsWriter) setMeta(ino uint32, it *item) {
	n := w.node(ino)
	n.uid, n.gid = it.uid, it.gid
	m := stampOf(it.mtime)
	n.mtime, n.mtimeNs = m.sec, m.nsec
	n.flags &^= flagTimes
	delete(w.times, ino)
	if !it.atime.IsZero() || !it.ctime.IsZero() {
		t := [2]stamp{w.now, w.now}
		if !it.atime.IsZero() {
			t[0] = stampOf(it.atime)
		}
		if !it.ctime.IsZero() {
			t[1] = stampOf(it.ctime)
		}
		w.times[ino] = t
		n.flags |= flagTimes
	}
}

// times returns the inode's atime and ctime.
func (w *fsWriter) timesOf(ino uint32, n *inode) (atime, ctime stamp) {
	if n.flags&flagTimes != 0 {
		t := w.times[ino]
		return t[0], t[1]
	}
	return w.now, w.now
}

func (w *fsWriter) setXattrs(it *item, ino uint32) error {
	in, blk, err := splitXattrs(it.xattrs)
	if err != nil {
		return fmt.Errorf("tree entry %q: %v: %w", it.raw, err, errXattrUnsupported)
	}
	n := w.node(ino)
	n.flags &^= flagXattrs
	delete(w.xattrs, ino)
	if len(in)+len(blk) > 0 {
		w.xattrs[ino] = &inodeXattrs{inInode: in, inBlock: blk}
		n.flags |= flagXattrs
	}
	return nil
}

var errXattrUnsupported = fmt.Errorf("xattrs larger than one block (no ea_inode): %w", core.ErrUnsupported)

// parentOf returns the directory it goes in. Every ancestor that exists
// must be a directory: never a symlink (a tree is already resolved;
// nothing is written through a link) and never a file. A missing ancestor
// is created as an implied directory (0755, root, the build time), as tar
// -x would; the contract says parents come first, so this is only leniency.
func (w *fsWriter) parentOf(it *item) (uint32, error) {
	dir := path.Dir(it.name)
	if dir == "." {
		return rootIno, nil
	}
	// Walk down from the root while the components exist: nothing is
	// ever placed below a non-directory, so the last one found is the
	// deepest ancestor that exists.
	at, rest := uint32(rootIno), dir
	end := 0 // dir[:end] is the path of at
	for rest != "" {
		c, tail, _ := strings.Cut(rest, "/")
		ino, ok := w.child(at, c)
		if !ok {
			break
		}
		if n := w.node(ino); !n.isDir() {
			p := dir[:end+len(c)]
			if end > 0 {
				p = dir[:end+1+len(c)]
			}
			if n.mode&sIFMT == sIFLNK {
				return 0, reject(it.raw, ruleParentSymlink, "%q is a symlink", p)
			}
			return 0, reject(it.raw, ruleParentNotDir, "%q is not a directory", p)
		}
		if end > 0 {
			end++
		}
		end += len(c)
		at, rest = ino, tail
	}
	for rest != "" {
		c, tail, _ := strings.Cut(rest, "/")
		w.nodes = append(w.nodes, w.newDir(0o755))
		ino := uint32(len(w.nodes))
		w.link(at, c, ino)
		at, rest = ino, tail
	}
	return at, nil
}

// appendBlocks adds whole blocks after everything written so far and
// returns the first one's number.
func (w *fsWriter) appendBlocks(b []byte) (uint32, error) {
	first := w.next
	for len(b) > 0 {
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
		n := copy(w.buf[len(w.buf):cap(w.buf)], b)
		w.buf = w.buf[:len(w.buf)+n]
		b = b[n:]
	}
	w.next = w.bufStart + uint32(len(w.buf)/blockSize)
	if int64(w.next) > w.limitBlocks {
		w.exceeded = true
		return 0, errLimit
	}
	return first, nil
}

func (w *fsWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.f.WriteAt(w.buf, int64(w.bufStart)*blockSize); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	w.bufStart += uint32(len(w.buf) / blockSize)
	w.buf = w.buf[:0]
	return nil
}
