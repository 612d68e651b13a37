package layercache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Derived files are what a consumer computed from a verified blob (the
// flattener's decoded layer), kept beside it:
//
//	derived/<alg>/<hex>/<name>        the file
//	derived/<alg>/<hex>/<name>.meta   size, mtime, inode, the boot it was
//	                                  written in, whether it was fsynced
//
// They count in the blob's size for eviction and go with it. They are not
// fsynced on the build's path (a decoded layer is the size of the image):
// the page cache is trusted within one boot, and a file from an earlier
// boot is only trusted once SyncDerived has marked it synced, so a crash
// can cost a decode but never hand out bytes that did not reach the disk.

// DerivedFiles is the derived-file store of one blob; it implements
// ports.DerivedCache.
type DerivedFiles struct {
	c *Cache
	d digest.Digest
}

var _ ports.DerivedCache = (*DerivedFiles)(nil)

// Derived returns the derived-file store of blob d.
func (c *Cache) Derived(d digest.Digest) (*DerivedFiles, error) {
	if err := checkDigest(d); err != nil {
		return nil, err
	}
	return &DerivedFiles{c: c, d: d}, nil
}

func (c *Cache) derivedDir(d digest.Digest) string {
	return filepath.Join(c.dir, "derived", d.Algorithm().String(), d.Encoded())
}

type derivedMeta struct {
	Size    int64  `json:"size"`
	MTimeNS int64  `json:"mtime_ns"`
	Inode   uint64 `json:"inode"`
	BootID  string `json:"boot_id"`
	Synced  bool   `json:"synced"`
}

// checkDerivedName keeps names to one plain path component.
func checkDerivedName(name string) error {
	if name == "" || strings.HasSuffix(name, ".meta") || strings.HasPrefix(name, ".") ||
		strings.ContainsFunc(name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
		}) {
		return fmt.Errorf("layercache: derived file name %q: %w", name, core.ErrInvalidArgument)
	}
	return nil
}

// Open implements ports.DerivedCache.
func (x *DerivedFiles) Open(name string) (*os.File, error) {
	if err := checkDerivedName(name); err != nil {
		return nil, err
	}
	p := filepath.Join(x.c.derivedDir(x.d), name)
	b, err := os.ReadFile(p + ".meta")
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("layercache: derived %s of %s: %w", name, x.d, core.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("layercache: %w", err)
	}
	var m derivedMeta
	f, err := os.Open(p)
	if err == nil && json.Unmarshal(b, &m) == nil {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() == m.Size && st.ModTime().UnixNano() == m.MTimeNS &&
			inode(st) == m.Inode && (m.Synced || (m.BootID != "" && m.BootID == bootID())) {
			x.c.touch(x.d)
			return f, nil
		}
	}
	if f != nil {
		f.Close()
	}
	// Stale (another boot, never synced) or altered: drop it.
	_ = os.Remove(p)
	_ = os.Remove(p + ".meta")
	return nil, fmt.Errorf("layercache: derived %s of %s did not survive: %w", name, x.d, core.ErrNotFound)
}

// Create implements ports.DerivedCache. The file is an unnamed O_TMPFILE
// where the file system has them, so that an abandoned one leaves nothing.
func (x *DerivedFiles) Create(name string) (*os.File, func() error, error) {
	if err := checkDerivedName(name); err != nil {
		return nil, nil, err
	}
	tmpDir := filepath.Join(x.c.dir, "tmp")
	var f *os.File
	named := false
	if fd, err := unix.Open(tmpDir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o644); err == nil {
		f = os.NewFile(uintptr(fd), filepath.Join(tmpDir, "derived (unnamed)"))
	} else {
		tf, err := os.CreateTemp(tmpDir, "derived-*")
		if err != nil {
			return nil, nil, fmt.Errorf("layercache: %w", err)
		}
		f, named = tf, true
	}
	var once sync.Once
	var commitErr error
	commit := func() error {
		once.Do(func() { commitErr = x.commit(f, named, name) })
		return commitErr
	}
	return f, commit, nil
}

func (x *DerivedFiles) commit(f *os.File, named bool, name string) (err error) {
	dir := x.c.derivedDir(x.d)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	final := filepath.Join(dir, name)
	tmp := f.Name()
	if !named {
		tf, err := os.CreateTemp(filepath.Join(x.c.dir, "tmp"), "derived-link-*")
		if err != nil {
			return fmt.Errorf("layercache: %w", err)
		}
		tmp = tf.Name()
		tf.Close()
		os.Remove(tmp)
		if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, tmp, unix.AT_SYMLINK_FOLLOW); err != nil {
			return fmt.Errorf("layercache: name derived file: %w", err)
		}
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	m := derivedMeta{Size: st.Size(), MTimeNS: st.ModTime().UnixNano(), Inode: inode(st), BootID: bootID()}
	if err := writeJSON(final+".meta", m); err != nil {
		return fmt.Errorf("layercache: %w", err)
	}
	x.c.touch(x.d)
	return nil
}

// SyncDerived fsyncs the derived files of this boot that are not yet
// durable and marks them synced, so that they survive a reboot. It is not
// done on a build's path (a decoded layer is the size of the image, and a
// process waits for its fsyncs on exit); a long-running process calls it
// now and then. Errors are returned, the entries then simply stay
// unsynced.
func (c *Cache) SyncDerived(ctx context.Context) error {
	root := filepath.Join(c.dir, "derived")
	var errs []error
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".meta") {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		var m derivedMeta
		if json.Unmarshal(b, &m) != nil || m.Synced || m.BootID != bootID() {
			return nil
		}
		g, err := os.Open(strings.TrimSuffix(p, ".meta"))
		if err != nil {
			return nil
		}
		defer g.Close()
		if st, err := g.Stat(); err != nil || inode(st) != m.Inode {
			return nil
		}
		if err := g.Sync(); err != nil {
			errs = append(errs, err)
			return nil
		}
		m.Synced = true
		if err := writeJSON(p, m); err != nil {
			errs = append(errs, err)
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// writeJSON replaces p atomically.
func writeJSON(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".meta-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// derivedSize is the space blob d's derived files take.
func (c *Cache) derivedSize(d digest.Digest) int64 {
	ents, err := os.ReadDir(c.derivedDir(d))
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

var (
	bootOnce sync.Once
	bootStr  string
)

// bootID identifies this boot of the machine ("" where the kernel does not
// say: then only synced derived files are trusted).
func bootID() string {
	bootOnce.Do(func() {
		if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
			bootStr = strings.TrimSpace(string(b))
		}
	})
	return bootStr
}
