package ext4stream

import (
	"encoding/binary"
	"time"
)

// On-disk facts from the ext4 layout documentation (kernel
// Documentation/filesystems/ext4). Only what this writer sets is named.
const (
	blockSize      = 4096
	blocksPerGroup = blockSize * 8 // one block bitmap block per group
	inodeSize      = 256
	inodesPerBlock = blockSize / inodeSize
	// extraIsize covers the fields up to i_projid; in-inode xattrs follow.
	extraIsize = 32
	// firstIno is the first non-reserved inode; lost+found takes it.
	firstIno    = 11
	rootIno     = 2
	lostFoundNo = firstIno

	// Largest extent of initialised blocks.
	maxExtentLen = 32768
	// A 4 KiB extent block holds a 12-byte header and 340 entries.
	extentsPerBlock = (blockSize - 12) / 12
	// 32-byte group descriptors (no 64bit feature: images stay far below
	// 16 TiB).
	descSize      = 32
	descsPerBlock = blockSize / descSize

	superblockOffset = 1024
	ext4Magic        = 0xEF53

	// Feature flags.
	compatExtAttr      = 0x0008
	compatDirIndex     = 0x0020
	compatSparseSuper2 = 0x0200

	incompatFiletype = 0x0002
	incompatExtents  = 0x0040
	incompatFlexBg   = 0x0200

	roCompatLargeFile  = 0x0002
	roCompatHugeFile   = 0x0008
	roCompatDirNlink   = 0x0020
	roCompatExtraIsize = 0x0040

	// Inode flags.
	extentsFl = 0x00080000

	// Mode type bits.
	sIFIFO = 0x1000
	sIFCHR = 0x2000
	sIFDIR = 0x4000
	sIFBLK = 0x6000
	sIFREG = 0x8000
	sIFLNK = 0xA000
	sIFMT  = 0xF000
	// linkMax is EXT4_LINK_MAX; a directory with more links stores 1
	// (dir_nlink).
	linkMax = 65000

	// Directory entry file types.
	ftReg     = 1
	ftDir     = 2
	ftChr     = 3
	ftBlk     = 4
	ftFifo    = 5
	ftSymlink = 7

	// fastSymlinkMax is the longest symlink target kept in i_block.
	fastSymlinkMax = 59

	xattrMagic      = 0xEA020000
	xattrBlockHdr   = 32
	xattrEntryHdr   = 16
	inodeXattrStart = 128 + extraIsize // h_magic of the in-inode area
)

var le = binary.LittleEndian

// superblock fields (offsets from the start of the superblock).
const (
	sbInodesCount     = 0x00
	sbBlocksCountLo   = 0x04
	sbFreeBlocksLo    = 0x0C
	sbFreeInodes      = 0x10
	sbFirstDataBlock  = 0x14
	sbLogBlockSize    = 0x18
	sbLogClusterSize  = 0x1C
	sbBlocksPerGroup  = 0x20
	sbClustersPerGrp  = 0x24
	sbInodesPerGroup  = 0x28
	sbWtime           = 0x30
	sbMaxMntCount     = 0x36
	sbMagic           = 0x38
	sbState           = 0x3A
	sbErrors          = 0x3C
	sbLastCheck       = 0x40
	sbRevLevel        = 0x4C
	sbFirstIno        = 0x54
	sbInodeSize       = 0x58
	sbFeatureCompat   = 0x5C
	sbFeatureIncompat = 0x60
	sbFeatureROCompat = 0x64
	sbUUID            = 0x68
	sbHashSeed        = 0xEC
	sbDefHashVersion  = 0xFC
	sbDefMountOpts    = 0x100
	sbMkfsTime        = 0x108
	sbMinExtraIsize   = 0x15C
	sbWantExtraIsize  = 0x15E
	sbFlags           = 0x160
	sbLogGroupsPerFlx = 0x174
	sbWtimeHi         = 0x274
	sbMkfsTimeHi      = 0x276
	sbLastCheckHi     = 0x277
)

// group descriptor fields.
const (
	gdBlockBitmap = 0x00
	gdInodeBitmap = 0x04
	gdInodeTable  = 0x08
	gdFreeBlocks  = 0x0C
	gdFreeInodes  = 0x0E
	gdUsedDirs    = 0x10
)

// inode fields.
const (
	inMode        = 0x00
	inUID         = 0x02
	inSizeLo      = 0x04
	inAtime       = 0x08
	inCtime       = 0x0C
	inMtime       = 0x10
	inGID         = 0x18
	inLinks       = 0x1A
	inBlocksLo    = 0x1C
	inFlags       = 0x20
	inBlock       = 0x28 // i_block[15], 60 bytes
	inFileACLLo   = 0x68
	inSizeHi      = 0x6C
	inBlocksHi    = 0x74
	inFileACLHi   = 0x76
	inUIDHi       = 0x78
	inGIDHi       = 0x7A
	inExtraIsize  = 0x80
	inCtimeExtra  = 0x84
	inMtimeExtra  = 0x88
	inAtimeExtra  = 0x8C
	inCrtime      = 0x90
	inCrtimeExtra = 0x94
)

// Timestamps ext4 can hold: a signed 32-bit base extended by two epoch bits.
const (
	minTime = -1 << 31
	maxTime = 0x37fffffff
)

// stamp is a timestamp as stored: seconds and nanoseconds.
type stamp struct {
	sec  int64
	nsec uint32
}

// stampOf clamps t into ext4's range. Times before 1970 keep only whole
// seconds: the extra word's epoch bits cannot also carry a sign.
func stampOf(t time.Time) stamp {
	if t.IsZero() {
		return stamp{}
	}
	s := t.Unix()
	switch {
	case s < minTime:
		return stamp{sec: minTime}
	case s > maxTime:
		return stamp{sec: maxTime}
	case s < 0:
		return stamp{sec: s}
	}
	return stamp{sec: s, nsec: uint32(t.Nanosecond())}
}

// encode splits a stamp into the seconds field and the extra word (two
// epoch bits extending the signed 32-bit seconds, then nanoseconds).
func (s stamp) encode() (base, extra uint32) {
	base = uint32(s.sec)
	epoch := uint32((s.sec-int64(int32(base)))>>32) & 3
	return base, epoch | s.nsec<<2
}

// putExtentHeader writes an extent tree header.
func putExtentHeader(b []byte, entries, maxEntries, depth int) {
	le.PutUint16(b[0:], 0xF30A)
	le.PutUint16(b[2:], uint16(entries))
	le.PutUint16(b[4:], uint16(maxEntries))
	le.PutUint16(b[6:], uint16(depth))
	le.PutUint32(b[8:], 0)
}

// putExtentLeaf writes one leaf entry: len blocks of the file starting at
// logical block lblk are at physical block start.
func putExtentLeaf(b []byte, lblk, start uint32, n uint16) {
	le.PutUint32(b[0:], lblk)
	le.PutUint16(b[4:], n)
	le.PutUint16(b[6:], 0) // start_hi: images stay below 2^32 blocks
	le.PutUint32(b[8:], start)
}

// putExtentIndex writes one index entry pointing at the tree block leaf,
// which covers the file from logical block lblk on.
func putExtentIndex(b []byte, lblk, leaf uint32) {
	le.PutUint32(b[0:], lblk)
	le.PutUint32(b[4:], leaf)
	le.PutUint16(b[8:], 0)
	le.PutUint16(b[10:], 0)
}

// direntLen is the space a directory entry with a name of n bytes needs.
func direntLen(n int) int { return (8 + n + 3) &^ 3 }

// putDirent writes a directory entry; recLen may exceed direntLen to fill
// the rest of the block.
func putDirent(b []byte, ino uint32, recLen int, ft uint8, name []byte) {
	le.PutUint32(b[0:], ino)
	le.PutUint16(b[4:], uint16(recLen))
	b[6] = byte(len(name))
	b[7] = ft
	copy(b[8:], name)
}
