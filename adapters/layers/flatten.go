package layers

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Flatten applies layers in order (OCI whiteouts ".wh.<name>" and opaque
// directories ".wh..wh..opq") and writes the final tree as one tar stream to
// w. See the package documentation for the rules it enforces.
//
// It works in two passes. Pass one decodes every layer once, in parallel,
// validating each header and spooling regular file content to an unlinked
// temporary file (uncompressed layers are read back in place instead); it
// keeps only the headers in memory. Pass two applies the layers to an
// in-memory tree in order and streams the surviving entries, sorted, from
// the spools.
func Flatten(ctx context.Context, layers []Layer, w io.Writer, lim Limits) (Stats, error) {
	lim = lim.orDefault()
	data, err := readLayers(ctx, layers, lim)
	defer func() {
		for _, d := range data {
			d.close()
		}
	}()
	if err != nil {
		return Stats{}, err
	}

	var entries int64
	for _, d := range data {
		entries += int64(len(d.entries))
	}
	t := newTree(lim, entries)
	for i, d := range data {
		if err := ctx.Err(); err != nil {
			return Stats{}, err
		}
		if err := t.apply(i, layers[i].Digest, d.entries); err != nil {
			return Stats{}, err
		}
		d.entries = nil // the tree holds what survives
	}
	if total := t.contentBytes(); total > lim.MaxTotalBytes {
		return Stats{}, &RejectError{Layer: -1, Rule: RuleImageTooLarge,
			Detail: fmt.Sprintf("declared sizes %d > %d", total, lim.MaxTotalBytes)}
	}
	return t.write(ctx, w)
}

// layerData is what pass one keeps of a layer.
type layerData struct {
	entries []*entry
	file    *os.File // the layer blob; content of uncompressed layers is read in place
	spool   *os.File // unlinked temporary file with content of compressed layers
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

// readLayers runs pass one over all layers, at most GOMAXPROCS at a time.
// A failing layer stops only the layers above it, so the error reported is
// always that of the lowest failing layer, however the goroutines interleave.
func readLayers(parent context.Context, layers []Layer, lim Limits) ([]*layerData, error) {
	n := len(layers)
	ctxs := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for i := range layers {
		ctxs[i], cancels[i] = context.WithCancel(parent)
		defer cancels[i]()
	}
	data := make([]*layerData, n)
	errs := make([]error, n)
	sem := make(chan struct{}, max(1, min(runtime.GOMAXPROCS(0), n)))
	var total atomic.Int64
	var wg sync.WaitGroup
	for i, l := range layers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if errs[i] = ctxs[i].Err(); errs[i] == nil {
				data[i], errs[i] = readLayer(ctxs[i], i, l, lim, &total)
			}
			if errs[i] != nil {
				for _, c := range cancels[i+1:] {
					c()
				}
			}
		})
	}
	wg.Wait()
	if err := parent.Err(); err != nil {
		return data, err
	}
	for _, err := range errs {
		if err != nil {
			return data, err
		}
	}
	return data, nil
}

// metaAllowance is how many decompressed bytes a layer may spend on headers,
// padding and PAX records besides declared content: a base plus a per-entry
// share, generous for real layers, fatal for bombs made of metadata.
// (Variables so tests can shrink them.)
var (
	metaBase     int64 = 64 << 20
	metaPerEntry int64 = 8 << 10
)

// readLayer is pass one for one layer.
func readLayer(ctx context.Context, idx int, l Layer, lim Limits, total *atomic.Int64) (d *layerData, err error) {
	rej := func(entry string, rj *rejection) error {
		return &RejectError{Layer: idx, Digest: l.Digest, Entry: entry, Rule: rj.rule, Detail: rj.detail}
	}
	f, err := os.Open(l.Path)
	if err != nil {
		return nil, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
	}
	d = &layerData{file: f}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	comp, rj, err := detect(f, l.MediaType)
	if err != nil {
		return d, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
	}
	if rj != nil {
		return d, rej("", rj)
	}

	var (
		tr      *tar.Reader
		pos     *posReader
		bounded *boundedReader
	)
	if comp == plain {
		pos = &posReader{f: f}
		tr = tar.NewReader(pos)
	} else {
		dec, err := decoder(comp, f, lim)
		if err != nil {
			rj, err := classify(err)
			if err != nil {
				return d, fmt.Errorf("layer %d (%s): %w", idx, l.Digest, err)
			}
			return d, rej("", rj)
		}
		defer dec.Close()
		bounded = &boundedReader{r: dec, allow: metaBase + metaPerEntry}
		tr = tar.NewReader(bounded)
	}

	var (
		spoolW   *bufio.Writer
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
				e.src, e.off = f, pos.pos
			default:
				if d.spool == nil {
					if d.spool, err = newSpool(); err != nil {
						return d, err
					}
					spoolW = bufio.NewWriterSize(hostWriter{d.spool}, 1<<20)
				}
				e.src, e.off = d.spool, spoolOff
				n, err := io.Copy(spoolW, tr)
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
		d.entries = append(d.entries, e)
	}
	if spoolW != nil {
		if err := spoolW.Flush(); err != nil {
			return d, fmt.Errorf("layer %d (%s): spool: %w", idx, l.Digest, err)
		}
	}
	return d, nil
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
	seen := map[*inode]bool{}
	var total int64
	var walk func(n *node)
	walk = func(n *node) {
		for _, k := range n.kids {
			switch k.typ {
			case tar.TypeDir:
				walk(k)
			case tar.TypeReg:
				if !seen[k.ino] {
					seen[k.ino] = true
					total += k.ino.e.size
				}
			}
		}
	}
	walk(t.root)
	return total
}

// implied is the metadata of directories no layer declared.
var implied = &entry{typ: tar.TypeDir, mode: 0o755}

// write is pass two: a pre-order walk with siblings sorted by name, so
// parents come before children and the output is a function of the input.
// The first name of an inode carries the content; later names link to it.
func (t *tree) write(ctx context.Context, w io.Writer) (Stats, error) {
	var st Stats
	tw := tar.NewWriter(w)
	buf := make([]byte, 1<<20)
	var walk func(n *node, p string) error
	walk = func(n *node, p string) error {
		for _, name := range sortedKeys(n.kids) {
			if err := ctx.Err(); err != nil {
				return err
			}
			k, kp := n.kids[name], path.Join(p, name)
			e := k.e
			if k.ino != nil {
				e = k.ino.e
			} else if e == nil {
				e = implied
			}
			h := &tar.Header{
				Name:    kp,
				Mode:    e.mode,
				Uid:     e.uid,
				Gid:     e.gid,
				ModTime: time.Unix(e.mtime, 0),
			}
			var content *entry
			switch k.typ {
			case tar.TypeReg:
				if k.ino.emitted != "" {
					h.Typeflag, h.Linkname = tar.TypeLink, k.ino.emitted
				} else {
					h.Typeflag, h.Size = tar.TypeReg, e.size
					k.ino.emitted = kp
					content = e
				}
			case tar.TypeSymlink:
				h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
			case tar.TypeChar, tar.TypeBlock:
				h.Typeflag, h.Devmajor, h.Devminor = k.typ, e.major, e.minor
			default:
				h.Typeflag = k.typ
			}
			if len(e.xattrs) > 0 && h.Typeflag != tar.TypeLink {
				h.PAXRecords = make(map[string]string, len(e.xattrs))
				for _, x := range e.xattrs {
					h.PAXRecords[paxXattr+x.name] = x.value
				}
				h.Format = tar.FormatPAX
			}
			if err := tw.WriteHeader(h); err != nil {
				return fmt.Errorf("flatten: write %q: %w", kp, err)
			}
			if content != nil && content.size > 0 {
				n, err := io.CopyBuffer(tw, io.NewSectionReader(content.src, content.off, content.size), buf)
				if err == nil && n != content.size {
					err = io.ErrUnexpectedEOF
				}
				if err != nil {
					return fmt.Errorf("flatten: content of %q: %w", kp, err)
				}
			}
			st.count(h.Typeflag, h.Size)
			if k.typ == tar.TypeDir {
				if err := walk(k, kp); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(t.root, ""); err != nil {
		return st, err
	}
	if err := tw.Close(); err != nil {
		return st, fmt.Errorf("flatten: %w", err)
	}
	return st, nil
}
