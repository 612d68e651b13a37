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

	kinds   map[string]byte // entry name -> its type, or kindImplied
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
		// The invented entries may be declared once by the tree.
		kinds: map[string]byte{".": kindImplied, "lost+found": kindImplied},
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
			return reject("", ruleCorruptArchive, "read tree after %d entries: the stream ended without the tar "+
				"end-of-archive marker (truncated?)", f.entries)
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
			return reject(out.Name, ruleCorruptArchive, "cannot re-encode header: %v", err)
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
		return reject("", ruleCorruptArchive, "read tree after %d entries: %v", f.entries, err)
	}
	return fmt.Errorf("read tree after %d entries: %w", f.entries, err)
}

// convert checks one header against the BuildSpec.Tree contract and
// returns what tar2ext4 should see, or nil for headers that carry no file.
// The checks and their rule names are those of the staging extractor
// (layers.Extract); ports/flattenertest holds both to one corpus.
func (f *feed) convert(in *tar.Header) (*tar.Header, error) {
	typ := in.Typeflag
	switch typ {
	case tar.TypeReg, tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
	case tar.TypeGNUSparse:
		typ = tar.TypeReg // data is read back expanded by archive/tar
	case tar.TypeXGlobalHeader:
		return nil, nil
	default:
		return nil, reject(in.Name, ruleUnsupportedType, "tar entry type %q", typ)
	}
	name, rj := treeName(in.Name, false)
	if rj != nil {
		return nil, rj
	}
	switch {
	case in.Mode < 0 || in.Mode > 1<<32-1:
		return nil, reject(in.Name, ruleBadMode, "mode %#o", in.Mode)
	case in.Uid < 0 || in.Gid < 0 || int64(in.Uid) >= 0xFFFFFFFF || int64(in.Gid) >= 0xFFFFFFFF:
		// (uid_t)-1 means "unchanged" to chown: refused like any other out-of-range id.
		return nil, reject(in.Name, ruleBadOwner, "uid %d gid %d", in.Uid, in.Gid)
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
	switch typ {
	case tar.TypeReg:
		if in.Size < 0 {
			return nil, reject(in.Name, ruleCorruptArchive, "negative size")
		}
		if in.Size > maxFileSize {
			return nil, fmt.Errorf("tree entry %q: %d bytes; this builder writes files up to %d bytes: %w",
				in.Name, in.Size, int64(maxFileSize), core.ErrUnsupported)
		}
		out.Size = in.Size
	case tar.TypeLink:
		target, rj := treeName(in.Linkname, true)
		if rj != nil {
			return nil, reject(in.Name, rj.rule, "hard link target %q: %s", in.Linkname, rj.detail)
		}
		if target == name {
			return nil, reject(in.Name, ruleHardlinkSelf, "links to itself")
		}
		out.Linkname = target
	case tar.TypeSymlink:
		if in.Linkname == "" || len(in.Linkname) >= maxPath || strings.IndexByte(in.Linkname, 0) >= 0 {
			return nil, reject(in.Name, ruleSymlinkTarget, "target of %d bytes (1..%d without NUL)", len(in.Linkname), maxPath-1)
		}
		out.Linkname = in.Linkname
	case tar.TypeChar, tar.TypeBlock:
		if in.Devmajor < 0 || in.Devminor < 0 || in.Devmajor > 0xFFF || in.Devminor > 0xFFFFF {
			return nil, reject(in.Name, ruleBadDevice, "device %d:%d", in.Devmajor, in.Devminor)
		}
		out.Devmajor, out.Devminor = in.Devmajor, in.Devminor
	}
	if name == "." && typ != tar.TypeDir {
		return nil, reject(in.Name, ruleRootNotDir, "root entry of type %q", typ)
	}
	if err := copyXattrs(in, out, typ); err != nil {
		return nil, err
	}
	if prev, ok := f.kinds[name]; ok {
		if prev != kindImplied || typ != tar.TypeDir {
			if name == "lost+found" {
				return nil, reject(in.Name, ruleReservedName, "lost+found must be a directory, named at most once")
			}
			return nil, reject(in.Name, ruleDuplicateEntry, "%q already exists", name)
		}
	}
	if name != "." {
		if err := f.checkParents(in.Name, name); err != nil {
			return nil, err
		}
	}
	kind := typ
	if typ == tar.TypeLink {
		switch k, ok := f.kinds[out.Linkname]; {
		case !ok:
			return nil, reject(in.Name, ruleHardlinkMissing, "target %q is not an earlier entry", out.Linkname)
		case k == tar.TypeDir || k == kindImplied:
			return nil, reject(in.Name, ruleHardlinkDir, "target %q is a directory", out.Linkname)
		case k != tar.TypeReg:
			return nil, reject(in.Name, ruleHardlinkNotRegular, "target %q is of type %q", out.Linkname, k)
		}
		kind = tar.TypeReg
	}
	f.kinds[name] = kind
	return out, nil
}

// copyXattrs keeps the SCHILY.xattr.* records of in that pass the
// namespace allow-list and the kernel's size limits.
func copyXattrs(in, out *tar.Header, typ byte) error {
	for k, v := range in.PAXRecords {
		name, ok := strings.CutPrefix(k, xattrPAXPrefix)
		if !ok || typ == tar.TypeLink {
			continue // a hard link shares its target's inode and xattrs
		}
		if len(name) > 255 || len(v) > 64<<10 {
			return reject(in.Name, ruleXattrTooLarge, "xattr %q: name %d bytes, value %d bytes", name, len(name), len(v))
		}
		if !xattrAllowed(name, typ) {
			return reject(in.Name, ruleXattrForbidden, "xattr %q", name)
		}
		if out.PAXRecords == nil {
			out.PAXRecords = make(map[string]string)
		}
		out.PAXRecords[k] = v
	}
	return nil
}

// xattrAllowed is the staging extractor's namespace allow-list: overlay
// control attributes are refused (overlayfs would act on them if the image
// became a lower layer), and the kernel allows user.* only on files and
// directories.
func xattrAllowed(name string, typ byte) bool {
	ns, rest, ok := strings.Cut(name, ".")
	if !ok || rest == "" {
		return false
	}
	switch ns {
	case "user":
		return !strings.HasPrefix(rest, "overlay.") && (typ == tar.TypeReg || typ == tar.TypeDir)
	case "trusted":
		return !strings.HasPrefix(rest, "overlay.")
	case "security":
		return true
	case "system":
		return rest == "posix_acl_access" || (rest == "posix_acl_default" && typ == tar.TypeDir)
	}
	return false
}

// checkParents enforces that every ancestor that exists is a directory:
// never a symlink (a tree is already resolved; nothing is written through
// a link) and never a file. A missing ancestor is created by tar2ext4 with
// the root's owner and mode (mkdir -p), as tar -x would; the contract says
// parents come first, so this is only leniency.
func (f *feed) checkParents(raw, name string) error {
	var missing []string
	dir := path.Dir(name)
	for ; dir != "."; dir = path.Dir(dir) {
		if _, ok := f.kinds[dir]; ok {
			break // its own ancestors were checked when it was added
		}
		missing = append(missing, dir)
	}
	switch k := f.kinds[dir]; {
	case k == tar.TypeSymlink:
		return reject(raw, ruleParentSymlink, "%q is a symlink", dir)
	case k != tar.TypeDir && k != kindImplied:
		return reject(raw, ruleParentNotDir, "%q is not a directory", dir)
	}
	for _, d := range missing {
		f.kinds[d] = kindImplied
	}
	return nil
}

// maxPath is PATH_MAX: no longer name or symlink target can be used.
const maxPath = 4096

// treeName accepts the names the contract allows: clean and relative, one
// trailing "/" tolerated, "." (or "./") for the root, no whiteouts, no
// component over 255 bytes. Hard link targets (link) follow the same
// rules, with their own rule for "..".
func treeName(raw string, link bool) (string, *rejectError) {
	switch {
	case raw == "" && link:
		return "", reject(raw, ruleHardlinkMissing, "empty hard link target")
	case raw == "":
		return "", reject(raw, ruleEmptyName, "empty name")
	case strings.IndexByte(raw, 0) >= 0:
		return "", reject(raw, ruleNulInName, "NUL byte")
	}
	for _, c := range strings.Split(raw, "/") {
		if c == ".." && link {
			return "", reject(raw, ruleHardlinkEscape, "target leaves the root")
		}
		if c == ".." {
			return "", reject(raw, rulePathTraversal, "\"..\" component")
		}
	}
	if strings.HasPrefix(raw, "/") {
		return "", reject(raw, ruleAbsoluteName, "absolute name in a flattened tree")
	}
	n := strings.TrimSuffix(raw, "/")
	if n == "." || n == "" {
		return ".", nil
	}
	if path.Clean(n) != n {
		return "", reject(raw, ruleUncleanName, "not clean (%q)", path.Clean(n))
	}
	if len(n) > maxPath {
		return "", reject(raw, rulePathTooLong, "%d bytes > %d", len(n), maxPath)
	}
	for _, c := range strings.Split(n, "/") {
		if strings.HasPrefix(c, ".wh.") {
			return "", reject(raw, ruleWhiteoutInTree, "a flattened tree has no whiteouts")
		}
		if len(c) > 255 {
			return "", reject(raw, ruleNameTooLong, "component of %d bytes > 255", len(c))
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
