package layers

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
)

// spilledTree is the tree Flatten hands over (a ports.Tree): every entry
// encoded as one record in an unlinked temporary file, in tree order, so
// that while a builder runs the tree costs 12 bytes of memory per entry
// (where its record starts, and its layer) whatever its names, links and
// xattrs. Entry decodes a record, read through a window of the file, so
// that reading the tree in order, or one layer after another in order,
// costs a read per window rather than per entry.
type spilledTree struct {
	f      *os.File
	offs   []int64 // record i is [offs[i], offs[i+1]); the last one ends at size
	size   int64
	layers []int32
	files  []*os.File // content sources; a record names one by index + 1

	mu     sync.Mutex
	win    []byte // the file's bytes from winOff
	winOff int64
}

var (
	_ ports.Tree       = (*spilledTree)(nil)
	_ ports.TreeLayers = (*spilledTree)(nil)
)

// spillWindow is how much of the record file one read brings in, and
// spillBuffer how much is written at once: small, since a fresh large
// buffer costs its page faults on every Flatten.
const (
	spillWindow = 64 << 10
	spillBuffer = 64 << 10
)

// Len implements ports.Tree.
func (s *spilledTree) Len() int { return len(s.offs) }

// EntryLayer implements ports.TreeLayers.
func (s *spilledTree) EntryLayer(i int) int { return int(s.layers[i]) }

// Entry implements ports.Tree.
func (s *spilledTree) Entry(i int) (ports.TreeEntry, error) {
	end := s.size
	if i+1 < len(s.offs) {
		end = s.offs[i+1]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.record(s.offs[i], end)
	if err != nil {
		return ports.TreeEntry{}, fmt.Errorf("flattened tree: entry %d: %w", i, err)
	}
	e, err := s.decode(rec)
	if err != nil {
		return ports.TreeEntry{}, fmt.Errorf("flattened tree: entry %d: %w", i, err)
	}
	return e, nil
}

// record returns the bytes [off, end) of the file, through the window.
func (s *spilledTree) record(off, end int64) ([]byte, error) {
	if off < s.winOff || end > s.winOff+int64(len(s.win)) {
		n := max(end-off, min(spillWindow, s.size-off))
		if int64(cap(s.win)) < n {
			s.win = make([]byte, n)
		}
		s.win = s.win[:n]
		if _, err := s.f.ReadAt(s.win, off); err != nil {
			s.win = s.win[:0]
			return nil, err
		}
		s.winOff = off
	}
	return s.win[off-s.winOff : end-s.winOff], nil
}

// close closes the record file (the content files are the flattener's).
func (s *spilledTree) close() {
	if s != nil && s.f != nil {
		s.f.Close()
	}
}

var errBadRecord = errors.New("corrupt record")

// A record is, in order: the typeflag; name and linkname (uvarint length,
// bytes); mode, uid, gid (uvarint); mtime (varint); size, devmajor,
// devminor (uvarint); the xattrs (uvarint count, then name and value as
// strings); the content source (uvarint: 0 none, else index + 1) and,
// with a source, its offset, whether the zero list is known and its runs
// (uvarint count, then first and count); the layer (uvarint).

// spillWriter appends records to the record file.
type spillWriter struct {
	t     *spilledTree
	w     *bufio.Writer
	off   int64
	buf   []byte
	files map[*os.File]uint64
}

func newSpillWriter() (*spillWriter, error) {
	f, err := newSpool()
	if err != nil {
		return nil, err
	}
	return &spillWriter{t: &spilledTree{f: f}, w: bufio.NewWriterSize(hostWriter{f}, spillBuffer), files: map[*os.File]uint64{}}, nil
}

// add appends the entry h, whose metadata (xattrs) is m's and whose
// content, for the name carrying it, is content's, in file src.
func (w *spillWriter) add(h *tar.Header, m, content *meta, src *os.File, layer int) error {
	b := w.buf[:0]
	b = append(b, h.Typeflag)
	b = appendString(b, h.Name)
	b = appendString(b, h.Linkname)
	b = binary.AppendUvarint(b, uint64(h.Mode))
	b = binary.AppendUvarint(b, uint64(h.Uid))
	b = binary.AppendUvarint(b, uint64(h.Gid))
	b = binary.AppendVarint(b, h.ModTime.Unix())
	b = binary.AppendUvarint(b, uint64(h.Size))
	b = binary.AppendUvarint(b, uint64(h.Devmajor))
	b = binary.AppendUvarint(b, uint64(h.Devminor))
	var xs []xattr
	if h.Typeflag != tar.TypeLink {
		xs = m.xattrs()
	}
	b = binary.AppendUvarint(b, uint64(len(xs)))
	for _, x := range xs {
		b = appendString(b, x.name)
		b = appendString(b, x.value)
	}
	if content == nil || content.size == 0 || src == nil {
		b = append(b, 0)
	} else {
		n, ok := w.files[src]
		if !ok {
			w.t.files = append(w.t.files, src)
			n = uint64(len(w.t.files))
			w.files[src] = n
		}
		b = binary.AppendUvarint(b, n)
		b = binary.AppendUvarint(b, uint64(content.off))
		known := byte(0)
		if content.zeroKnown {
			known = 1
		}
		b = append(b, known)
		b = binary.AppendUvarint(b, uint64(len(content.zero())))
		for _, r := range content.zero() {
			b = binary.AppendUvarint(b, uint64(r[0]))
			b = binary.AppendUvarint(b, uint64(r[1]))
		}
	}
	b = binary.AppendUvarint(b, uint64(max(0, layer)))
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("spool the tree: %w", err)
	}
	w.t.offs = append(w.t.offs, w.off)
	w.t.layers = append(w.t.layers, int32(max(0, layer)))
	w.off += int64(len(b))
	return nil
}

// finish flushes the records and returns the tree.
func (w *spillWriter) finish() (*spilledTree, error) {
	if err := w.w.Flush(); err != nil {
		return nil, fmt.Errorf("spool the tree: %w", err)
	}
	w.t.size = w.off
	w.t.offs = w.t.offs[:len(w.t.offs):len(w.t.offs)]
	w.t.layers = w.t.layers[:len(w.t.layers):len(w.t.layers)]
	return w.t, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// recordReader decodes one record.
type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *recordReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *recordReader) fail() {
	if r.err == nil {
		r.err = errBadRecord
	}
	r.b = nil
}

func (s *spilledTree) decode(rec []byte) (ports.TreeEntry, error) {
	r := &recordReader{b: rec}
	h := &tar.Header{Typeflag: r.byte()}
	h.Name = r.string()
	h.Linkname = r.string()
	h.Mode = int64(r.uvarint())
	h.Uid = int(r.uvarint())
	h.Gid = int(r.uvarint())
	h.ModTime = time.Unix(r.varint(), 0)
	h.Size = int64(r.uvarint())
	h.Devmajor = int64(r.uvarint())
	h.Devminor = int64(r.uvarint())
	if n := r.uvarint(); n > 0 && r.err == nil {
		h.PAXRecords = make(map[string]string, n)
		for range n {
			k := r.string()
			h.PAXRecords[paxXattr+k] = r.string()
		}
		h.Format = tar.FormatPAX
	}
	e := ports.TreeEntry{Header: h}
	if src := r.uvarint(); src > 0 {
		if src > uint64(len(s.files)) {
			r.fail()
		} else {
			e.File = s.files[src-1]
		}
		e.Offset = int64(r.uvarint())
		e.ZeroKnown = r.byte() == 1
		if n := r.uvarint(); n > 0 && n <= uint64(len(r.b)) {
			e.Zero = make([][2]uint32, n)
			for k := range e.Zero {
				e.Zero[k] = [2]uint32{uint32(r.uvarint()), uint32(r.uvarint())}
			}
		} else if n > 0 {
			r.fail()
		}
	}
	e.Layer = int(r.uvarint())
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	return e, r.err
}

// spill is pass two: the tree's entries, in tar order, written as records;
// Stats counts them.
func (t *tree) spill(ctx context.Context) (*spilledTree, Stats, error) {
	var st Stats
	w, err := newSpillWriter()
	if err != nil {
		return nil, st, err
	}
	err = t.walk(ctx, func(h *tar.Header, m, content *meta, layer int) error {
		st.count(h.Typeflag, h.Size)
		var src *os.File
		if content != nil {
			src = t.file(content)
		}
		return w.add(h, m, content, src, layer)
	})
	var sp *spilledTree
	if err == nil {
		sp, err = w.finish()
	}
	if err != nil {
		w.t.close()
		return nil, st, err
	}
	return sp, st, nil
}
