package ext4stream

import (
	"fmt"
	"math"

	"github.com/cubesandbox/templatecenter/core"
)

// alignBlocks is the image size granularity in blocks (2 MiB).
const alignBlocks = Alignment / blockSize

// geometry is the group layout of a finished image.
type geometry struct {
	blocks         int64 // total blocks (a multiple of alignBlocks)
	blocksPerGroup int64
	groups         int64
	inodesPerGroup int64
}

// layout chooses the geometry for used blocks (everything but inode
// tables and bitmaps), inodes inodes and headroom free blocks. Groups
// normally span 32768 blocks; an image with far more inodes than blocks
// gets smaller groups, since a group holds at most 32768 inodes, so that
// it stays sized to its content.
func layout(used, inodes, headroom int64) geometry {
	g := geometry{blocksPerGroup: blocksPerGroup, groups: max(1, ceilDiv(used, blocksPerGroup))}
	for {
		g.groups = max(g.groups, ceilDiv(inodes, blockSize*8))
		g.inodesPerGroup = max(inodesPerBlock, roundUp(ceilDiv(inodes, g.groups), inodesPerBlock))
		meta := g.groups*g.inodesPerGroup/inodesPerBlock + 2*g.groups
		g.blocks = roundUp(used+meta+headroom, alignBlocks)
		switch need := ceilDiv(g.blocks, g.blocksPerGroup); {
		case need > g.groups:
			g.groups = need
			continue
		case need < g.groups:
			// More groups than the blocks fill: shrink the groups (a
			// multiple of 512 blocks, mke2fs's minimum is 256) and, if
			// rounding left the last group empty, give it 512 blocks.
			// e2fsck also wants a group to span its inode table and four
			// more blocks (inodes_per_group <= inodes_per_block *
			// (blocks_per_group - 4)), which an inode-heavy image's
			// share of the blocks can fall short of.
			g.blocksPerGroup = min(blocksPerGroup, roundUp(max(ceilDiv(g.blocks, g.groups), g.inodesPerGroup/inodesPerBlock+4), alignBlocks))
			if (g.groups-1)*g.blocksPerGroup >= g.blocks {
				g.blocks = (g.groups-1)*g.blocksPerGroup + alignBlocks
			}
		}
		return g
	}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
func roundUp(a, b int64) int64 { return ceilDiv(a, b) * b }

// finish writes everything after the data and then the head, and returns
// the image size in bytes. headroom is in blocks and inodes.
func (w *fsWriter) finish(headroomBlocks, headroomInodes int64, id [16]byte) (int64, error) {
	// Everything placed so far is data.
	if err := w.flush(); err != nil {
		return 0, err
	}
	w.dataEnd = int64(w.next)
	// Directories, then extent tree blocks (of files and directories),
	// then xattr blocks, each in inode order.
	for ino := uint32(1); ino <= uint32(len(w.nodes)); ino++ {
		if n := w.node(ino); n.isDir() {
			if err := w.writeDir(ino, n); err != nil {
				return 0, err
			}
		}
	}
	for ino := uint32(1); ino <= uint32(len(w.nodes)); ino++ {
		if n := w.node(ino); n.extents > 4 {
			if err := w.writeExtentTree(ino, n); err != nil {
				return 0, err
			}
		}
	}
	blk := make([]byte, blockSize)
	for ino := uint32(1); ino <= uint32(len(w.nodes)); ino++ {
		if w.node(ino).flags&flagXattrs == 0 {
			continue
		}
		x := w.xattrs[ino]
		if len(x.inBlock) == 0 {
			continue
		}
		clear(blk)
		xattrBlock(blk, x.inBlock)
		b, err := w.appendBlocks(blk)
		if err != nil {
			return 0, err
		}
		x.blk = b
	}

	lastIno := int64(len(w.nodes))
	g := layout(int64(w.next), lastIno+headroomInodes, headroomBlocks)

	if n := g.groups * g.inodesPerGroup; n > math.MaxUint32 {
		return 0, &core.FieldError{Field: "HeadroomInodes", Reason: fmt.Sprintf(
			"the tree's %d inodes and %d of headroom round to %d inodes in whole groups, more than ext4's %d", lastIno, headroomInodes, n, uint32(math.MaxUint32))}
	}
	if g.blocks > w.limitBlocks {
		w.exceeded = true
		return 0, errLimit
	}
	gdtBlocks := ceilDiv(g.groups, descsPerBlock)
	if gdtBlocks > int64(w.gdtReserve) {
		// Descriptor blocks are reserved by image size, for groups of
		// 32768 blocks; this many inodes for so few blocks needs smaller
		// groups than that reserve holds.
		return 0, fmt.Errorf("%d inodes (%d of them headroom) in a %d-block image need %d block groups, %d descriptor blocks, and %d are reserved for an image this size: lower HeadroomInodes or raise MaxSizeBytes: %w",
			lastIno+headroomInodes, headroomInodes, g.blocks, g.groups, gdtBlocks, w.gdtReserve, core.ErrUnsupported)
	}

	// Inode tables: one array indexed by inode number, group after group.
	// Only the used part is written; the rest of the file is zero.
	itStart := int64(w.next)
	itBlocks := g.groups * g.inodesPerGroup / inodesPerBlock
	if err := w.writeInodes(g); err != nil {
		return 0, err
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	w.next = uint32(itStart + itBlocks)
	w.bufStart = w.next
	bbStart := int64(w.next)
	ibStart := bbStart + g.groups
	metaEnd := ibStart + g.groups
	w.metaEnd = metaEnd

	// Used blocks are two ranges: the superblock with the descriptors in
	// use, and everything from the data on to the last bitmap.
	used := [][2]int64{{0, 1 + gdtBlocks}, {int64(w.dataStart), metaEnd}}
	gdt := make([]byte, gdtBlocks*blockSize)
	var freeBlocks, freeInodes int64
	for grp := int64(0); grp < g.groups; grp++ {
		first := grp * g.blocksPerGroup
		n := min(g.blocksPerGroup, g.blocks-first)
		clear(blk)
		inUse := int64(0)
		for _, r := range used {
			lo, hi := max(r[0], first), min(r[1], first+n)
			for b := lo; b < hi; b++ {
				setBit(blk, b-first)
			}
			inUse += max(0, hi-lo)
		}
		for b := n; b < blockSize*8; b++ {
			setBit(blk, b) // padding past the group's end
		}
		if _, err := w.appendBlocks(blk); err != nil {
			return 0, err
		}
		d := gdt[grp*descSize:]
		le.PutUint32(d[gdBlockBitmap:], uint32(bbStart+grp))
		le.PutUint32(d[gdInodeBitmap:], uint32(ibStart+grp))
		le.PutUint32(d[gdInodeTable:], uint32(itStart+grp*g.inodesPerGroup/inodesPerBlock))
		le.PutUint16(d[gdFreeBlocks:], uint16(n-inUse))
		freeBlocks += n - inUse
	}
	for grp := int64(0); grp < g.groups; grp++ {
		clear(blk)
		first := grp*g.inodesPerGroup + 1
		usedInodes, dirs := int64(0), 0
		for i := int64(0); i < g.inodesPerGroup; i++ {
			ino := first + i
			if ino > lastIno {
				break
			}
			setBit(blk, i)
			usedInodes++
			if w.nodes[ino-1].isDir() {
				dirs++
			}
		}
		for b := g.inodesPerGroup; b < blockSize*8; b++ {
			setBit(blk, b)
		}
		if _, err := w.appendBlocks(blk); err != nil {
			return 0, err
		}
		d := gdt[grp*descSize:]
		le.PutUint16(d[gdFreeInodes:], uint16(g.inodesPerGroup-usedInodes))
		le.PutUint16(d[gdUsedDirs:], uint16(dirs))
		freeInodes += g.inodesPerGroup - usedInodes
	}
	if err := w.flush(); err != nil {
		return 0, err
	}

	head := make([]byte, blockSize)
	w.superblock(head[superblockOffset:superblockOffset+1024], g, freeBlocks, freeInodes, id)
	if _, err := w.f.WriteAt(head, 0); err != nil {
		return 0, fmt.Errorf("write superblock: %w", err)
	}
	if _, err := w.f.WriteAt(gdt, blockSize); err != nil {
		return 0, fmt.Errorf("write group descriptors: %w", err)
	}
	size := g.blocks * blockSize
	if err := w.f.Truncate(size); err != nil {
		return 0, fmt.Errorf("size image: %w", err)
	}
	return size, nil
}

func setBit(b []byte, i int64) { b[i/8] |= 1 << (i % 8) }

// writeDir lays the directory out: ".", "..", then the children in the
// order they came, in linear (unindexed) blocks.
func (w *fsWriter) writeDir(ino uint32, n *inode) error {
	var out []byte
	blk, pos, last := -1, 0, 0
	add := func(name []byte, to uint32, ft uint8) {
		need := direntLen(len(name))
		if blk < 0 || pos+need > blockSize {
			if blk >= 0 {
				le.PutUint16(out[blk+last+4:], uint16(blockSize-last)) // the last entry fills the block
			}
			out = append(out, zeroBlock[:]...)
			blk, pos = len(out)-blockSize, 0
		}
		putDirent(out[blk+pos:], to, need, ft, name)
		last, pos = pos, pos+need
	}
	d := &w.dirs[n.dir]
	add([]byte("."), ino, ftDir)
	add([]byte(".."), d.parent, ftDir)
	for i := d.first; i != 0; i = w.dirents[i].next {
		e := &w.dirents[i]
		add(w.direntName(i), e.ino, e.ft)
	}
	le.PutUint16(out[blk+last+4:], uint16(blockSize-last))
	first, err := w.appendBlocks(out)
	if err != nil {
		return err
	}
	nb := uint32(len(out) / blockSize)
	from := len(w.extents)
	w.addRun(from, 0, first, nb)
	w.setExtents(ino, from)
	n.size = int64(nb) * blockSize
	return nil
}

// writeExtentTree writes the extent tree of a file with more extents than
// the inode holds: leaves of up to 340 extents, index levels above them
// until at most four entries remain for the inode.
func (w *fsWriter) writeExtentTree(ino uint32, n *inode) error {
	type ref struct{ lblk, blk uint32 }
	var level []ref
	t := &extentTree{}
	exts := w.extents[n.more : n.more+n.extents]
	blk := make([]byte, blockSize)
	for i := 0; i < len(exts); i += extentsPerBlock {
		chunk := exts[i:min(i+extentsPerBlock, len(exts))]
		clear(blk)
		putExtentHeader(blk, len(chunk), extentsPerBlock, 0)
		for j, e := range chunk {
			putExtentLeaf(blk[12+12*j:], e.lblk, e.start, e.n)
		}
		b, err := w.appendBlocks(blk)
		if err != nil {
			return err
		}
		level = append(level, ref{chunk[0].lblk, b})
		t.blocks++
	}
	depth := 1
	for ; len(level) > 4; depth++ {
		var up []ref
		for i := 0; i < len(level); i += extentsPerBlock {
			chunk := level[i:min(i+extentsPerBlock, len(level))]
			clear(blk)
			putExtentHeader(blk, len(chunk), extentsPerBlock, depth)
			for j, r := range chunk {
				putExtentIndex(blk[12+12*j:], r.lblk, r.blk)
			}
			b, err := w.appendBlocks(blk)
			if err != nil {
				return err
			}
			up = append(up, ref{chunk[0].lblk, b})
			t.blocks++
		}
		level = up
	}
	putExtentHeader(t.root[:], len(level), 4, depth)
	for j, r := range level {
		putExtentIndex(t.root[12+12*j:], r.lblk, r.blk)
	}
	w.trees[ino] = t
	n.flags |= flagTree
	return nil
}

// writeInodes writes the records of every used inode.
func (w *fsWriter) writeInodes(g geometry) error {
	rec := make([]byte, inodeSize)
	for ino := uint32(1); ino <= uint32(len(w.nodes)); ino++ {
		clear(rec)
		if n := w.node(ino); n.mode != 0 {
			w.encodeInode(rec, ino, n)
		}
		if err := w.appendBytes(rec); err != nil {
			return err
		}
	}
	// Pad the last block of records.
	if r := len(w.nodes) % inodesPerBlock; r != 0 {
		clear(rec)
		for range inodesPerBlock - r {
			if err := w.appendBytes(rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendBytes adds bytes to the staging buffer; callers keep block
// alignment themselves (inode records).
func (w *fsWriter) appendBytes(b []byte) error {
	if len(w.buf)+len(b) > cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, b...)
	return nil
}

// encodeInode fills one inode record.
func (w *fsWriter) encodeInode(rec []byte, ino uint32, n *inode) {
	le.PutUint16(rec[inMode:], n.mode)
	le.PutUint16(rec[inUID:], uint16(n.uid))
	le.PutUint16(rec[inUIDHi:], uint16(n.uid>>16))
	le.PutUint16(rec[inGID:], uint16(n.gid))
	le.PutUint16(rec[inGIDHi:], uint16(n.gid>>16))
	le.PutUint32(rec[inSizeLo:], uint32(n.size))
	le.PutUint32(rec[inSizeHi:], uint32(n.size>>32))
	atime, ctime := w.timesOf(ino, n)
	for _, t := range [...]struct {
		base, extra int
		s           stamp
	}{{inAtime, inAtimeExtra, atime}, {inCtime, inCtimeExtra, ctime}, {inMtime, inMtimeExtra, stamp{n.mtime, n.mtimeNs}}, {inCrtime, inCrtimeExtra, w.now}} {
		b, e := t.s.encode()
		le.PutUint32(rec[t.base:], b)
		le.PutUint32(rec[t.extra:], e)
	}
	links := uint32(n.links)
	if n.isDir() {
		links = 2 + w.dirs[n.dir].subdirs
		if links > linkMax {
			links = 1 // dir_nlink: too many to count
		}
	}
	le.PutUint16(rec[inLinks:], uint16(links))
	blocks := w.dataBlocks(n)
	var tree *extentTree
	if n.flags&flagTree != 0 {
		tree = w.trees[ino]
		blocks += int64(tree.blocks)
	}
	var xs *inodeXattrs
	if n.flags&flagXattrs != 0 {
		xs = w.xattrs[ino]
		if xs.blk != 0 {
			blocks++
			le.PutUint32(rec[inFileACLLo:], xs.blk)
		}
	}
	sectors := blocks * (blockSize / 512)
	le.PutUint32(rec[inBlocksLo:], uint32(sectors))
	le.PutUint16(rec[inBlocksHi:], uint16(sectors>>32))
	le.PutUint16(rec[inExtraIsize:], extraIsize)

	ib := rec[inBlock : inBlock+60]
	switch typ := n.mode & sIFMT; {
	case typ == sIFCHR || typ == sIFBLK:
		dev := w.devs[ino]
		major, minor := dev[0], dev[1]
		if major < 256 && minor < 256 {
			le.PutUint32(ib[0:], major<<8|minor)
		} else {
			le.PutUint32(ib[4:], minor&0xff|major<<8|(minor&^0xff)<<12)
		}
	case typ == sIFIFO:
	case typ == sIFLNK && n.extents == 0:
		copy(ib, w.text[n.dir:n.dir+uint32(n.size)])
	default: // regular files, directories, slow symlinks
		le.PutUint32(rec[inFlags:], extentsFl)
		if tree != nil {
			copy(ib, tree.root[:])
			break
		}
		var one [1]extent
		exts := w.extentsOf(n, &one)
		putExtentHeader(ib, len(exts), 4, 0)
		for j, e := range exts {
			putExtentLeaf(ib[12+12*j:], e.lblk, e.start, e.n)
		}
	}
	if xs != nil {
		putInodeXattrs(rec, xs.inInode)
	}
}

// superblock fills the primary superblock.
func (w *fsWriter) superblock(sb []byte, g geometry, freeBlocks, freeInodes int64, id [16]byte) {
	le.PutUint32(sb[sbInodesCount:], uint32(g.groups*g.inodesPerGroup))
	le.PutUint32(sb[sbBlocksCountLo:], uint32(g.blocks))
	le.PutUint32(sb[sbFreeBlocksLo:], uint32(freeBlocks))
	le.PutUint32(sb[sbFreeInodes:], uint32(freeInodes))
	le.PutUint32(sb[sbFirstDataBlock:], 0)
	le.PutUint32(sb[sbLogBlockSize:], 2) // 1024 << 2
	le.PutUint32(sb[sbLogClusterSize:], 2)
	le.PutUint32(sb[sbBlocksPerGroup:], uint32(g.blocksPerGroup))
	le.PutUint32(sb[sbClustersPerGrp:], uint32(g.blocksPerGroup))
	le.PutUint32(sb[sbInodesPerGroup:], uint32(g.inodesPerGroup))
	le.PutUint16(sb[sbMaxMntCount:], 0xFFFF) // no mount-count fsck
	le.PutUint16(sb[sbMagic:], ext4Magic)
	le.PutUint16(sb[sbState:], 1)  // cleanly unmounted
	le.PutUint16(sb[sbErrors:], 1) // continue
	le.PutUint32(sb[sbRevLevel:], 1)
	le.PutUint32(sb[sbFirstIno:], firstIno)
	le.PutUint16(sb[sbInodeSize:], inodeSize)
	le.PutUint32(sb[sbFeatureCompat:], compatExtAttr|compatDirIndex|compatSparseSuper2)
	le.PutUint32(sb[sbFeatureIncompat:], incompatFiletype|incompatExtents|incompatFlexBg)
	le.PutUint32(sb[sbFeatureROCompat:], roCompatLargeFile|roCompatHugeFile|roCompatDirNlink|roCompatExtraIsize)
	copy(sb[sbUUID:sbUUID+16], id[:])
	copy(sb[sbHashSeed:sbHashSeed+16], id[:])
	sb[sbDefHashVersion] = 1                  // half_md4, the mke2fs default
	le.PutUint32(sb[sbDefMountOpts:], 0x000C) // user_xattr, acl
	le.PutUint16(sb[sbMinExtraIsize:], extraIsize)
	le.PutUint16(sb[sbWantExtraIsize:], extraIsize)
	le.PutUint32(sb[sbFlags:], 0x0001) // signed directory hash, as mke2fs on x86
	sb[sbLogGroupsPerFlx] = 4          // the mke2fs default of 16 groups
	if w.now.sec > 0 {
		sec := uint64(w.now.sec)
		for _, f := range []struct{ lo, hi int }{{sbMkfsTime, sbMkfsTimeHi}, {sbWtime, sbWtimeHi}, {sbLastCheck, sbLastCheckHi}} {
			le.PutUint32(sb[f.lo:], uint32(sec))
			sb[f.hi] = byte(sec >> 32)
		}
	}
}
