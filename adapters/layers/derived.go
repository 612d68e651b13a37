package layers

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/ports"
)

// A decoded layer kept in Layer.Derived is two files:
//
//	<name>.content  the content of its regular files, in archive order
//	<name>.index    a header (gob: the layer's DiffID, the content size,
//	                the number of entries), then each validated entry as a
//	                gob value of its own, with its offset in the content
//	                file
//
// Entries are written and read one at a time, so keeping or loading a
// layer of a hundred thousand files holds one entry at a time beyond the
// layer's entry log, never the whole index encoded in memory.
//
// The name carries this format's version and a hash of every limit that
// decides whether an entry passes, so that a flattener with other rules
// never takes another's result for its own. A later build of the same
// blob loads the index and reads content from the file: no decompression,
// no tar parsing, no validation to redo.

const derivedFormat = "flatten-v4"

// derivedName names one of the two files for lim.
func derivedName(lim Limits, kind string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%+v|%d|%d", lim, metaBase, metaPerEntry)
	return derivedFormat + "-" + hex.EncodeToString(h.Sum(nil))[:16] + "." + kind
}

// derivedHeader starts the index file; Entries derivedEntry values
// follow it.
type derivedHeader struct {
	Format      string
	DiffID      string
	ContentSize int64
	Entries     int
}

// derivedEntry is an entry as stored; see entry.
type derivedEntry struct {
	Name, Raw    string
	Typ          byte
	Link         string
	Size, Mode   int64
	UID, GID     int
	MTime        int64
	Major, Minor int64
	Xattrs       []derivedXattr
	Sparse       bool
	Wh           uint8
	WhName       string
	Off          int64
	Zero         [][2]uint32
	ZeroKnown    bool
}

type derivedXattr struct{ Name, Value string }

var errNoDerived = errors.New("no derived layer")

// loadDerived reads a decoded layer back, or fails (errNoDerived for a
// miss, ports.ErrDiffIDMismatch when it decodes to another DiffID than
// the one asked for, in the same algorithm).
func loadDerived(l Layer, lim Limits) (*layerData, error) {
	f, err := l.Derived.Open(derivedName(lim, "index"))
	if err != nil {
		return nil, errNoDerived
	}
	defer f.Close()
	var ix derivedHeader
	dec := gob.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	if err := dec.Decode(&ix); err != nil || ix.Format != derivedFormat || ix.Entries < 0 {
		return nil, errNoDerived
	}
	if l.DiffID != "" && ix.DiffID != l.DiffID {
		if a, _, _ := strings.Cut(ix.DiffID, ":"); !strings.HasPrefix(l.DiffID, a+":") {
			// Kept with a digest in another algorithm: decode again.
			return nil, errNoDerived
		}
		return nil, fmt.Errorf("uncompressed digest %s, config says %s: %w", ix.DiffID, l.DiffID, ports.ErrDiffIDMismatch)
	}
	d := &layerData{}
	if ix.ContentSize > 0 {
		c, err := l.Derived.Open(derivedName(lim, "content"))
		if err != nil {
			return nil, errNoDerived
		}
		if st, err := c.Stat(); err != nil || st.Size() < ix.ContentSize {
			c.Close()
			return nil, errNoDerived
		}
		d.spool = c
	}
	for range ix.Entries {
		// A fresh value each time: gob leaves the fields a message does
		// not carry (zero values) as they were.
		var de derivedEntry
		if err := dec.Decode(&de); err != nil {
			d.close()
			return nil, errNoDerived
		}
		e := &entry{
			name: de.Name, raw: de.Raw, typ: de.Typ, link: de.Link, size: de.Size, mode: de.Mode,
			uid: de.UID, gid: de.GID, mtime: de.MTime, major: de.Major, minor: de.Minor,
			sparse: de.Sparse, wh: whKind(de.Wh), whName: de.WhName, zero: de.Zero, zeroKnown: de.ZeroKnown,
		}
		for _, x := range de.Xattrs {
			e.xattrs = append(e.xattrs, xattr{name: x.Name, value: x.Value})
		}
		if e.typ == tar.TypeReg && e.wh == whNone && e.size > 0 {
			if d.spool == nil || de.Off < 0 || de.Off+e.size > ix.ContentSize {
				d.close()
				return nil, errNoDerived
			}
			e.src, e.off = d.spool, de.Off
		}
		d.log.add(d, e)
	}
	return d, nil
}

// storeDerived keeps a decoded layer whose content is all in its spool
// (layers read in place are cheap to read again and are not kept).
func storeDerived(l Layer, lim Limits, d *layerData, diffID string, contentSize int64, commitContent func() error) error {
	inPlace := false
	_ = d.log.each(d, false, func(e *entry) error {
		inPlace = inPlace || e.typ == tar.TypeReg && e.wh == whNone && e.size > 0 && (e.src != d.spool || d.spool == nil)
		return nil
	})
	if inPlace {
		return nil
	}
	if contentSize > 0 {
		if commitContent == nil {
			return nil // spooled to a plain temporary file
		}
		if err := commitContent(); err != nil {
			return err
		}
	}
	f, commit, err := l.Derived.Create(derivedName(lim, "index"))
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	enc := gob.NewEncoder(bw)
	if err := enc.Encode(derivedHeader{Format: derivedFormat, DiffID: diffID, ContentSize: contentSize, Entries: d.log.n}); err != nil {
		return err
	}
	err = d.log.each(d, false, func(e *entry) error {
		de := derivedEntry{
			Name: e.name, Raw: e.raw, Typ: e.typ, Link: e.link, Size: e.size, Mode: e.mode,
			UID: e.uid, GID: e.gid, MTime: e.mtime, Major: e.major, Minor: e.minor,
			Sparse: e.sparse, Wh: uint8(e.wh), WhName: e.whName, Off: e.off, Zero: e.zero, ZeroKnown: e.zeroKnown,
		}
		for _, x := range e.xattrs {
			de.Xattrs = append(de.Xattrs, derivedXattr{Name: x.name, Value: x.value})
		}
		return enc.Encode(&de)
	})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return commit()
}
