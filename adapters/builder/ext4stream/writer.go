package ext4stream

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path"

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

// node is one inode under construction.
type node struct {
	mode                        uint16 // type and permission bits
	uid, gid                    uint32
	size                        int64
	atime, ctime, mtime, crtime stamp
	links                       uint32
	extents                     []extent // data, then the directory blocks
	treeBlocks                  uint32   // extent tree blocks, for i_blocks
	root                        []byte   // i_block of files with an extent tree
	target                      string   // fast symlink target
	major, minor                uint32
	inInode, inBlock            []*xattr
	xattrBlk                    uint32
	kids                        []dirent // directories
	subdirs                     uint32
	parent                      uint32 // directories: the inode of ".."
	implied                     bool   // a directory no entry declared (yet)
}

type extent struct {
	lblk, start uint32
	n           uint16
}

type dirent struct {
	name string
	ino  uint32
	ft   uint8
}

func (n *node) isDir() bool { return n.mode&sIFMT == sIFDIR }

// dataBlocks counts the blocks the extents map.
func (n *node) dataBlocks() int64 {
	var b int64
	for _, e := range n.extents {
		b += int64(e.n)
	}
	return b
}

// addRun maps count logical blocks of n from lblk to physical blocks from
// phys, merging into extents as block-by-block mapping would.
func (n *node) addRun(lblk, phys, count uint32) {
	for count > 0 {
		if k := len(n.extents); k > 0 {
			e := &n.extents[k-1]
			if e.lblk+uint32(e.n) == lblk && e.start+uint32(e.n) == phys && e.n < maxExtentLen {
				take := min(count, maxExtentLen-uint32(e.n))
				e.n += uint16(take)
				lblk, phys, count = lblk+take, phys+take, count-take
				continue
			}
		}
		take := min(count, maxExtentLen)
		n.extents = append(n.extents, extent{lblk: lblk, start: phys, n: uint16(take)})
		lblk, phys, count = lblk+take, phys+take, count-take
	}
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

	nodes []*node           // index ino-1; reserved inodes are nil
	names map[string]uint32 // entry name -> inode, for parents, duplicates and hard links

	// Content is only allocated here and copied after the metadata is
	// written (content.go); src is the entry being added's.
	src     *plannedSource
	jobs    []copyJob
	scratch []byte // zeroRuns' read buffer
	// dataEnd and metaEnd are the first block after the data and after
	// the metadata, set by finish.
	dataEnd, metaEnd int64
	// declared names the invented entries ("." and lost+found) a tree
	// entry has overridden once.
	declared map[string]bool
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
		nodes:       make([]*node, firstIno-1),
		names:       map[string]uint32{},
		declared:    map[string]bool{},
	}
	w.next, w.bufStart = w.dataStart, w.dataStart
	root := w.newDir(0o755)
	root.parent = rootIno
	w.nodes[rootIno-1] = root
	w.names["."] = rootIno
	// lost+found takes the first regular inode, as mke2fs gives it.
	w.nodes = append(w.nodes, w.newDir(0o700))
	w.names["lost+found"] = lostFoundNo
	w.link(rootIno, "lost+found", lostFoundNo)
	return w
}

func (w *fsWriter) newDir(perm uint16) *node {
	return &node{mode: sIFDIR | perm, atime: w.now, ctime: w.now, mtime: w.now, crtime: w.now, implied: true}
}

// link adds name for ino to the directory dirIno.
func (w *fsWriter) link(dirIno uint32, name string, ino uint32) {
	dir, n := w.node(dirIno), w.node(ino)
	dir.kids = append(dir.kids, dirent{name: name, ino: ino, ft: fileType(n.mode)})
	n.links++
	if n.isDir() {
		dir.subdirs++
		n.parent = dirIno
	}
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

func (w *fsWriter) node(ino uint32) *node { return w.nodes[ino-1] }

// errLimit reports that the image outgrew limitBlocks.
var errLimit = errors.New("image size limit reached")

// add places one entry; a regular file's content (w.src) and a slow
// symlink's target get their blocks in the data area.
func (w *fsWriter) add(it *item) error {
	if ino, ok := w.names[it.name]; ok {
		n := w.node(ino)
		if !n.implied || it.typ != tar.TypeDir || w.declared[it.name] {
			if it.name == "lost+found" {
				return reject(it.raw, ruleReservedName, "lost+found must be a directory, named at most once")
			}
			return reject(it.raw, ruleDuplicateEntry, "%q already exists", it.name)
		}
		// A directory declared after it was implied (or one of the
		// invented ones): the declaration sets its metadata.
		w.declared[it.name] = true
		n.implied = false
		n.mode = sIFDIR | it.perm
		w.setMeta(n, it)
		return w.setXattrs(it, n)
	}
	parent, err := w.parentOf(it)
	if err != nil {
		return err
	}
	base := path.Base(it.name)
	if it.typ == tar.TypeLink {
		ino, ok := w.names[it.link]
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
		w.names[it.name] = ino
		w.link(parent, base, ino)
		return nil
	}
	n := &node{crtime: w.now}
	w.setMeta(n, it)
	switch it.typ {
	case tar.TypeDir:
		n.mode = sIFDIR
	case tar.TypeReg:
		n.mode, n.size = sIFREG, it.size
	case tar.TypeSymlink:
		n.mode, n.size = sIFLNK, int64(len(it.link))
	case tar.TypeChar:
		n.mode, n.major, n.minor = sIFCHR, it.major, it.minor
	case tar.TypeBlock:
		n.mode, n.major, n.minor = sIFBLK, it.major, it.minor
	case tar.TypeFifo:
		n.mode = sIFIFO
	}
	n.mode |= it.perm
	if it.typ == tar.TypeSymlink {
		n.mode = sIFLNK | 0o777 // symlink permissions mean nothing; 0777 as everywhere
	}
	if err := w.setXattrs(it, n); err != nil {
		return err
	}
	w.nodes = append(w.nodes, n)
	ino := uint32(len(w.nodes))
	w.names[it.name] = ino
	w.link(parent, base, ino)
	switch {
	case it.typ == tar.TypeReg:
		return w.allocData(n, it.size)
	case it.typ == tar.TypeSymlink && len(it.link) > fastSymlinkMax:
		return w.allocInline(n, []byte(it.link))
	case it.typ == tar.TypeSymlink:
		n.target = it.link
	}
	return nil
}

// setMeta copies owner and times; atime and ctime the tree does not carry
// are the build time.
func (w *fsWriter) setMeta(n *node, it *item) {
	n.uid, n.gid = it.uid, it.gid
	n.mtime = stampOf(it.mtime)
	n.atime, n.ctime = w.now, w.now
	if !it.atime.IsZero() {
		n.atime = stampOf(it.atime)
	}
	if !it.ctime.IsZero() {
		n.ctime = stampOf(it.ctime)
	}
}

func (w *fsWriter) setXattrs(it *item, n *node) error {
	in, blk, err := splitXattrs(it.xattrs)
	if err != nil {
		return fmt.Errorf("tree entry %q: %v: %w", it.raw, err, errXattrUnsupported)
	}
	n.inInode, n.inBlock = in, blk
	return nil
}

var errXattrUnsupported = fmt.Errorf("xattrs larger than one block (no ea_inode): %w", core.ErrUnsupported)

// parentOf returns the directory it goes in. Every ancestor that exists
// must be a directory: never a symlink (a tree is already resolved;
// nothing is written through a link) and never a file. A missing ancestor
// is created as an implied directory (0755, root, the build time), as tar
// -x would; the contract says parents come first, so this is only leniency.
func (w *fsWriter) parentOf(it *item) (uint32, error) {
	var missing []string
	dir := path.Dir(it.name)
	for ; dir != "."; dir = path.Dir(dir) {
		if _, ok := w.names[dir]; ok {
			break
		}
		missing = append(missing, dir)
	}
	at := w.names[dir]
	switch n := w.node(at); {
	case n.mode&sIFMT == sIFLNK:
		return 0, reject(it.raw, ruleParentSymlink, "%q is a symlink", dir)
	case !n.isDir():
		return 0, reject(it.raw, ruleParentNotDir, "%q is not a directory", dir)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		w.nodes = append(w.nodes, w.newDir(0o755))
		ino := uint32(len(w.nodes))
		w.names[missing[i]] = ino
		w.link(at, path.Base(missing[i]), ino)
		at = ino
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
