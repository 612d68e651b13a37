package ext4stream

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/cubesandbox/templatecenter/adapters/diskio"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// A build gets the whole tree before writing: it places every entry
// without its content (each file's holes are known from
// ports.TreeEntry.Zero, or found by reading it once), writes the metadata,
// then copies the content into place in one sequential pass while another
// goroutine hashes the image in order. The content is read once and the
// hash costs no second pass over the file.

// plannedSource is the content of the regular file being added.
type plannedSource struct {
	file *os.File
	off  int64
	zero [][2]uint32
}

// copyJob is content to copy into the data area: a file's non-zero
// blocks, or a slow symlink's target. It holds no pointers and little
// else (a tree of small files has one per entry): its size and where its
// blocks go are its inode's, and its holes are the gaps between the
// inode's extents.
type copyJob struct {
	off int64  // in the source file; for a slow symlink, in w.text
	ino uint32 // the inode the content is of
	src uint32 // index in w.files, or inlineSrc
}

// inlineSrc marks a copyJob of a slow symlink's target.
const inlineSrc = math.MaxUint32

// sources are the distinct files the content comes from (a flattened
// tree has few: one per layer, or one in all).
type sources struct {
	files []*os.File
	index map[*os.File]uint32
}

// of returns f's index, adding it.
func (s *sources) of(f *os.File) uint32 {
	if i, ok := s.index[f]; ok {
		return i
	}
	if s.index == nil {
		s.index = map[*os.File]uint32{}
	}
	s.files = append(s.files, f)
	s.index[f] = uint32(len(s.files) - 1)
	return uint32(len(s.files) - 1)
}

// plan places every entry, holding it to the tree contract, in layer order
// (placeOrder).
func (w *fsWriter) plan(ctx context.Context, tree ports.Tree) error {
	w.grow(tree.Len())
	order, err := placeOrder(tree)
	if err != nil {
		return err
	}
	for k, i := range order {
		e, err := tree.Entry(i)
		if err != nil {
			return fmt.Errorf("read tree entry %d: %w", i, err)
		}
		if k%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if e.Header == nil {
			return fmt.Errorf("entry %d has no header: %w", i, core.ErrInvalidArgument)
		}
		it, err := convert(e.Header)
		if err != nil {
			return err
		}
		if it == nil {
			continue
		}
		w.src = plannedSource{}
		if it.typ == tar.TypeReg && it.size > 0 {
			if e.File == nil {
				return fmt.Errorf("tree entry %q: %d bytes of content and no file: %w", it.raw, it.size, core.ErrInvalidArgument)
			}
			w.src = plannedSource{file: e.File, off: e.Offset, zero: e.Zero}
			if !e.ZeroKnown {
				z, err := w.zeroRuns(ctx, e.File, e.Offset, it.size)
				if err != nil {
					return fmt.Errorf("tree entry %q: read content: %w", it.raw, err)
				}
				w.src.zero = z
			}
		}
		if err := w.add(it); err != nil {
			return err
		}
	}
	w.bufStart = w.next
	return nil
}

// placeOrder is the order entries are placed in: the lowest layer's
// first, each layer's in tree order (a stable sort by
// ports.TreeEntry.Layer). Inode numbers, data blocks and directory entries
// follow it, so a build whose upper layers changed keeps the lower
// layers' inodes, content and directory entries where the build before
// put them, and only what follows moves. Every name of a file carries its
// content's layer, so hard links still follow their targets; a directory
// an upper layer declared again is implied by its first child, in the
// lower layer, and takes the declaration's metadata when it comes.
// A tree that cannot tell an entry's layer without decoding it
// (ports.TreeLayers) is read once for them.
func placeOrder(tree ports.Tree) ([]int, error) {
	layerOf := func(i int) (int, error) {
		e, err := tree.Entry(i)
		if err != nil {
			return 0, fmt.Errorf("read tree entry %d: %w", i, err)
		}
		return e.Layer, nil
	}
	if tl, ok := tree.(ports.TreeLayers); ok {
		layerOf = func(i int) (int, error) { return tl.EntryLayer(i), nil }
	}
	layers := make([]int32, tree.Len())
	order := make([]int, tree.Len())
	for i := range order {
		l, err := layerOf(i)
		if err != nil {
			return nil, err
		}
		order[i], layers[i] = i, int32(l)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(layers[a], layers[b]) })
	return order, nil
}

// allocData places a file's non-zero blocks in the data area.
func (w *fsWriter) allocData(ino uint32, size int64) error {
	if size == 0 {
		return nil
	}
	src := w.src
	w.jobs = append(w.jobs, copyJob{src: w.files.of(src.file), off: src.off, ino: ino})
	blocks := uint32(ceilDiv(size, blockSize))
	lblk := uint32(0)
	from := len(w.extents)
	data := func(to uint32) {
		if to > lblk {
			w.addRun(from, lblk, w.next, to-lblk)
			w.next += to - lblk
		}
	}
	for _, r := range src.zero {
		if r[0] < lblk || r[0]+r[1] > blocks {
			return fmt.Errorf("zero block list out of order or past the end: %w", core.ErrInvalidArgument)
		}
		data(r[0])
		lblk = r[0] + r[1]
	}
	data(blocks)
	w.setExtents(ino, from)
	if int64(w.next) > w.limitBlocks {
		w.exceeded = true
		return errLimit
	}
	return nil
}

// allocInline places one block of inline content (a slow symlink's
// target), kept in w.text until it is copied.
func (w *fsWriter) allocInline(ino uint32, b string) error {
	w.jobs = append(w.jobs, copyJob{src: inlineSrc, off: int64(len(w.text)), ino: ino})
	w.text = append(w.text, b...)
	from := len(w.extents)
	w.addRun(from, 0, w.next, 1)
	w.setExtents(ino, from)
	w.next++
	if int64(w.next) > w.limitBlocks {
		w.exceeded = true
		return errLimit
	}
	return nil
}

// zeroRuns finds the all-zero blocks of content the tree gave no list for.
func (w *fsWriter) zeroRuns(ctx context.Context, f *os.File, off, size int64) ([][2]uint32, error) {
	if w.scratch == nil {
		w.scratch = make([]byte, 1<<20)
	}
	return zeroRunsBuf(ctx, f, off, size, w.scratch)
}

// zeroRunsBuf is zeroRuns reading through buf; it stops when ctx ends (one
// file may be gigabytes).
func zeroRunsBuf(ctx context.Context, f *os.File, off, size int64, buf []byte) ([][2]uint32, error) {
	var runs [][2]uint32
	blk := uint32(0)
	for done := int64(0); done < size; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		chunk := buf[:min(int64(len(buf)), size-done)]
		if _, err := f.ReadAt(chunk, off+done); err != nil {
			return nil, err
		}
		for o := 0; o < len(chunk); o += blockSize {
			b := chunk[o:min(o+blockSize, len(chunk))]
			if bytes.Equal(b, zeroBlock[:len(b)]) {
				if k := len(runs); k > 0 && runs[k-1][0]+runs[k-1][1] == blk {
					runs[k-1][1]++
				} else {
					runs = append(runs, [2]uint32{blk, 1})
				}
			}
			blk++
		}
		done += int64(len(chunk))
	}
	return runs, nil
}

// errContentChanged: the content does not match the hole list it came
// with; the two build paths would no longer agree, so the build stops.
var errContentChanged = errors.New("file content does not match its list of zero blocks")

// copyAndHash copies the content into the data area and returns the sha256
// of the whole image: the head and the metadata, already written, are read
// back; the data is hashed from the copy buffers, in order, by a second
// goroutine while the next buffer fills, and then written by a
// diskio.Writer, several buffers at once.
func (w *fsWriter) copyAndHash(ctx context.Context, size int64) (string, error) {
	const bufSize = 4 << 20
	// Enough buffers for one filling, one hashing and every write in
	// flight: none of the three waits for another while the disk keeps up.
	const bufs = diskio.DefaultDepth + 3
	// Released last (deferred first): after the writer is closed and the
	// hashing has ended, nothing holds a piece.
	mem := diskio.NewBuffers(bufs, bufSize)
	defer mem.Release()
	free := make(chan []byte, bufs)
	for _, b := range mem.Pieces() {
		free <- b[:0]
	}
	full := make(chan dataPiece, bufs)
	hashed := make(chan error, 1)
	// The content goes to the disk with direct I/O where the filesystem
	// takes it: the image is written once and read back in order by the
	// store, so a gigabyte of page cache filled on the way is work (on
	// VMs whose host hands out memory lazily, most of the copy's time)
	// that buys nothing. The metadata around it stays buffered.
	dw := diskio.NewWriter(w.f, diskio.DefaultDepth)
	h := sha256.New()
	// The zeros after the metadata (the headroom: gigabytes, maybe) are
	// hashed only while the build stands: not once ctx ends, nor once the
	// copy failed.
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		err := hashRange(hctx, h, w.f, 0, int64(w.dataStart)*blockSize)
		for p := range full {
			if err == nil {
				h.Write(p.b)
			}
			b := p.b
			dw.WriteAt(b, p.off, func() { free <- b[:0] })
		}
		if err == nil {
			err = hashRange(hctx, h, w.f, w.dataEnd*blockSize, w.metaEnd*blockSize)
		}
		if err == nil {
			err = hashZeros(hctx, h, size-w.metaEnd*blockSize)
		}
		hashed <- err
	}()
	cerr := w.copyData(ctx, dw, free, full)
	if cerr != nil {
		stop() // the hash is moot
	}
	close(full)
	herr := <-hashed
	if cerr != nil {
		herr = nil // stopped, or moot
	}
	if err := dw.Close(); err != nil {
		cerr = errors.Join(cerr, fmt.Errorf("write image: %w", err))
	}
	if err := errors.Join(cerr, herr); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// dataPiece is a filled copy buffer and its offset in the image.
type dataPiece struct {
	b   []byte
	off int64
}

// copyData fills buffers from free with the data area's blocks in order
// and hands them to full; it stops at the first failed write, or when ctx
// ends (checked at every buffer: one file may be gigabytes).
func (w *fsWriter) copyData(ctx context.Context, dw *diskio.Writer, free <-chan []byte, full chan<- dataPiece) error {
	buf := <-free
	at := int64(w.dataStart) // block of buf[0]
	flush := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(buf) == 0 {
			return nil
		}
		if err := dw.Err(); err != nil {
			return fmt.Errorf("write image: %w", err)
		}
		full <- dataPiece{b: buf, off: at * blockSize}
		at += int64(len(buf) / blockSize)
		buf = <-free
		if w.progress != nil {
			w.progress(at-int64(w.dataStart), w.dataEnd-int64(w.dataStart))
		}
		return nil
	}
	for i, j := range w.jobs {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		n := w.node(j.ino)
		if n.extents > 0 && int64(w.firstBlock(n)) != at+int64(len(buf)/blockSize) {
			return fmt.Errorf("copy job %d starts at block %d, the data area is at %d", i, w.firstBlock(n), at+int64(len(buf)/blockSize))
		}
		if j.src == inlineSrc {
			if len(buf) == cap(buf) {
				if err := flush(); err != nil {
					return err
				}
			}
			k := len(buf)
			buf = buf[:k+blockSize]
			clear(buf[k:])
			copy(buf[k:], w.text[j.off:j.off+n.size])
			continue
		}
		if err := w.copyFile(ctx, j, n, &buf, flush); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if at != w.dataEnd {
		return fmt.Errorf("copied %d data blocks, planned %d", at-int64(w.dataStart), w.dataEnd-int64(w.dataStart))
	}
	return nil
}

// copyFile appends one file's non-zero blocks to *buf, reading straight
// into it and checking every block against the plan: the blocks its
// extents map hold data, the rest were zero. ctx is checked at every
// read: a file of zero blocks never fills a buffer to flush.
func (w *fsWriter) copyFile(ctx context.Context, j copyJob, n *inode, buf *[]byte, flush func() error) error {
	var one [1]extent
	data := w.extentsOf(n, &one)
	file := w.files.files[j.src]
	blk := uint32(0)
	for done := int64(0); done < n.size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(*buf) == cap(*buf) {
			if err := flush(); err != nil {
				return err
			}
		}
		b := *buf
		room := int64(cap(b) - len(b))
		take := min(room, n.size-done)
		chunk := b[len(b) : len(b)+int(ceilDiv(take, blockSize)*blockSize)]
		if n, err := file.ReadAt(chunk[:take], j.off+done); n < int(take) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read content: %w", err)
		}
		clear(chunk[take:])
		done += take
		kept := 0
		for off := 0; off < len(chunk); off += blockSize {
			for len(data) > 0 && data[0].lblk+uint32(data[0].n) <= blk {
				data = data[1:]
			}
			hole := len(data) == 0 || data[0].lblk > blk
			isZero := bytes.Equal(chunk[off:off+blockSize], zeroBlock[:])
			if hole != isZero {
				return errContentChanged
			}
			if !hole {
				if kept != off {
					copy(chunk[kept:], chunk[off:off+blockSize])
				}
				kept += blockSize
			}
			blk++
		}
		*buf = b[:len(b)+kept]
	}
	return nil
}

// hashRange hashes the file's bytes [from, to), or stops when ctx ends
// (the metadata of an image with millions of spare inodes is gigabytes).
func hashRange(ctx context.Context, h io.Writer, f *os.File, from, to int64) error {
	const step = 64 << 20
	for off := from; off < to; off += step {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := io.Copy(h, io.NewSectionReader(f, off, min(step, to-off))); err != nil {
			return err
		}
	}
	return nil
}

// hashZeros hashes n zero bytes, or stops when ctx ends.
func hashZeros(ctx context.Context, h io.Writer, n int64) error {
	var z [64 << 10]byte
	for i := 0; n > 0; i++ {
		if i%1024 == 0 { // every 64 MiB
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := min(n, int64(len(z)))
		h.Write(z[:k])
		n -= k
	}
	return nil
}
