package ext4stream

import (
	"fmt"
	"sort"
	"strings"
)

// xattr is one extended attribute as ext4 stores it: a name index standing
// for the namespace prefix, the rest of the name, and the value (POSIX ACLs
// already in ext4's own encoding).
type xattr struct {
	index uint8
	name  string
	value []byte
}

// Name indexes (fs/ext4/xattr.h).
const (
	xattrIndexUser       = 1
	xattrIndexACLAccess  = 2
	xattrIndexACLDefault = 3
	xattrIndexTrusted    = 4
	xattrIndexSecurity   = 6
)

// entryLen is the space the entry takes in an xattr area, without its value.
func (x *xattr) entryLen() int { return (xattrEntryHdr + len(x.name) + 3) &^ 3 }

// valueLen is the space the value takes, padded to 4 bytes.
func (x *xattr) valueLen() int { return (len(x.value) + 3) &^ 3 }

// hash is ext2fs_ext_attr_hash_entry: the name bytes, then the value as
// little-endian 32-bit words (zero padded).
func (x *xattr) hash() uint32 {
	var h uint32
	for i := 0; i < len(x.name); i++ {
		h = h<<5 ^ h>>27 ^ uint32(x.name[i])
	}
	for i := 0; i < len(x.value); i += 4 {
		var w [4]byte
		copy(w[:], x.value[i:])
		h = h<<16 ^ h>>16 ^ le.Uint32(w[:])
	}
	return h
}

// less is the order the kernel searches xattr blocks in: index, name
// length, name.
func xattrLess(a, b *xattr) bool {
	if a.index != b.index {
		return a.index < b.index
	}
	if len(a.name) != len(b.name) {
		return len(a.name) < len(b.name)
	}
	return a.name < b.name
}

// encodeXattr maps a full attribute name and its tar value to the stored
// form. The namespace was checked against the allow-list before.
func encodeXattr(name, value string) (*xattr, error) {
	ns, rest, _ := strings.Cut(name, ".")
	x := &xattr{name: rest, value: []byte(value)}
	switch ns {
	case "user":
		x.index = xattrIndexUser
	case "trusted":
		x.index = xattrIndexTrusted
	case "security":
		x.index = xattrIndexSecurity
	case "system":
		x.index, x.name = xattrIndexACLAccess, ""
		if rest == "posix_acl_default" {
			x.index = xattrIndexACLDefault
		}
		v, err := aclToDisk([]byte(value))
		if err != nil {
			return nil, err
		}
		x.value = v
	default:
		return nil, fmt.Errorf("namespace %q", ns)
	}
	return x, nil
}

// ACL tags (include/uapi/linux/posix_acl.h).
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
)

// aclToDisk converts a POSIX ACL from the xattr interface's encoding
// (version 2, 8-byte entries) to ext4's (version 1, 4-byte entries for
// the owner, group, mask and other, 8 bytes for named users and groups),
// as setfacl on a mounted image or mke2fs -d would store it.
func aclToDisk(v []byte) ([]byte, error) {
	if len(v) < 4 || (len(v)-4)%8 != 0 || le.Uint32(v) != 2 {
		return nil, fmt.Errorf("malformed POSIX ACL (%d bytes)", len(v))
	}
	out := make([]byte, 4, len(v))
	le.PutUint32(out, 1)
	for p := v[4:]; len(p) > 0; p = p[8:] {
		tag, perm, id := le.Uint16(p), le.Uint16(p[2:]), le.Uint32(p[4:])
		switch tag {
		case aclUserObj, aclGroupObj, aclMask, aclOther:
			out = le.AppendUint16(out, tag)
			out = le.AppendUint16(out, perm)
		case aclUser, aclGroup:
			out = le.AppendUint16(out, tag)
			out = le.AppendUint16(out, perm)
			out = le.AppendUint32(out, id)
		default:
			return nil, fmt.Errorf("malformed POSIX ACL: tag %#x", tag)
		}
	}
	return out, nil
}

// inodeXattrRoom is the space for entries, values and the terminator in the
// in-inode area (after its 4-byte magic).
const inodeXattrRoom = inodeSize - inodeXattrStart - 4

// blockXattrRoom is the same for an xattr block (after its header).
const blockXattrRoom = blockSize - xattrBlockHdr

// splitXattrs sorts xs and decides where each one goes: the in-inode area
// while it has room (in order), the rest in one xattr block. It fails when
// the rest does not fit one block (ea_inode is not supported).
func splitXattrs(xs []*xattr) (inInode, inBlock []*xattr, err error) {
	sort.Slice(xs, func(i, j int) bool { return xattrLess(xs[i], xs[j]) })
	used := 4 // terminator
	for _, x := range xs {
		if n := x.entryLen() + x.valueLen(); used+n <= inodeXattrRoom {
			inInode = append(inInode, x)
			used += n
			continue
		}
		inBlock = append(inBlock, x)
	}
	used = 4
	for _, x := range inBlock {
		used += x.entryLen() + x.valueLen()
	}
	if used > blockXattrRoom {
		return nil, nil, fmt.Errorf("xattrs need %d bytes beyond the inode, more than one %d-byte block", used, blockSize)
	}
	return inInode, inBlock, nil
}

// putXattrs lays entries out in area (entries from the front, values from
// the back, value offsets relative to base) and returns the block hash of
// the entries.
func putXattrs(area []byte, base int, xs []*xattr) uint32 {
	pos, end := 0, len(area)
	var blockHash uint32
	zero := false
	for _, x := range xs {
		e := area[pos:]
		e[0] = byte(len(x.name))
		e[1] = x.index
		off := 0
		if len(x.value) > 0 {
			end -= x.valueLen()
			copy(area[end:], x.value)
			off = end + base
		}
		le.PutUint16(e[2:], uint16(off))
		le.PutUint32(e[4:], 0) // e_value_inum
		le.PutUint32(e[8:], uint32(len(x.value)))
		h := x.hash()
		le.PutUint32(e[12:], h)
		copy(e[xattrEntryHdr:], x.name)
		pos += x.entryLen()
		zero = zero || h == 0
		blockHash = blockHash<<16 ^ blockHash>>16 ^ h
	}
	if zero {
		return 0 // ext4_xattr_rehash: an unhashed entry unhashes the block
	}
	return blockHash
}

// putInodeXattrs writes the in-inode area of an inode record.
func putInodeXattrs(rec []byte, xs []*xattr) {
	if len(xs) == 0 {
		return
	}
	le.PutUint32(rec[inodeXattrStart:], xattrMagic)
	area := rec[inodeXattrStart+4 : inodeSize]
	putXattrs(area, 0, xs)
}

// xattrBlock encodes an xattr block.
func xattrBlock(b []byte, xs []*xattr) {
	le.PutUint32(b[0:], xattrMagic)
	le.PutUint32(b[4:], 1) // h_refcount
	le.PutUint32(b[8:], 1) // h_blocks
	h := putXattrs(b[xattrBlockHdr:], xattrBlockHdr, xs)
	le.PutUint32(b[16:], h)
}
