package artifactstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// shaXattr holds an object's sha256 on the file itself. Setting it on the
// temp file before the rename publishes bytes and checksum in one step; a
// sidecar file could not (two renames, and concurrent writers interleave).
const shaXattr = "user.cube.sha256"

// dirBackend keeps objects as files under a directory. It is written here
// rather than with gocloud's fileblob because fileblob never fsyncs the file
// or the directory, so a crash could leave a published but empty or partial
// object, and it keeps metadata in sidecar files.
//
// All access goes through an os.Root: even a key that slipped past
// validation, or a symlink planted in the directory, cannot reach outside it.
type dirBackend struct {
	dir  string
	root *os.Root
	// fileMode is every object's permission bits, dirMode every
	// directory's (see ParseFileMode, DirMode).
	fileMode, dirMode os.FileMode
	// lock is the store directory, held with a shared flock while the
	// store is open (nil when the filesystem has no flock): see sweepIfSole.
	lock *os.File
	// unsynced are the directories PutUnsynced renamed objects into since
	// the last SyncAll (batch.go).
	mu       sync.Mutex
	unsynced map[string]bool
	// made are directories PutUnsynced has seen exist (one removed since,
	// pruned by Remove, fails the next put into it, which then makes it
	// again).
	made sync.Map
}

// fileScheme is file:///abs/dir[?create_dir=true][&file_mode=0640]: a
// directory on this machine.
var fileScheme = Scheme{Name: BackendFile, Parse: parseFileURL}

// fileURL is a parsed file:// URL.
type fileURL struct {
	dir       string
	createDir bool
	fileMode  os.FileMode
}

func (f fileURL) Open(context.Context) (Driver, error) {
	d, err := openDir(f.dir, f.createDir, f.fileMode)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func parseFileURL(u *url.URL, q url.Values) (Opener, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, &core.FieldError{Field: "url", Reason: "file:// URLs name a local directory (file:///abs/dir)"}
	}
	dir := filepath.FromSlash(u.Path)
	if !filepath.IsAbs(dir) {
		return nil, &core.FieldError{Field: "url", Reason: "file:// needs an absolute directory path"}
	}
	f := fileURL{dir: filepath.Clean(dir)}
	var err error
	if f.createDir, err = boolParam(q, "create_dir"); err != nil {
		return nil, err
	}
	if f.fileMode, err = ParseFileMode(q.Get("file_mode")); err != nil {
		return nil, &core.FieldError{Field: "file_mode", Reason: err.Error()}
	}
	q.Del("file_mode")
	return f, onlyParams(q)
}

// DefaultFileMode is the permission of stored artifacts: readable by the
// service's user and group, never by everyone (a template's rootfs can hold
// its secrets). A Cubelet or upstream master reading the files as another
// user is given the group, or a wider mode (file_mode).
const DefaultFileMode os.FileMode = 0o640

// ParseFileMode reads the permission of a file store's objects: octal
// permission bits ("0640", "640"), never writable by others; "" is
// DefaultFileMode. Objects need at least the owner's read and write.
func ParseFileMode(v string) (os.FileMode, error) {
	if v = strings.TrimSpace(v); v == "" {
		return DefaultFileMode, nil
	}
	n, err := strconv.ParseUint(v, 8, 32)
	switch {
	case err != nil || n > 0o777:
		return 0, fmt.Errorf("%q is not octal permission bits such as 0640", v)
	case n&0o600 != 0o600:
		return 0, fmt.Errorf("%s leaves the owner (this service) unable to read or write its objects; want at least 0600", v)
	case n&0o002 != 0:
		return 0, fmt.Errorf("%s lets everyone write the objects; want at most 0644", v)
	}
	return os.FileMode(n), nil
}

// DirMode is the permission of the store's directories for objects of
// mode m: m with search (x) wherever it grants read.
func DirMode(m os.FileMode) os.FileMode {
	m &= os.ModePerm
	return m | (m&0o444)>>2
}

func openDir(dir string, create bool, mode os.FileMode) (*dirBackend, error) {
	d := &dirBackend{dir: dir, fileMode: mode, dirMode: DirMode(mode)}
	if create {
		if err := os.MkdirAll(dir, d.dirMode); err != nil {
			return nil, fmt.Errorf("create store directory: %w", err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open store directory (create_dir=true creates it): %w", err)
	}
	d.root = root
	if err := d.probeXattr(); err != nil {
		_ = root.Close()
		return nil, err
	}
	d.sweepIfSole()
	d.applyModes()
	return d, nil
}

// applyModes gives the store's directory, and every object and directory
// in it, the configured modes, so a store written with wider ones (0644 in
// 0755 directories, before the mode was configurable) is not left readable
// by everyone. Best effort: an entry it cannot change is left as it is.
func (d *dirBackend) applyModes() {
	_ = fs.WalkDir(d.root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		want := d.fileMode
		switch {
		case e.IsDir():
			want = d.dirMode
		case !e.Type().IsRegular():
			return nil
		}
		if fi, err := e.Info(); err == nil && fi.Mode().Perm() != want {
			_ = d.root.Chmod(p, want)
		}
		return nil
	})
}

// sweepIfSole removes the temp files a killed Put left behind (a hard link
// among them can hold a build's whole image). Every open store holds a
// shared flock on the directory, so getting it exclusively proves no other
// store, in this process or another, has a Put in flight, and this one has
// not started any. Otherwise, or without flock (NFS refuses it on a
// directory), nothing is removed: a later sole opener does it.
func (d *dirBackend) sweepIfSole() {
	f, err := d.root.Open(".")
	if err != nil {
		return
	}
	if tryLockExclusive(f) == nil {
		d.sweepTemp()
	}
	if lockShared(f) != nil {
		_ = f.Close()
		return
	}
	d.lock = f
}

// sweepTemp removes every temp file under the store; best effort, since a
// leftover costs only space.
func (d *dirBackend) sweepTemp() {
	_ = fs.WalkDir(d.root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = d.root.Remove(p)
		}
		return nil // an unreadable directory is skipped, not fatal
	})
}

// probeXattr fails early, at Open, on filesystems without user extended
// attributes rather than on the first Put.
func (d *dirBackend) probeXattr() error {
	name := tmpPrefix + "probe-" + randomHex()
	f, err := d.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("store directory is not writable: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = d.root.Remove(name)
	}()
	if err := setXattr(f, shaXattr, strings.Repeat("0", 64)); err != nil {
		return fmt.Errorf("store directory: the filesystem must support user extended attributes (the sha256 is kept in %s): %w", shaXattr, err)
	}
	return nil
}

func (d *dirBackend) Put(ctx context.Context, key string, src io.Reader, want ports.ObjectInfo) (err error) {
	dir := path.Dir(key)
	var tmp string
	var f *os.File
	err = d.inDir(dir, func() error {
		tmp = path.Join(dir, tmpPrefix+randomHex())
		f, err = d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		return err
	})
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	published := false
	defer func() {
		if !published {
			_ = f.Close() // a second Close after success is harmless
			_ = d.root.Remove(tmp)
			d.pruneEmpty(dir)
		}
	}()
	buf := make([]byte, copyBufferSize)
	if _, err := io.CopyBuffer(writerOnly{f}, ctxReader{ctx, src}, buf); err != nil {
		return err
	}
	if err := setXattr(f, shaXattr, want.SHA256); err != nil {
		return fmt.Errorf("record sha256: %w", err)
	}
	// Exactly the configured mode, whatever the process's umask.
	if err := f.Chmod(d.fileMode); err != nil {
		return err
	}
	// The bytes (and the xattr) must be on disk before the name points at
	// them, or a crash could publish an empty file.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	published, err = d.publishTemp(ctx, tmp, key)
	return err
}

// publishTemp renames the complete, synced temp file tmp to key unless
// ctx ended, and makes the rename durable. renamed says whether key now
// names it: if only the directory sync fails the object is visible but
// may not survive a crash, and the error makes the caller skip its
// metadata rows, leaving at worst an orphan object.
func (d *dirBackend) publishTemp(ctx context.Context, tmp, key string) (renamed bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := d.root.Rename(tmp, key); err != nil {
		return false, fmt.Errorf("publish: %w", err)
	}
	if err := d.syncDir(path.Dir(key)); err != nil {
		return true, fmt.Errorf("sync directory: %w", err)
	}
	return true, nil
}

// errNoLink: the file cannot be linked into the store; it is copied.
var errNoLink = errors.New("cannot link the file into the store")

// putFile publishes src under key by linking it into the store rather
// than copying it, when src is a regular file of want.Size bytes on the
// store's filesystem: a gigabyte image is then neither written a second
// time nor left dirty twice for the kernel to write back. It is held to
// what put guarantees: the bytes are hashed (while the disk flushes them)
// and must be want before the file's mode and sha256 are set; nothing is
// visible before the rename. The caller must
// not change src afterwards. errNoLink when src cannot be linked: nothing
// was read from it, and the caller copies.
func (d *dirBackend) putFile(ctx context.Context, key string, src *os.File, want ports.ObjectInfo) (err error) {
	st, err := src.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != want.Size {
		return errNoLink
	}
	dir := path.Dir(key)
	name := tmpPrefix + randomHex()
	err = d.inDir(dir, func() error {
		df, err := d.root.Open(dir)
		if err != nil {
			return err
		}
		defer df.Close()
		return linkInto(src, df, name)
	})
	if err != nil {
		return err // errNoLink: the caller copies into the same directory
	}
	tmp := path.Join(dir, name)
	published := false
	defer func() {
		if !published {
			_ = d.root.Remove(tmp)
			d.pruneEmpty(dir)
		}
	}()
	f, err := d.root.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, st) {
		return fmt.Errorf("linked %s is not the file handed to Put", tmp)
	}
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	v := newVerifier(ctxReader{ctx, io.NewSectionReader(f, 0, want.Size+1)}, want)
	_, herr := io.CopyBuffer(io.Discard, v, make([]byte, copyBufferSize))
	if serr := <-synced; herr == nil && serr != nil {
		herr = fmt.Errorf("sync: %w", serr)
	}
	if herr != nil {
		return herr
	}
	// The file is src itself, which may be someone's file or even another
	// object (Open hands out the *os.File): its mode and sha256 change
	// only once its bytes are known to be want, and that change is made
	// durable before the rename publishes it.
	if err := f.Chmod(d.fileMode); err != nil {
		return err
	}
	if err := setXattr(f, shaXattr, want.SHA256); err != nil {
		return fmt.Errorf("record sha256: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	published, err = d.publishTemp(ctx, tmp, key)
	if published {
		// When key already named this file (src is the object itself),
		// the rename did nothing and tmp is still there.
		_ = d.root.Remove(tmp)
	}
	return err
}

// inDir runs create, which makes an entry in dir, after creating dir. A
// concurrent remove may prune dir between the two when it was empty; then
// dir is made again, a bounded number of times.
func (d *dirBackend) inDir(dir string, create func() error) error {
	for attempt := 0; ; attempt++ {
		err := d.mkdirAll(dir)
		if err == nil {
			err = create()
		}
		if err == nil || !isNotExist(err) || attempt == 3 {
			return err
		}
	}
}

// pruneEmpty removes dir and then each parent that is left empty, up to
// the store's root, so a deleted or failed object leaves no empty
// directory behind. A directory that is not empty (another object, or a
// concurrent put's temp file) stops it.
func (d *dirBackend) pruneEmpty(dir string) {
	for dir != "." && dir != "/" && dir != "" {
		if d.root.Remove(dir) != nil {
			return
		}
		parent := path.Dir(dir)
		_ = d.syncDir(parent)
		dir = parent
	}
}

// mkdirAll creates the key's parent directories one by one and fsyncs the
// parent of each one it creates, so the new entries are durable too.
func (d *dirBackend) mkdirAll(dir string) error {
	if dir == "." {
		return nil
	}
	parent := "."
	for c := range strings.SplitSeq(dir, "/") {
		p := path.Join(parent, c)
		err := d.root.Mkdir(p, d.dirMode)
		switch {
		case err == nil:
			// Exactly the configured mode, whatever the umask.
			if err := d.root.Chmod(p, d.dirMode); err != nil {
				return fmt.Errorf("create directory %s: %w", p, err)
			}
			if err := d.syncDir(parent); err != nil {
				return fmt.Errorf("sync directory: %w", err)
			}
		case errors.Is(err, fs.ErrExist):
			fi, serr := d.root.Stat(p)
			if serr != nil {
				return fmt.Errorf("create directory %s: %w", p, serr)
			}
			if !fi.IsDir() {
				return fmt.Errorf("create directory %s: an object has this name: %w", p, core.ErrConflict)
			}
		default:
			return fmt.Errorf("create directory %s: %w", p, err)
		}
		parent = p
	}
	return nil
}

func (d *dirBackend) syncDir(dir string) error {
	f, err := d.root.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// openObject opens key for reading, treating directories and a file in
// place of a parent directory as absent.
func (d *dirBackend) openObject(key string) (*os.File, os.FileInfo, error) {
	f, err := d.root.Open(key)
	if err != nil {
		if isNotExist(err) {
			return nil, nil, fmt.Errorf("%w: no object", core.ErrNotFound)
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%w: no object (a directory has this name)", core.ErrNotFound)
	}
	return f, fi, nil
}

func (d *dirBackend) Stat(_ context.Context, key string) (ports.ObjectInfo, error) {
	f, fi, err := d.openObject(key)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	defer f.Close()
	info := ports.ObjectInfo{Size: fi.Size(), ModTime: fi.ModTime()}
	sha, err := getXattr(f, shaXattr)
	switch {
	case err == nil && core.IsSHA256Hex(sha):
		info.SHA256 = sha
	case err != nil && !errors.Is(err, errNoXattr):
		return ports.ObjectInfo{}, fmt.Errorf("read sha256: %w", err)
	}
	return info, nil
}

func (d *dirBackend) Open(_ context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	f, fi, err := d.openObject(key)
	if err != nil {
		return nil, err
	}
	if offset > fi.Size() {
		_ = f.Close()
		return nil, offsetPastEnd(offset, fi.Size())
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, err
	}
	if length < 0 {
		// The *os.File itself, so an HTTP server can sendfile it.
		return f, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, length), f}, nil
}

func (d *dirBackend) Remove(_ context.Context, key string) error {
	fi, err := d.root.Lstat(key)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return err
	}
	if fi.IsDir() {
		return nil // a directory is not an object; there is nothing to delete
	}
	if err := d.root.Remove(key); err != nil && !isNotExist(err) {
		return err
	}
	// A concurrent Remove may have pruned the directory, emptied by both:
	// then the entry is gone with it.
	if err := d.syncDir(path.Dir(key)); err != nil && !isNotExist(err) {
		return err
	}
	d.pruneEmpty(path.Dir(key))
	return nil
}

// List walks the directory of prefix. Temp files are not objects; a
// directory that vanishes during the walk (Remove prunes empty ones) is
// skipped.
func (d *dirBackend) List(ctx context.Context, prefix string, fn func(key string, info ports.ObjectInfo) error) error {
	root := "."
	if prefix != "" {
		root = strings.TrimSuffix(prefix, "/")
	}
	err := fs.WalkDir(d.root.FS(), root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if isNotExist(err) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), tmpPrefix) || !strings.HasPrefix(p, prefix) {
			return nil
		}
		fi, err := e.Info()
		if isNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fn(p, ports.ObjectInfo{Size: fi.Size(), ModTime: fi.ModTime()})
	})
	return err
}

func (d *dirBackend) SignedURL(context.Context, string, time.Duration) (string, error) {
	return "", fmt.Errorf("signed URLs for local files: %w", core.ErrUnsupported)
}

func (d *dirBackend) Close() error {
	err := d.root.Close()
	if d.lock != nil {
		_ = d.lock.Close() // releases the flock
	}
	return err
}

// isNotExist also counts ENOTDIR: "a/b" when "a" is a file does not exist.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// ctxReader stops a copy when ctx ends, so a cancelled Put aborts between
// chunks even if the source never blocks.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
