package layers

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Flatten applies layers in order (OCI whiteouts ".wh.<name>" and opaque
// directories ".wh..wh..opq") and hands the final tree to use as entries
// (ports.TreeFlattener): the content stays in the layer files and spools,
// which remain open until use returns. See the package documentation for
// the rules it enforces.
//
// It works in two passes. Pass one decodes every layer once, several at a
// time (the largest first), validating each header and spooling regular
// file content to a file (uncompressed layer files are read back in
// place instead); it keeps only the validated headers in memory, encoded
// in an entry log per layer (entrylog.go). A layer streamed while it
// downloads (Layer.Blob) is decoded as its bytes arrive; a layer decoded
// by an earlier build is loaded from Layer.Derived instead. Each layer is
// applied to an in-memory tree as soon as it and every layer below it are
// read, so the tree is ready when the last one is; the tree keeps of an
// entry only its metadata and its last name (tree.go), and a layer's log
// goes as it is applied. Pass two writes the surviving entries, sorted,
// with where their content is, to a record file (spilled.go) and drops
// the tree before use gets the records as a ports.Tree.
func Flatten(ctx context.Context, layers []Layer, lim Limits, use func(ports.Tree) error) (Stats, error) {
	var st Stats
	err := flattenLayers(ctx, layers, lim, func(tree *spilledTree, s Stats) error {
		st = s
		return use(tree)
	})
	return st, err
}

// flattenLayers is pass one and the tree; the tree is then spilled (pass
// two) and handed to out, the in-memory tree already released.
func flattenLayers(ctx context.Context, layers []Layer, lim Limits, out func(*spilledTree, Stats) error) error {
	lim = lim.orDefault()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := startLayers(ctx, layers, lim)
	defer r.close()

	t := newTree(lim, 0)
	for i := range layers {
		d, err := r.wait(i)
		if err != nil {
			cancel()
			return r.firstErr(err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if flattenApplying != nil {
			flattenApplying()
		}
		t.grow(int64(d.log.n))
		if err := t.apply(i, layers[i].Digest, d); err != nil {
			cancel()
			return err
		}
	}
	if err := r.finish(); err != nil {
		return err
	}
	if total := t.contentBytes(); total > lim.MaxTotalBytes {
		return &RejectError{Layer: -1, Rule: RuleImageTooLarge,
			Detail: fmt.Sprintf("declared sizes %d > %d", total, lim.MaxTotalBytes)}
	}
	if flattenTreeDone != nil {
		flattenTreeDone()
	}
	sp, st, err := t.spill(ctx)
	if err != nil {
		return err
	}
	defer sp.close()
	// Only the spilled tree is needed from here on: the nodes and entries
	// go before the builder runs.
	t = nil
	return out(sp, st)
}

// flattenTreeDone, when set (by tests), is called once every layer is
// applied to the tree, before it is handed over.
var flattenTreeDone func()

// flattenApplying, when set (by tests), is called before each layer is
// applied to the tree.
var flattenApplying func()

// layerData is what pass one keeps of a layer.
type layerData struct {
	log   entryLog // the entries, until applied
	file  *os.File // the layer blob; content of uncompressed layers is read in place
	spool *os.File // content of compressed (or streamed) layers
}

func (d *layerData) close() {
	if d == nil {
		return
	}
	if d.file != nil {
		d.file.Close()
	}
	if d.spool != nil {
		d.spool.Close()
	}
}

// reading is pass one in progress: one goroutine per layer, at most
// readConcurrency decoding at once, largest layers first.
type reading struct {
	data   []*layerData
	errs   []error
	done   []chan struct{}
	cancel []context.CancelFunc
	wg     sync.WaitGroup
}

// readConcurrency is how many layers decode at once: more than the cores,
// so that a layer waiting for its download does not hold one back.
func readConcurrency(n int) int { return max(1, min(n, max(4, 2*runtime.GOMAXPROCS(0)))) }

func startLayers(parent context.Context, layers []Layer, lim Limits) *reading {
	n := len(layers)
	r := &reading{data: make([]*layerData, n), errs: make([]error, n), done: make([]chan struct{}, n), cancel: make([]context.CancelFunc, n)}
	ctxs := make([]context.Context, n)
	for i := range layers {
		ctxs[i], r.cancel[i] = context.WithCancel(parent)
		r.done[i] = make(chan struct{})
	}
	// Longest first keeps the cores busy to the end (the last layer to
	// finish is then a small one).
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sizes := make([]int64, n)
	for i, l := range layers {
		sizes[i] = l.Size
		if sizes[i] == 0 && l.Blob == nil {
			if st, err := os.Stat(l.Path); err == nil {
				sizes[i] = st.Size()
			}
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return sizes[order[a]] > sizes[order[b]] })
	queue := make(chan int, n)
	for _, i := range order {
		queue <- i
	}
	close(queue)
	var total atomic.Int64
	for range readConcurrency(n) {
		r.wg.Go(func() {
			for i := range queue {
				if r.errs[i] = ctxs[i].Err(); r.errs[i] == nil {
					r.data[i], r.errs[i] = readLayer(ctxs[i], i, layers[i], lim, &total)
				}
				if r.errs[i] != nil {
					// A failing layer stops only the layers above it, so the
					// error reported is always that of the lowest failing
					// layer, however the goroutines interleave.
					for _, c := range r.cancel[i+1:] {
						c()
					}
				}
				close(r.done[i])
			}
		})
	}
	return r
}

// wait returns layer i once it is read.
func (r *reading) wait(i int) (*layerData, error) {
	<-r.done[i]
	return r.data[i], r.errs[i]
}

// firstErr waits for every layer and returns the error of the lowest
// failing one (err is the error that stopped the caller).
func (r *reading) firstErr(err error) error {
	r.wg.Wait()
	for _, e := range r.errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			return e
		}
	}
	return err
}

// finish waits for every layer and returns the first error.
func (r *reading) finish() error {
	r.wg.Wait()
	for _, e := range r.errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (r *reading) close() {
	for _, c := range r.cancel {
		c()
	}
	r.wg.Wait()
	for _, d := range r.data {
		d.close()
	}
}

// metaAllowance is how many decompressed bytes a layer may spend on headers,
// padding and PAX records besides declared content: a base plus a per-entry
// share, generous for real layers, fatal for bombs made of metadata.
// (Variables so tests can shrink them.)
var (
	metaBase     int64 = 64 << 20
	metaPerEntry int64 = 8 << 10
)

// readLayer is pass one for one layer: from the derived cache if an
// earlier build decoded it, else by decoding it (and keeping the result
// in the derived cache).
func readLayer(ctx context.Context, idx int, l Layer, lim Limits, total *atomic.Int64) (*layerData, error) {
	alg, err := diffAlgorithm(l.DiffID)
	if err != nil {
		return nil, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
	}
	if l.Derived != nil {
		d, err := loadDerived(l, lim)
		if err == nil {
			if n := total.Add(int64(d.log.n)); n > int64(lim.MaxEntries) {
				d.close()
				return nil, &RejectError{Layer: idx, Digest: l.Digest, Rule: RuleTooManyEntries, Detail: fmt.Sprintf("more than %d entries", lim.MaxEntries)}
			}
			// A stream of the blob is not read: the derived files were
			// made from this blob verified, and the caller learns how its
			// fetch ended from the source.
			return d, nil
		}
		if errors.Is(err, ports.ErrDiffIDMismatch) {
			return nil, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
		}
	}
	return decodeLayer(ctx, idx, l, alg, lim, total)
}

// diffAlgorithm is the algorithm a diff_id is written in: sha256 or
// sha512, the two an image config may use (the registry accepts both).
// Without a diff_id (nothing to verify, the digest is only kept with a
// derived layer) it is sha256.
func diffAlgorithm(diffID string) (string, error) {
	if diffID == "" {
		return "sha256", nil
	}
	alg, _, ok := strings.Cut(diffID, ":")
	if !ok {
		return "", fmt.Errorf("diff_id %q names no algorithm: %w", diffID, core.ErrUnsupported)
	}
	if alg != "sha256" && alg != "sha512" {
		return "", fmt.Errorf("diff_id %q: algorithm %q cannot be verified (sha256 or sha512): %w", diffID, alg, core.ErrUnsupported)
	}
	return alg, nil
}

// newDiffHash returns a hash for an algorithm diffAlgorithm accepted.
func newDiffHash(alg string) hash.Hash {
	if alg == "sha512" {
		return sha512.New()
	}
	return sha256.New()
}

// decodeLayer decodes one layer blob; alg is its diff_id's algorithm.
func decodeLayer(ctx context.Context, idx int, l Layer, alg string, lim Limits, total *atomic.Int64) (d *layerData, err error) {
	rej := func(entry string, rj *rejection) error {
		return &RejectError{Layer: idx, Digest: l.Digest, Entry: entry, Rule: rj.rule, Detail: rj.detail}
	}
	d = &layerData{}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	var blob *bufio.Reader // the raw blob, for streams
	var comp compression
	if l.Blob != nil {
		blob = bufio.NewReaderSize(sourceReader{l.Blob}, 1<<20)
		head, perr := blob.Peek(4)
		if perr != nil && perr != io.EOF && perr != bufio.ErrBufferFull {
			return d, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, perr)
		}
		var rj *rejection
		if comp, rj = detectBytes(head, l.MediaType); rj != nil {
			return d, rej("", rj)
		}
	} else {
		f, err := os.Open(l.Path)
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
		}
		d.file = f
		var rj *rejection
		comp, rj, err = detect(f, l.MediaType)
		if err != nil {
			return d, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
		}
		if rj != nil {
			return d, rej("", rj)
		}
	}

	// diff hashes the uncompressed stream (the DiffID) when one is to be
	// verified or kept.
	var diff hash.Hash
	if l.DiffID != "" || l.Derived != nil {
		diff = newDiffHash(alg)
	}
	var (
		tr      *tar.Reader
		pos     *posReader
		bounded *boundedReader
		raw     io.Reader // the uncompressed stream
		fed     bool      // a goroutine copies blob into the decoder
	)
	switch {
	case comp == plain && blob == nil:
		pos = &posReader{f: d.file}
		raw = pos
	case comp == plain:
		raw = blob
	default:
		dec, err := openDecoder(comp, blob, d.file, l.Gunzip, lim)
		if err != nil {
			rj, err := classify(err)
			if err != nil {
				return d, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
			}
			return d, rej("", rj)
		}
		defer dec.Close()
		_, fed = dec.(sourceFeeder)
		bounded = &boundedReader{r: dec, allow: metaBase + metaPerEntry}
		raw = bounded
	}
	if diff != nil {
		// Not seekable, so tar reads skipped content too: it must be hashed.
		raw = &hashingReader{r: raw, h: diff}
	}
	tr = tar.NewReader(raw)

	// The spool keeps content of layers not readable in place; it goes to
	// the derived cache when there is one.
	var commitSpool func() error
	newSpoolFile := func() (*os.File, error) {
		if l.Derived != nil {
			f, commit, err := l.Derived.Create(derivedName(lim, "content"))
			if err == nil {
				commitSpool = commit
				return f, nil
			}
		}
		return newSpool()
	}

	var (
		buf      []byte
		spoolW   *spoolWriter
		spoolOff int64
		declared int64
		last     string
		entries  int64
	)
	readErr := func(err error) error {
		rj, ioErr := classify(err)
		if ioErr != nil {
			return fmt.Errorf("layer %d (%s): %w", idx, l.Digest, ioErr)
		}
		if last != "" {
			rj.detail = fmt.Sprintf("after entry %q: %s", last, rj.detail)
		}
		return rej("", rj)
	}
	for {
		if err := ctx.Err(); err != nil {
			return d, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return d, readErr(err)
		}
		entries++
		if n := total.Add(1); n > int64(lim.MaxEntries) {
			return d, rej(hdr.Name, reject(RuleTooManyEntries, "more than %d entries", lim.MaxEntries))
		}
		e, rj := parseHeader(hdr, lim)
		if rj != nil {
			return d, rej(hdr.Name, rj)
		}
		if e == nil {
			continue
		}
		last = hdr.Name
		if e.typ == tar.TypeReg && e.wh == whNone {
			declared += e.size
			if declared > lim.MaxTotalBytes {
				return d, rej(hdr.Name, reject(RuleLayerTooLarge, "declared sizes %d > %d", declared, lim.MaxTotalBytes))
			}
		}
		if bounded != nil {
			// Raised before the content is read: the next header may
			// follow only after this entry's declared bytes.
			bounded.allow = declared + metaBase + (entries+1)*metaPerEntry
		}
		if e.typ == tar.TypeReg && e.wh == whNone {
			switch {
			case e.size == 0:
			case pos != nil && !e.sparse:
				e.src, e.off = d.file, pos.pos
			default:
				if d.spool == nil {
					if d.spool, err = newSpoolFile(); err != nil {
						return d, err
					}
					hw := hostWriter{d.spool}
					spoolW = &spoolWriter{bufio.NewWriterSize(hw, 1<<20), hw}
				}
				e.src, e.off = d.spool, spoolOff
				if buf == nil {
					buf = make([]byte, 4<<20)
				}
				var n int64
				n, e.zero, err = copyContent(spoolW, tr, e.size, buf)
				e.zeroKnown = true
				spoolOff += n
				if err == nil && n != e.size {
					err = io.ErrUnexpectedEOF
				}
				if err != nil {
					if errors.Is(err, errBomb) || !isWriteErr(err) {
						return d, readErr(err)
					}
					return d, fmt.Errorf("layer %d (%s): spool: %w", idx, l.Digest, err)
				}
			}
		}
		d.log.add(d, e)
	}
	if spoolW != nil {
		if err := spoolW.Flush(); err != nil {
			return d, fmt.Errorf("layer %d (%s): spool: %w", idx, l.Digest, err)
		}
	}
	// The DiffID covers the whole uncompressed stream, padding after the
	// end-of-archive marker included; a stream must also be read to its
	// end, which is where its digest is verified. A gzip program's output
	// is read to its end in any case: its feeder reads the blob until the
	// program ends, and nothing else may read the blob before.
	if diff != nil || fed {
		if _, err := io.Copy(io.Discard, raw); err != nil {
			return d, readErr(err)
		}
	}
	if blob != nil {
		if _, err := io.Copy(io.Discard, blob); err != nil {
			return d, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
		}
	}
	var got string
	if diff != nil {
		got = alg + ":" + hex.EncodeToString(diff.Sum(nil))
		if l.DiffID != "" && got != l.DiffID {
			return d, fmt.Errorf("layer %d (%s): uncompressed digest %s, config says %s: %w", idx, l.Digest, got, l.DiffID, ports.ErrDiffIDMismatch)
		}
	}
	if l.Derived != nil && got != "" {
		// Best effort: a failure to keep the result costs only a decode.
		_ = storeDerived(l, lim, d, got, spoolOff, commitSpool)
	}
	return d, nil
}

// zeroBlock is one all-zero block, for comparisons.
var zeroBlock [zeroBlockSize]byte

const zeroBlockSize = 4096

// copyContent copies one file's size bytes from src to dst through buf (a
// multiple of 4 KiB) and notes its all-zero 4 KiB blocks, counted from the
// start of the file (a short last block counts as zero-padded), so that a
// builder told about them need not read the content to find its holes.
func copyContent(dst io.Writer, src io.Reader, size int64, buf []byte) (int64, [][2]uint32, error) {
	var zero [][2]uint32
	var n int64
	blk := uint32(0)
	for n < size {
		chunk := buf[:min(int64(len(buf)), size-n)]
		got, err := io.ReadFull(src, chunk)
		chunk = chunk[:got]
		for off := 0; off < len(chunk); off += zeroBlockSize {
			b := chunk[off:min(off+zeroBlockSize, len(chunk))]
			if len(b) == zeroBlockSize || n+int64(off+len(b)) == size {
				if bytes.Equal(b, zeroBlock[:len(b)]) {
					if k := len(zero); k > 0 && zero[k-1][0]+zero[k-1][1] == blk {
						zero[k-1][1]++
					} else {
						zero = append(zero, [2]uint32{blk, 1})
					}
				}
				blk++
			}
		}
		if got > 0 {
			if err := writeChunk(dst, chunk); err != nil {
				return n, zero, err
			}
			n += int64(got)
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, zero, err
		}
	}
	return n, zero, nil
}

// writeChunk writes a chunk of content to the spool; large ones skip the
// spool's buffer (which would only copy them).
func writeChunk(dst io.Writer, chunk []byte) error {
	if bw, ok := dst.(*spoolWriter); ok && len(chunk) >= 256<<10 {
		if err := bw.Flush(); err != nil {
			return err
		}
		_, err := bw.f.Write(chunk)
		return err
	}
	_, err := dst.Write(chunk)
	return err
}

// spoolWriter is the buffered spool with its file, for writeChunk.
type spoolWriter struct {
	*bufio.Writer
	f hostWriter
}

// sourceError marks a failure to read the blob itself (its download), so
// that it is not taken for bad layer bytes.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

type sourceReader struct{ r io.Reader }

func (s sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &sourceError{err}
	}
	return n, err
}

// hashingReader hashes what it reads.
type hashingReader struct {
	r io.Reader
	h hash.Hash
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

// hostWriteError marks write errors of host files so they are not taken for
// bad layer bytes.
type hostWriteError struct{ err error }

func (e *hostWriteError) Error() string { return e.err.Error() }
func (e *hostWriteError) Unwrap() error { return e.err }

func isWriteErr(err error) bool {
	var we *hostWriteError
	return errors.As(err, &we)
}

// hostWriter wraps the spool so write errors are recognisable. It has no
// ReadFrom on purpose: bufio would hand the copy to os.File and bypass Write.
type hostWriter struct{ f *os.File }

func (s hostWriter) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if err != nil {
		err = &hostWriteError{err}
	}
	return n, err
}

// newSpool creates an already-unlinked temporary file, so nothing is left
// behind whatever happens to the process.
func newSpool() (*os.File, error) {
	f, err := os.CreateTemp("", "cube-layer-spool-*")
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	return f, nil
}

// contentBytes sums the declared sizes of the tree's inodes, each once.
func (t *tree) contentBytes() int64 {
	seen := map[*meta]bool{}
	var total int64
	var walk func(n *node)
	walk = func(n *node) {
		for _, k := range n.kids {
			switch k.typ {
			case tar.TypeDir:
				walk(k)
			case tar.TypeReg:
				if !seen[k.m] {
					seen[k.m] = true
					total += k.m.size
				}
			}
		}
	}
	walk(t.root)
	return total
}

// implied is the metadata of directories no layer declared.
var implied = &meta{mode: 0o755}

// impliedEntry is implied as an entry, for Extract.
var impliedEntry = &entry{typ: tar.TypeDir, mode: 0o755}

// walk is pass two: a pre-order walk with siblings sorted by name, so
// parents come before children and the output is a function of the input.
// The first name of an inode carries the content; later names link to it.
// visit gets each entry's header (without its xattrs), the metadata it
// carries and, for one that carries content, its inode.
func (t *tree) walk(ctx context.Context, visit func(h *tar.Header, m, content *meta, layer int) error) error {
	// emitted is the first name of each inode with hard links.
	emitted := map[*meta]string{}
	var walk func(n *node, p string) error
	walk = func(n *node, p string) error {
		for _, name := range sortedKeys(n.kids) {
			if err := ctx.Err(); err != nil {
				return err
			}
			k, kp := n.kids[name], path.Join(p, name)
			e := k.m
			if e == nil {
				e = implied
			}
			h := &tar.Header{
				Name:    kp,
				Mode:    int64(e.mode),
				Uid:     int(e.uid),
				Gid:     int(e.gid),
				ModTime: time.Unix(e.mtime, 0),
			}
			var content *meta
			layer := int(k.layer)
			switch k.typ {
			case tar.TypeReg:
				layer = int(contentLayer(k))
				if first, ok := emitted[e]; ok {
					h.Typeflag, h.Linkname = tar.TypeLink, first
				} else {
					h.Typeflag, h.Size = tar.TypeReg, e.size
					if e.linked {
						emitted[e] = kp
					}
					content = e
				}
			case tar.TypeSymlink:
				h.Typeflag, h.Linkname = tar.TypeSymlink, e.link()
			case tar.TypeChar, tar.TypeBlock:
				h.Typeflag = k.typ
				if e.ext != nil {
					h.Devmajor, h.Devminor = e.ext.major, e.ext.minor
				}
			default:
				h.Typeflag = k.typ
			}
			if err := visit(h, e, content, max(0, layer)); err != nil {
				return err
			}
			if k.typ == tar.TypeDir {
				if err := walk(k, kp); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(t.root, "")
}
