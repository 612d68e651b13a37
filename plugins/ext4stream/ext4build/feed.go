package ext4build

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

const xattrPAXPrefix = "SCHILY.xattr."

// maxFileSize is the largest regular file tar2ext4 writes correctly. Files
// of 340 or more 128 MiB extents get a second extent leaf block, which
// tar2ext4 v0.15.0 fills with wrong counts and offsets.
const maxFileSize = 339 * 32768 * blockSize

// feed sits between the caller's tree and tar2ext4. It reads the tree one
// entry at a time, checks each header against the BuildSpec contract and
// re-encodes it into a minimal tar stream that tar2ext4 parses; file data
// passes straight through into tar2ext4's buffer, so nothing is staged.
//
// It is also where the builder:
//   - invents the root and lost+found directories with the build time (a
//     later entry for either one overrides them),
//   - keeps only SCHILY.xattr.* PAX records,
//   - stops on context cancellation,
//   - remembers why it failed, because tar2ext4 rewraps reader errors.
type feed struct {
	ctx  context.Context
	src  *eofReader
	tr   *tar.Reader
	when time.Time

	pending   []byte // encoded header bytes not yet returned
	remaining int64  // data bytes of the current entry still to copy
	pad       int64  // zero bytes after the data, to a 512-byte boundary
	started   bool
	done      bool
	err       error

	seen    map[string]bool // entry name -> is a directory
	entries int64           // entries passed on, for error messages
	buf     bytes.Buffer
}

var zeroBlock [1024]byte

func newFeed(ctx context.Context, tree io.Reader, when time.Time) *feed {
	src := &eofReader{r: tree}
	return &feed{
		ctx:  ctx,
		src:  src,
		tr:   tar.NewReader(src),
		when: when,
		seen: map[string]bool{".": true, "lost+found": true},
	}
}

// eofReader notes whether the tree ran dry. archive/tar treats a stream
// that stops at a header boundary as a clean end; a well-formed tree ends
// with the two zero blocks and is never read past them, so seeing EOF
// means the tree was cut short.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if n == 0 && err == io.EOF {
		e.eof = true
	}
	return n, err
}

// Read implements io.Reader for tar2ext4.
func (f *feed) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if err := f.ctx.Err(); err != nil {
		f.err = err
		return 0, err
	}
	for {
		switch {
		case len(f.pending) > 0:
			n := copy(p, f.pending)
			f.pending = f.pending[n:]
			return n, nil
		case f.remaining > 0:
			if int64(len(p)) > f.remaining {
				p = p[:f.remaining]
			}
			n, err := f.tr.Read(p)
			f.remaining -= int64(n)
			switch {
			case n > 0:
				return n, nil
			case err == nil:
				continue
			case err == io.EOF:
				err = io.ErrUnexpectedEOF
			}
			return 0, f.fail(f.readErr(err))
		case f.pad > 0:
			f.pending, f.pad = zeroBlock[:f.pad], 0
		case f.done:
			return 0, io.EOF
		default:
			if err := f.next(); err != nil {
				return 0, f.fail(err)
			}
		}
	}
}

func (f *feed) fail(err error) error {
	if f.err == nil {
		f.err = err
	}
	return f.err
}

// next reads the following header and queues its encoding.
func (f *feed) next() error {
	f.buf.Reset()
	if !f.started {
		f.started = true
		// Invented entries first; the tree's own root or lost+found, if
		// any, comes later and wins.
		for _, h := range []*tar.Header{
			{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "lost+found", Typeflag: tar.TypeDir, Mode: 0o700},
		} {
			when := clampTime(f.when)
			h.ModTime, h.AccessTime, h.ChangeTime = when, when, when
			h.Format = tar.FormatPAX
			if err := tar.NewWriter(&f.buf).WriteHeader(h); err != nil {
				return fmt.Errorf("encode %s: %w", h.Name, err)
			}
		}
	}
	for {
		hdr, err := f.tr.Next()
		if err == io.EOF && f.src.eof {
			return fmt.Errorf("read tree after %d entries: the stream ended without the tar "+
				"end-of-archive marker (truncated?): %w", f.entries, core.ErrInvalidArgument)
		}
		if err == io.EOF {
			f.buf.Write(zeroBlock[:]) // end-of-archive marker
			f.done = true
			break
		}
		if err != nil {
			return f.readErr(err)
		}
		out, err := f.convert(hdr)
		if err != nil {
			return err
		}
		if out == nil {
			continue // nothing to write for this header
		}
		f.entries++
		if err := tar.NewWriter(&f.buf).WriteHeader(out); err != nil {
			return entryErr(out.Name, "cannot re-encode header: "+err.Error())
		}
		if out.Typeflag == tar.TypeReg {
			f.remaining = out.Size
			f.pad = (512 - out.Size%512) % 512
		}
		break
	}
	f.pending = f.buf.Bytes()
	return nil
}

// readErr classifies a failure to read the tree: cancellation wins, a
// corrupt or truncated tar is bad input, anything else (a failing reader)
// keeps its own identity.
func (f *feed) readErr(err error) error {
	if ctxErr := f.ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("read tree after %d entries: %w: %w", f.entries, err, core.ErrInvalidArgument)
	}
	return fmt.Errorf("read tree after %d entries: %w", f.entries, err)
}

func entryErr(name, reason string) error {
	return fmt.Errorf("tree entry %q: %s: %w", name, reason, core.ErrInvalidArgument)
}

// convert checks one header and returns what tar2ext4 should see, or nil
// for headers that carry no file.
func (f *feed) convert(in *tar.Header) (*tar.Header, error) {
	typ := in.Typeflag
	switch typ {
	case tar.TypeReg, tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
	case tar.TypeCont, tar.TypeGNUSparse:
		typ = tar.TypeReg // data is read back expanded by archive/tar
	case tar.TypeXGlobalHeader:
		return nil, nil
	default:
		return nil, entryErr(in.Name, fmt.Sprintf("unsupported tar entry type %q", typ))
	}
	name, err := cleanName(in.Name)
	if err != nil {
		return nil, entryErr(in.Name, err.Error())
	}
	isDir := typ == tar.TypeDir
	if prev, ok := f.seen[name]; ok && !(prev && isDir) {
		if name == "." || name == "lost+found" {
			return nil, entryErr(in.Name, "must be a directory")
		}
		return nil, entryErr(in.Name, "appears twice")
	}
	if name != "." {
		if err := f.checkParents(name); err != nil {
			return nil, entryErr(in.Name, err.Error())
		}
	}
	out := &tar.Header{
		Typeflag:   typ,
		Name:       name,
		Mode:       in.Mode & 0o7777,
		Uid:        in.Uid,
		Gid:        in.Gid,
		ModTime:    clampTime(in.ModTime),
		AccessTime: clampTime(in.AccessTime),
		ChangeTime: clampTime(in.ChangeTime),
		Format:     tar.FormatPAX,
	}
	if in.Uid < 0 || in.Gid < 0 || int64(in.Uid) > 0xFFFFFFFF || int64(in.Gid) > 0xFFFFFFFF {
		return nil, entryErr(in.Name, fmt.Sprintf("uid/gid %d/%d out of range", in.Uid, in.Gid))
	}
	switch typ {
	case tar.TypeReg:
		if in.Size < 0 {
			return nil, entryErr(in.Name, "negative size")
		}
		if in.Size > maxFileSize {
			return nil, fmt.Errorf("tree entry %q: %d bytes; this builder writes files up to %d bytes: %w",
				in.Name, in.Size, int64(maxFileSize), core.ErrUnsupported)
		}
		out.Size = in.Size
	case tar.TypeLink:
		target, err := cleanName(in.Linkname)
		if err != nil {
			return nil, entryErr(in.Name, "hard link target: "+err.Error())
		}
		if isDir, ok := f.seen[target]; !ok || isDir {
			return nil, entryErr(in.Name, fmt.Sprintf("hard link target %q is not an earlier non-directory entry", in.Linkname))
		}
		out.Linkname = target
	case tar.TypeSymlink:
		if in.Linkname == "" || len(in.Linkname) >= 4096 || strings.IndexByte(in.Linkname, 0) >= 0 {
			return nil, entryErr(in.Name, "symlink target must be 1..4095 bytes without NUL")
		}
		out.Linkname = in.Linkname
	case tar.TypeChar, tar.TypeBlock:
		if in.Devmajor < 0 || in.Devminor < 0 || in.Devmajor > 0xFFF || in.Devminor > 0xFFFFF {
			return nil, entryErr(in.Name, fmt.Sprintf("device %d:%d out of range", in.Devmajor, in.Devminor))
		}
		out.Devmajor, out.Devminor = in.Devmajor, in.Devminor
	}
	for k, v := range in.PAXRecords {
		if strings.HasPrefix(k, xattrPAXPrefix) && len(k) > len(xattrPAXPrefix) {
			if out.PAXRecords == nil {
				out.PAXRecords = make(map[string]string)
			}
			out.PAXRecords[k] = v
		}
	}
	f.seen[name] = isDir
	return out, nil
}

// checkParents enforces that every ancestor that exists is a directory. A
// missing ancestor is created by tar2ext4 with the root's owner and mode
// (mkdir -p), as tar -x would; the contract says parents come first, so
// this is only leniency.
func (f *feed) checkParents(name string) error {
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		isDir, ok := f.seen[dir]
		if ok {
			if !isDir {
				return fmt.Errorf("parent %q is not a directory", dir)
			}
			return nil // its own ancestors were checked when it was added
		}
		f.seen[dir] = true
	}
	return nil
}

// cleanName accepts the names the contract allows (clean and relative),
// tolerating a leading "./" and a trailing "/", and returns "." for the root.
func cleanName(name string) (string, error) {
	n := strings.TrimPrefix(name, "./")
	n = strings.TrimSuffix(n, "/")
	switch {
	case n == "" || n == ".":
		return ".", nil
	case strings.IndexByte(n, 0) >= 0:
		return "", errors.New("name contains NUL")
	case path.IsAbs(n):
		return "", errors.New("name is absolute")
	case path.Clean(n) != n:
		return "", errors.New("name is not clean")
	case n == ".." || strings.HasPrefix(n, "../"):
		return "", errors.New("name leaves the root")
	}
	for _, c := range strings.Split(n, "/") {
		if len(c) > 255 {
			return "", fmt.Errorf("name component of %d bytes exceeds 255", len(c))
		}
	}
	return n, nil
}

// clampTime keeps times inside what ext4 can store. Times before 1970 lose
// their nanoseconds: tar2ext4's encoding of negative seconds overwrites
// them, and the fixup pass can restore only the seconds.
func clampTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	if s := clampSeconds(t.Unix()); s != t.Unix() || s < 0 {
		return time.Unix(s, 0)
	}
	return t
}
