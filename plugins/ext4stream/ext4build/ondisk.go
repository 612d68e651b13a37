package ext4build

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// On-disk facts from the ext4 layout documentation. Only the fields the
// post-processing pass reads or writes are named.
const (
	superblockOffset = 1024
	superblockSize   = 1024
	ext4Magic        = 0xEF53

	sbInodesCount     = 0x00
	sbBlocksCountLo   = 0x04
	sbFreeBlocksLo    = 0x0C
	sbFirstDataBlock  = 0x14
	sbLogBlockSize    = 0x18
	sbBlocksPerGroup  = 0x20
	sbInodesPerGroup  = 0x28
	sbWtime           = 0x30
	sbMagic           = 0x38
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
	sbDescSize        = 0xFE
	sbMkfsTime        = 0x108
	sbBackupBGs       = 0x24C
	sbChecksumSeed    = 0x270
	sbWtimeHi         = 0x274
	sbMkfsTimeHi      = 0x276
	sbLastCheckHi     = 0x277

	compatSparseSuper2 = 0x200
	compatExtAttr      = 0x8

	incompatFiletype = 0x2
	incompatExtents  = 0x40
	incompat64Bit    = 0x80
	incompatFlexBg   = 0x200
	incompatCsumSeed = 0x2000

	roCompatLargeFile    = 0x2
	roCompatHugeFile     = 0x8
	roCompatGdtCsum      = 0x10
	roCompatExtraIsize   = 0x40
	roCompatMetadataCsum = 0x400
	roCompatReadOnly     = 0x1000

	// Group descriptor fields (the first 32 bytes; the high halves of a
	// 64-byte descriptor are not needed for images below 16 TiB).
	gdBlockBitmapLo = 0x00
	gdInodeBitmapLo = 0x04
	gdInodeTableLo  = 0x08
	gdFreeBlocksLo  = 0x0C
	gdFlags         = 0x12
	gdFlagInodeInit = 0x1 // EXT4_BG_INODE_UNINIT: bitmap not initialised on disk

	// Inode fields.
	inMode        = 0x00
	inAtime       = 0x08
	inCtime       = 0x0C
	inMtime       = 0x10
	inLinksCount  = 0x1A
	inFileACLLo   = 0x68
	inFileACLHi   = 0x76
	inExtraIsize  = 0x80
	inCtimeExtra  = 0x84
	inMtimeExtra  = 0x88
	inAtimeExtra  = 0x8C
	inCrtime      = 0x90
	inCrtimeExtra = 0x94
	goodOldInode  = 128

	// Extended attribute block.
	xattrMagic       = 0xEA020000
	xattrHeaderSize  = 32
	xattrHeaderHash  = 0x10
	xattrEntryHeader = 16
)

// tar2ext4Features is everything hcsshim's compact writer sets (without
// InlineData). The pass that rewrites counters and identity refuses other
// images, because it does not maintain checksums or backup superblocks.
const (
	tar2ext4Compat   = compatSparseSuper2 | compatExtAttr
	tar2ext4Incompat = incompatFiletype | incompatExtents | incompatFlexBg
	tar2ext4ROCompat = roCompatLargeFile | roCompatHugeFile | roCompatExtraIsize | roCompatReadOnly
)

var le = binary.LittleEndian

// image is an ext4 file being post-processed: the superblock and group
// descriptor table are held in memory and written back by flush.
type image struct {
	f         io.ReaderAt
	w         io.WriterAt
	sb        []byte // superblockSize bytes
	gdt       []byte // groups * descSize bytes
	blockSize int64
	descSize  int64
	groups    int64
	gdtOffset int64
}

// readImage parses the superblock and group descriptors of an ext4 image.
func readImage(f interface {
	io.ReaderAt
	io.WriterAt
}) (*image, error) {
	im := &image{f: f, w: f, sb: make([]byte, superblockSize)}
	if _, err := f.ReadAt(im.sb, superblockOffset); err != nil {
		return nil, fmt.Errorf("read superblock: %w", err)
	}
	if le.Uint16(im.sb[sbMagic:]) != ext4Magic {
		return nil, errors.New("not an ext4 image: bad superblock magic")
	}
	logBS := le.Uint32(im.sb[sbLogBlockSize:])
	if logBS > 6 {
		return nil, fmt.Errorf("implausible block size shift %d", logBS)
	}
	im.blockSize = 1024 << logBS
	im.descSize = 32
	if im.incompat()&incompat64Bit != 0 {
		im.descSize = int64(le.Uint16(im.sb[sbDescSize:]))
		if im.descSize < 32 || im.descSize&(im.descSize-1) != 0 {
			return nil, fmt.Errorf("implausible group descriptor size %d", im.descSize)
		}
	}
	bpg := int64(im.u32(sbBlocksPerGroup))
	if bpg == 0 || im.u32(sbInodesPerGroup) == 0 {
		return nil, errors.New("zero blocks or inodes per group")
	}
	im.groups = (im.blocksCount() - int64(im.u32(sbFirstDataBlock)) + bpg - 1) / bpg
	if inodes := im.groups * int64(im.u32(sbInodesPerGroup)); inodes != int64(im.u32(sbInodesCount)) {
		return nil, fmt.Errorf("inode count %d does not match %d groups", im.u32(sbInodesCount), im.groups)
	}
	// The descriptor table starts in the block after the superblock's.
	im.gdtOffset = (int64(im.u32(sbFirstDataBlock)) + 1) * im.blockSize
	im.gdt = make([]byte, im.groups*im.descSize)
	if _, err := f.ReadAt(im.gdt, im.gdtOffset); err != nil {
		return nil, fmt.Errorf("read group descriptors: %w", err)
	}
	return im, nil
}

func (im *image) u32(off int) uint32 { return le.Uint32(im.sb[off:]) }

func (im *image) incompat() uint32 { return im.u32(sbFeatureIncompat) }

// blocksCount ignores the high half: images here stay far below 16 TiB and
// the tar2ext4 check rejects 64bit images before anything is rewritten.
func (im *image) blocksCount() int64 { return int64(im.u32(sbBlocksCountLo)) }

func (im *image) desc(g int64) []byte { return im.gdt[g*im.descSize : (g+1)*im.descSize] }

func (im *image) inodeBitmap(g int64) int64 { return int64(le.Uint32(im.desc(g)[gdInodeBitmapLo:])) }
func (im *image) blockBitmap(g int64) int64 { return int64(le.Uint32(im.desc(g)[gdBlockBitmapLo:])) }
func (im *image) inodeTable(g int64) int64  { return int64(le.Uint32(im.desc(g)[gdInodeTableLo:])) }

// hasChecksums reports whether group descriptors carry checksums.
func (im *image) hasChecksums() bool {
	return im.u32(sbFeatureROCompat)&(roCompatGdtCsum|roCompatMetadataCsum) != 0
}

// checkTar2ext4Shape refuses images whose layout the rewriting steps do not
// handle, so that a future hcsshim that turns on checksums or backups fails
// loudly instead of producing a corrupt image.
func (im *image) checkTar2ext4Shape() error {
	switch {
	case im.blockSize != 4096:
		return fmt.Errorf("block size %d, want 4096", im.blockSize)
	case im.u32(sbFeatureCompat)&^tar2ext4Compat != 0,
		im.u32(sbFeatureIncompat)&^tar2ext4Incompat != 0,
		im.u32(sbFeatureROCompat)&^tar2ext4ROCompat != 0:
		return fmt.Errorf("unexpected features compat=%#x incompat=%#x ro_compat=%#x",
			im.u32(sbFeatureCompat), im.u32(sbFeatureIncompat), im.u32(sbFeatureROCompat))
	case im.u32(sbFirstDataBlock) != 0:
		return fmt.Errorf("first data block %d, want 0", im.u32(sbFirstDataBlock))
	case im.u32(sbBackupBGs) != 0 || im.u32(sbBackupBGs+4) != 0:
		return errors.New("backup superblocks present")
	case le.Uint16(im.sb[sbInodeSize:]) != 256:
		return fmt.Errorf("inode size %d, want 256", le.Uint16(im.sb[sbInodeSize:]))
	}
	return nil
}

// flush writes the descriptor table and the superblock back.
func (im *image) flush() error {
	if _, err := im.w.WriteAt(im.gdt, im.gdtOffset); err != nil {
		return fmt.Errorf("write group descriptors: %w", err)
	}
	if _, err := im.w.WriteAt(im.sb, superblockOffset); err != nil {
		return fmt.Errorf("write superblock: %w", err)
	}
	return nil
}

// encodeTime splits t into an ext4 seconds field and its "extra" word
// (two epoch bits extending the signed 32-bit seconds, then nanoseconds).
func encodeTime(sec int64, nsec int64) (base, extra uint32) {
	base = uint32(sec)
	epoch := uint32((sec-int64(int32(base)))>>32) & 3
	return base, epoch | uint32(nsec)<<2
}
