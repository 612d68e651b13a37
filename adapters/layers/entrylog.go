package layers

import (
	"encoding/binary"
	"errors"
)

// entryLog holds the validated entries of one layer between pass one and
// the tree, encoded one after the other in slabs of memory: about a
// quarter of what the entries would take as structs with their strings,
// which matters while a large layer waits for the layers below it.
type entryLog struct {
	slabs [][]byte
	n     int
}

// entryLogSlab is the size of the largest slab; slabs start small (a
// small layer should not pay for a large fresh allocation) and double.
// A larger record gets a slab of its own size.
const (
	entryLogSlab      = 256 << 10
	entryLogFirstSlab = 4 << 10
)

// Source kinds of an encoded entry's content.
const (
	srcNone  = 0
	srcFile  = 1 // layerData.file
	srcSpool = 2 // layerData.spool
)

// add encodes e, whose content (if any) is in d's file or spool.
func (l *entryLog) add(d *layerData, e *entry) {
	var b []byte
	if k := len(l.slabs); k > 0 {
		b = l.slabs[k-1]
	}
	start := len(b)
	b = append(b, e.typ, byte(e.wh))
	flags := byte(0)
	if e.sparse {
		flags |= 1
	}
	if e.zeroKnown {
		flags |= 2
	}
	if e.raw != e.name {
		flags |= 4
	}
	src := byte(srcNone)
	switch {
	case e.src == nil:
	case e.src == d.file:
		src = srcFile
	case e.src == d.spool:
		src = srcSpool
	default:
		panic("layers: entry content outside its layer's files")
	}
	b = append(b, flags, src)
	b = appendString(b, e.name)
	if flags&4 != 0 {
		b = appendString(b, e.raw)
	}
	b = appendString(b, e.link)
	b = appendString(b, e.whName)
	b = binary.AppendUvarint(b, uint64(e.size))
	b = binary.AppendUvarint(b, uint64(e.mode))
	b = binary.AppendUvarint(b, uint64(e.uid))
	b = binary.AppendUvarint(b, uint64(e.gid))
	b = binary.AppendVarint(b, e.mtime)
	b = binary.AppendUvarint(b, uint64(e.major))
	b = binary.AppendUvarint(b, uint64(e.minor))
	b = binary.AppendUvarint(b, uint64(e.off))
	b = binary.AppendUvarint(b, uint64(len(e.xattrs)))
	for _, x := range e.xattrs {
		b = appendString(b, x.name)
		b = appendString(b, x.value)
	}
	b = binary.AppendUvarint(b, uint64(len(e.zero)))
	for _, r := range e.zero {
		b = binary.AppendUvarint(b, uint64(r[0]))
		b = binary.AppendUvarint(b, uint64(r[1]))
	}
	l.n++
	switch k := len(l.slabs); {
	case k > 0 && cap(b) == cap(l.slabs[k-1]):
		l.slabs[k-1] = b // it fit
	default:
		// It did not fit (or there was no slab): move the record to a
		// new slab rather than keep append's copy of the old one.
		rec := b[start:]
		size := entryLogFirstSlab
		if k > 0 {
			size = min(entryLogSlab, 2*cap(l.slabs[k-1]))
		}
		slab := make([]byte, 0, max(size, len(rec)))
		slab = append(slab, rec...)
		if k > 0 {
			l.slabs[k-1] = l.slabs[k-1][:start]
		}
		l.slabs = append(l.slabs, slab)
	}
}

var errBadLog = errors.New("layers: corrupt entry log")

// each decodes the entries in order and calls fn with each; the log may
// be dropped as it goes (release). The entry passed to fn is reused for
// the next one (its strings and slices are not): fn must not keep it.
func (l *entryLog) each(d *layerData, release bool, fn func(*entry) error) error {
	e := new(entry)
	for i, slab := range l.slabs {
		r := &recordReader{b: slab}
		for len(r.b) > 0 {
			*e = entry{typ: r.byte(), wh: whKind(r.byte())}
			flags, src := r.byte(), r.byte()
			e.sparse, e.zeroKnown = flags&1 != 0, flags&2 != 0
			e.name = r.string()
			e.raw = e.name
			if flags&4 != 0 {
				e.raw = r.string()
			}
			e.link = r.string()
			e.whName = r.string()
			e.size = int64(r.uvarint())
			e.mode = int64(r.uvarint())
			e.uid = int(r.uvarint())
			e.gid = int(r.uvarint())
			e.mtime = r.varint()
			e.major = int64(r.uvarint())
			e.minor = int64(r.uvarint())
			e.off = int64(r.uvarint())
			if n := r.uvarint(); n > 0 && n <= uint64(len(r.b)) {
				e.xattrs = make([]xattr, n)
				for k := range e.xattrs {
					e.xattrs[k] = xattr{name: r.string(), value: r.string()}
				}
			} else if n > 0 {
				r.fail()
			}
			if n := r.uvarint(); n > 0 && n <= uint64(len(r.b)) {
				e.zero = make([][2]uint32, n)
				for k := range e.zero {
					e.zero[k] = [2]uint32{uint32(r.uvarint()), uint32(r.uvarint())}
				}
			} else if n > 0 {
				r.fail()
			}
			switch src {
			case srcFile:
				e.src = d.file
			case srcSpool:
				e.src = d.spool
			}
			if r.err != nil {
				return errBadLog
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if release {
			l.slabs[i] = nil
		}
	}
	if release {
		l.slabs, l.n = nil, 0
	}
	return nil
}
