package ext4build

import (
	"bytes"
	"fmt"
	"sort"
	"time"
)

// fixInodeBitmapPadding sets the bits past s_inodes_per_group in each
// group's inode bitmap block. The kernel never reads them, but e2fsck
// requires them set ("Padding at end of inode bitmap is not set") and
// tar2ext4 leaves them zero.
//
// It works on any ext4 image. With gdt_csum or metadata_csum no checksum
// changes: descriptor checksums do not cover bitmaps and the inode bitmap
// checksum covers only the first s_inodes_per_group bits. Groups flagged
// INODE_UNINIT are skipped because their bitmap is never read.
func fixInodeBitmapPadding(im *image) (fixed int, err error) {
	ipg := int64(im.u32(sbInodesPerGroup))
	bits := im.blockSize * 8
	if ipg >= bits {
		return 0, nil
	}
	bm := make([]byte, im.blockSize)
	for g := int64(0); g < im.groups; g++ {
		if im.hasChecksums() && le.Uint16(im.desc(g)[gdFlags:])&gdFlagInodeInit != 0 {
			continue
		}
		off := im.inodeBitmap(g) * im.blockSize
		if _, err := im.f.ReadAt(bm, off); err != nil {
			return fixed, fmt.Errorf("group %d: read inode bitmap: %w", g, err)
		}
		changed := false
		for bit := ipg; bit < bits; {
			if bit%8 == 0 && bits-bit >= 8 {
				if bm[bit/8] != 0xff {
					bm[bit/8], changed = 0xff, true
				}
				bit += 8
				continue
			}
			if mask := byte(1) << (bit % 8); bm[bit/8]&mask == 0 {
				bm[bit/8] |= mask
				changed = true
			}
			bit++
		}
		if !changed {
			continue
		}
		if _, err := im.w.WriteAt(bm, off); err != nil {
			return fixed, fmt.Errorf("group %d: write inode bitmap: %w", g, err)
		}
		fixed++
	}
	return fixed, nil
}

// growTo extends the file system within its last group so that the block
// count is a multiple of `multiple` blocks. The added blocks are real, free
// blocks: tar2ext4 marks the tail of the last group as in use, so the bits
// are cleared and the free counters raised. Requires checkTar2ext4Shape.
func growTo(im *image, multiple int64, truncate func(int64) error) (added int64, err error) {
	bpg := int64(im.u32(sbBlocksPerGroup))
	if bpg%multiple != 0 {
		return 0, fmt.Errorf("blocks per group %d is not a multiple of %d", bpg, multiple)
	}
	old := im.blocksCount()
	target := (old + multiple - 1) / multiple * multiple
	if target > 0xFFFFFFFF {
		return 0, fmt.Errorf("%d blocks do not fit a 32-bit block count", target)
	}
	if target != old {
		last := (old - 1) / bpg
		bm := make([]byte, im.blockSize)
		off := im.blockBitmap(last) * im.blockSize
		if _, err := im.f.ReadAt(bm, off); err != nil {
			return 0, fmt.Errorf("read block bitmap of group %d: %w", last, err)
		}
		for b := old; b < target; b++ {
			bit := b - last*bpg
			mask := byte(1) << (bit % 8)
			if bm[bit/8]&mask == 0 {
				return 0, fmt.Errorf("block %d past the end is not marked in use", b)
			}
			bm[bit/8] &^= mask
		}
		if _, err := im.w.WriteAt(bm, off); err != nil {
			return 0, fmt.Errorf("write block bitmap of group %d: %w", last, err)
		}
		added = target - old
		d := im.desc(last)
		le.PutUint16(d[gdFreeBlocksLo:], le.Uint16(d[gdFreeBlocksLo:])+uint16(added))
		le.PutUint32(im.sb[sbFreeBlocksLo:], im.u32(sbFreeBlocksLo)+uint32(added))
		le.PutUint32(im.sb[sbBlocksCountLo:], uint32(target))
	}
	// Always truncate: the file must end exactly at the last block.
	if err := truncate(target * im.blockSize); err != nil {
		return 0, fmt.Errorf("resize image file: %w", err)
	}
	return added, nil
}

// setIdentity stamps the UUID, the directory hash seed (the same 16 bytes:
// the spec derives both from the fingerprint) and the creation times that
// tar2ext4 leaves zero.
func setIdentity(im *image, uuid [16]byte, t time.Time) {
	copy(im.sb[sbUUID:sbUUID+16], uuid[:])
	copy(im.sb[sbHashSeed:sbHashSeed+16], uuid[:])
	im.sb[sbDefHashVersion] = 1 // half_md4, the mke2fs default
	if t.IsZero() || t.Unix() < 0 {
		return
	}
	sec := uint64(t.Unix())
	for _, f := range []struct{ lo, hi int }{
		{sbMkfsTime, sbMkfsTimeHi}, {sbWtime, sbWtimeHi}, {sbLastCheck, sbLastCheckHi},
	} {
		le.PutUint32(im.sb[f.lo:], uint32(sec))
		im.sb[f.hi] = byte(sec >> 32)
	}
}

// inodeTimes are the (seconds, extra) field pairs of an inode; the extra
// words live past the 128-byte base inode.
var inodeTimes = []struct {
	base, extra int
	fill        bool // invented when the tar had none (atime, ctime)
}{
	{inAtime, inAtimeExtra, true},
	{inCtime, inCtimeExtra, true},
	{inMtime, inMtimeExtra, false},
	{inCrtime, inCrtimeExtra, false},
}

// fixInodes walks every in-use inode of a tar2ext4 image and
//   - gives atime/ctime the build time when the tar carried none (tar2ext4
//     writes 0, i.e. 1970),
//   - re-encodes timestamps outside 1901..2038: tar2ext4 stores the low 34
//     bits of the seconds, but the kernel reads the base field as signed
//     32-bit and the two epoch bits as an offset from it, so such times came
//     out decades off (and e2fsck flags pre-1970 ones),
//   - sorts the entries of external xattr blocks into the order the kernel
//     searches them by (index, name length, name); tar2ext4's sort is not a
//     strict order, and kernels that stop at the first greater entry then
//     miss attributes.
//
// It returns the number of inodes and xattr blocks it changed.
func fixInodes(im *image, fill time.Time) (inodes, xblocks int, err error) {
	ipg := int64(im.u32(sbInodesPerGroup))
	isz := int64(le.Uint16(im.sb[sbInodeSize:]))
	table := make([]byte, ipg*isz)
	xb := make([]byte, im.blockSize)
	var fillBase, fillExtra uint32
	doFill := !fill.IsZero()
	if doFill {
		fillBase, fillExtra = encodeTime(clampSeconds(fill.Unix()), int64(fill.Nanosecond()))
	}
	for g := int64(0); g < im.groups; g++ {
		off := im.inodeTable(g) * im.blockSize
		if _, err := im.f.ReadAt(table, off); err != nil {
			return inodes, xblocks, fmt.Errorf("group %d: read inode table: %w", g, err)
		}
		changed := false
		for i := int64(0); i < ipg; i++ {
			rec := table[i*isz : (i+1)*isz]
			if le.Uint16(rec[inMode:]) == 0 || le.Uint16(rec[inLinksCount:]) == 0 {
				continue
			}
			if fixInodeTimes(rec, doFill, fillBase, fillExtra) {
				changed = true
				inodes++
			}
			acl := int64(le.Uint32(rec[inFileACLLo:])) | int64(le.Uint16(rec[inFileACLHi:]))<<32
			if acl == 0 {
				continue
			}
			ino := g*ipg + i + 1
			did, err := sortXattrBlock(im, acl, xb)
			if err != nil {
				return inodes, xblocks, fmt.Errorf("inode %d: %w", ino, err)
			}
			if did {
				xblocks++
			}
		}
		if changed {
			if _, err := im.w.WriteAt(table, off); err != nil {
				return inodes, xblocks, fmt.Errorf("group %d: write inode table: %w", g, err)
			}
		}
	}
	return inodes, xblocks, nil
}

func fixInodeTimes(rec []byte, doFill bool, fillBase, fillExtra uint32) bool {
	extraEnd := int64(goodOldInode)
	if len(rec) > goodOldInode {
		extraEnd += int64(le.Uint16(rec[inExtraIsize:]))
	}
	changed := false
	for _, f := range inodeTimes {
		hasExtra := int64(f.extra+4) <= extraEnd && f.extra+4 <= len(rec)
		if !hasExtra && f.base >= goodOldInode {
			continue // crtime lives in the extra space
		}
		base := le.Uint32(rec[f.base:])
		var extra uint32
		if hasExtra {
			extra = le.Uint32(rec[f.extra:])
		}
		if f.fill && doFill && base == 0 && extra == 0 {
			le.PutUint32(rec[f.base:], fillBase)
			if hasExtra {
				le.PutUint32(rec[f.extra:], fillExtra)
			}
			changed = true
			continue
		}
		if !hasExtra {
			continue
		}
		// tar2ext4 wrote the low 34 bits of a seconds value in
		// [-2^31, 0x37fffffff]; negative values land in the top range.
		// Their nanoseconds sit above the epoch bits, except for negative
		// seconds, whose sign bits overwrite them (the feed zeroes those
		// nanoseconds beforehand).
		low34 := int64(base) | int64(extra&3)<<32
		sec, nsec := low34, extra&^3
		if low34 >= 0x380000000 {
			sec, nsec = low34-1<<34, 0
		}
		_, e := encodeTime(sec, 0)
		if want := nsec | e&3; want != extra {
			le.PutUint32(rec[f.extra:], want)
			changed = true
		}
	}
	return changed
}

// clampSeconds keeps a time within what ext4 timestamps can hold.
func clampSeconds(s int64) int64 {
	const minSec, maxSec = -1 << 31, 0x37fffffff
	return min(max(s, minSec), maxSec)
}

// sortXattrBlock puts the entries of the xattr block at blk in kernel
// order and sets the block hash. buf is scratch space of one block.
func sortXattrBlock(im *image, blk int64, buf []byte) (bool, error) {
	off := blk * im.blockSize
	if _, err := im.f.ReadAt(buf, off); err != nil {
		return false, fmt.Errorf("read xattr block %d: %w", blk, err)
	}
	if le.Uint32(buf) != xattrMagic || le.Uint32(buf[8:]) != 1 {
		return false, fmt.Errorf("xattr block %d: bad header", blk)
	}
	var entries [][]byte
	pos := xattrHeaderSize
	for pos+4 <= len(buf) && le.Uint32(buf[pos:]) != 0 {
		n := (xattrEntryHeader + int(buf[pos]) + 3) &^ 3
		if pos+n > len(buf) {
			return false, fmt.Errorf("xattr block %d: entry overruns the block", blk)
		}
		entries = append(entries, bytes.Clone(buf[pos:pos+n]))
		pos += n
	}
	sorted := sort.SliceIsSorted(entries, func(i, j int) bool { return xattrLess(entries[i], entries[j]) })
	if !sorted {
		sort.SliceStable(entries, func(i, j int) bool { return xattrLess(entries[i], entries[j]) })
		pos = xattrHeaderSize
		for _, e := range entries {
			pos += copy(buf[pos:], e)
		}
	}
	var hash uint32
	for _, e := range entries {
		eh := le.Uint32(e[12:])
		if eh == 0 {
			hash = 0
			break
		}
		hash = hash<<16 ^ hash>>16 ^ eh
	}
	if sorted && le.Uint32(buf[xattrHeaderHash:]) == hash {
		return false, nil
	}
	le.PutUint32(buf[xattrHeaderHash:], hash)
	if _, err := im.w.WriteAt(buf, off); err != nil {
		return false, fmt.Errorf("write xattr block %d: %w", blk, err)
	}
	return true, nil
}

// xattrLess is the kernel's search order: name index, name length, name.
func xattrLess(a, b []byte) bool {
	if a[1] != b[1] {
		return a[1] < b[1]
	}
	if a[0] != b[0] {
		return a[0] < b[0]
	}
	return bytes.Compare(a[xattrEntryHeader:xattrEntryHeader+int(a[0])], b[xattrEntryHeader:xattrEntryHeader+int(b[0])]) < 0
}
