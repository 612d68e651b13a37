package artifactstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

func openFileStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func info(b []byte) ports.ObjectInfo {
	sum := sha256.Sum256(b)
	return ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// regularFiles lists every non-directory entry under dir.
func regularFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// halfThenFail stands in for a crash of the data source mid-Put: it yields
// half of data and then an error.
type halfThenFail struct {
	data []byte
	sent int
}

func (r *halfThenFail) Read(p []byte) (int, error) {
	if r.sent >= len(r.data)/2 {
		return 0, errors.New("source died")
	}
	n := copy(p[:min(len(p), len(r.data)/2-r.sent)], r.data[r.sent:])
	r.sent += n
	return n, nil
}

// TestFileFailedPutLeavesNoFiles checks that after a Put that fails half way
// (reader error, wrong sha256, cancelled context) neither the object nor a
// temp file is left behind: Put cleans up before it returns.
func TestFileFailedPutLeavesNoFiles(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB, several copy buffers
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		r    io.Reader
		want ports.ObjectInfo
	}{
		{"reader fails half way", context.Background(), &halfThenFail{data: data}, info(data)},
		{"wrong sha256", context.Background(), bytes.NewReader(data), info(data[1:])},
		{"too long", context.Background(), bytes.NewReader(data), info(data[:len(data)/2])},
		{"cancelled", cancelled, bytes.NewReader(data), info(data)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openFileStore(t, dir)
			if err := s.Put(tc.ctx, "deep/dir/rootfs.ext4", tc.r, tc.want); err == nil {
				t.Fatal("Put succeeded")
			}
			if files := regularFiles(t, dir); len(files) != 0 {
				t.Fatalf("files left behind: %v", files)
			}
			if left := entries(t, dir); len(left) != 0 {
				t.Fatalf("directories left behind: %v", left)
			}
		})
	}
}

// entries lists everything under dir, directories included.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFileDeleteLeavesNoEmptyDirectories: deleting an object removes the
// directories its key made once nothing else is in them, and only then.
func TestFileDeleteLeavesNoEmptyDirectories(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openFileStore(t, dir)
	data := []byte("rootfs")
	for _, k := range []string{"p/rfs-1/rfs-1.ext4", "p/rfs-2/rfs-2.ext4"} {
		if err := s.Put(ctx, k, bytes.NewReader(data), info(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "p/rfs-1/rfs-1.ext4"); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); strings.Join(got, " ") != "p p/rfs-2 p/rfs-2/rfs-2.ext4" {
		t.Fatalf("after deleting rfs-1: %v, want only rfs-2 and its directories", got)
	}
	if err := s.Delete(ctx, "p/rfs-2/rfs-2.ext4"); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); len(got) != 0 {
		t.Fatalf("after deleting both: %v left", got)
	}
	// A Put into a directory a Delete just emptied still works.
	if err := s.Put(ctx, "p/rfs-2/rfs-2.ext4", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
}

// TestFileLayout pins where objects live and that the sha256 is stored on
// the file itself, so operators can find and check them.
// TestFileConcurrentDeletesInOneDirectory deletes the objects of one
// directory at once (as the chunk collector does): the one that empties
// it prunes it, which must not fail the others.
func TestFileConcurrentDeletesInOneDirectory(t *testing.T) {
	ctx := context.Background()
	s := openFileStore(t, t.TempDir())
	for round := range 30 {
		keys := make([]string, 8)
		for i := range keys {
			keys[i] = fmt.Sprintf("d%d/o%d", round, i)
			b := []byte(keys[i])
			if err := s.Put(ctx, keys[i], bytes.NewReader(b), info(b)); err != nil {
				t.Fatal(err)
			}
		}
		errs := make(chan error, len(keys))
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Go(func() { errs <- s.Delete(ctx, k) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: concurrent Delete: %v", round, err)
			}
		}
	}
}

func TestFileLayout(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), "file://"+dir+"?prefix=arts")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := []byte("hello rootfs")
	if err := s.Put(context.Background(), "t1/rootfs.ext4", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "arts", "t1", "rootfs.ext4")
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadFile(%s) = %q, %v", p, got, err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sha, err := getXattr(f, shaXattr)
	if err != nil || sha != info(data).SHA256 {
		t.Fatalf("xattr %s = %q, %v; want %s", shaXattr, sha, err, info(data).SHA256)
	}
	if files := regularFiles(t, dir); len(files) != 1 {
		t.Fatalf("files = %v, want only the object", files)
	}
}

// TestFileForeignFileHasNoSHA: a file dropped into the directory by hand is
// served, with an unknown (empty) sha256.
func TestFileForeignFileHasNoSHA(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manual"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openFileStore(t, dir)
	got, err := s.Stat(context.Background(), "manual")
	if err != nil || got.Size != 1 || got.SHA256 != "" {
		t.Fatalf("Stat = %+v, %v; want size 1 and no sha256", got, err)
	}
}

// TestFileStaysInsideItsDirectory plants symlinks pointing out of the store
// directory; no operation may follow them outside.
func TestFileStaysInsideItsDirectory(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("do not read"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "direct")); err != nil {
		t.Fatal(err)
	}
	s := openFileStore(t, dir)
	ctx := context.Background()
	for _, key := range []string{"escape/secret", "direct"} {
		if _, err := s.Stat(ctx, key); err == nil {
			t.Errorf("Stat(%q) followed a symlink out of the store", key)
		}
		if rc, err := s.Open(ctx, key, 0, -1); err == nil {
			rc.Close()
			t.Errorf("Open(%q) followed a symlink out of the store", key)
		}
	}
	data := []byte("overwrite")
	if err := s.Put(ctx, "escape/new", bytes.NewReader(data), info(data)); err == nil {
		t.Error("Put wrote through a symlink out of the store")
	}
	if err := s.Delete(ctx, "escape/secret"); err != nil {
		t.Logf("Delete(escape/secret): %v", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "do not read" {
		t.Fatalf("file outside the store changed: %q, %v", b, err)
	}
	if files := regularFiles(t, outside); len(files) != 1 {
		t.Fatalf("files outside the store: %v", files)
	}
}

func TestFileObjectInPlaceOfDirectory(t *testing.T) {
	dir := t.TempDir()
	s := openFileStore(t, dir)
	ctx := context.Background()
	data := []byte("x")
	if err := s.Put(ctx, "a", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	err := s.Put(ctx, "a/b", bytes.NewReader(data), info(data))
	if !errors.Is(err, core.ErrConflict) {
		t.Fatalf("Put below an object = %v, want core.ErrConflict", err)
	}
	// And the other way round: a "directory" key is not an object.
	if err := s.Put(ctx, "d/e", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "d"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Stat of a directory = %v, want core.ErrNotFound", err)
	}
	if err := s.Delete(ctx, "d"); err != nil {
		t.Fatalf("Delete of a directory = %v, want nil", err)
	}
	if _, err := s.Stat(ctx, "d/e"); err != nil {
		t.Fatalf("Delete of the directory key removed its content: %v", err)
	}
}

func TestFileOpenDirectory(t *testing.T) {
	base := t.TempDir()
	missing := filepath.Join(base, "not", "yet")
	if _, err := Open(context.Background(), "file://"+missing); err == nil {
		t.Fatal("Open of a missing directory without create_dir succeeded")
	} else if !strings.Contains(err.Error(), "create_dir") {
		t.Errorf("error %q does not hint at create_dir", err)
	}
	s, err := Open(context.Background(), "file://"+missing+"?create_dir=true")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Backend() != BackendFile {
		t.Errorf("Backend() = %q", s.Backend())
	}
	if files := regularFiles(t, base); len(files) != 0 {
		t.Fatalf("Open left files behind (xattr probe?): %v", files)
	}
}

// TestFileWholeReadIsAnOSFile lets an HTTP server use sendfile.
func TestFileWholeReadIsAnOSFile(t *testing.T) {
	s := openFileStore(t, t.TempDir())
	data := []byte("0123456789")
	ctx := context.Background()
	if err := s.Put(ctx, "k", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(ctx, "k", 3, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, ok := rc.(*os.File); !ok {
		t.Fatalf("Open(3, -1) returned %T, want *os.File", rc)
	}
	if b, _ := io.ReadAll(rc); string(b) != "3456789" {
		t.Fatalf("read %q", b)
	}
}

// TestFilePutLinksAFileOnItsFilesystem: an *os.File on the store's
// filesystem is linked in, not copied (one inode), and still held to the
// size and sha256 it is published with; a file that does not match leaves
// nothing behind, and one elsewhere is copied.
func TestFilePutLinksAFileOnItsFilesystem(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	base := t.TempDir()
	src := filepath.Join(base, "scratch", "image.ext4")
	if err := os.MkdirAll(filepath.Dir(src), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(t *testing.T, p string) *os.File {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	storeDir := filepath.Join(base, "store")
	if err := os.Mkdir(storeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := openFileStore(t, storeDir)

	// Another size (copied, and refused) or the right size with another
	// sha256 (linked, hashed, refused).
	for _, want := range []ports.ObjectInfo{info(data[1:]), {Size: int64(len(data)), SHA256: info(data[1:]).SHA256}} {
		if err := s.Put(ctx, "a/rootfs.ext4", open(t, src), want); !errors.Is(err, ErrContentMismatch) {
			t.Fatalf("Put of other bytes (want %d bytes) = %v, want ErrContentMismatch", want.Size, err)
		}
		if files := regularFiles(t, storeDir); len(files) != 0 {
			t.Fatalf("files left behind: %v", files)
		}
	}

	if err := s.Put(ctx, "a/rootfs.ext4", open(t, src), info(data)); err != nil {
		t.Fatal(err)
	}
	stored := filepath.Join(storeDir, "a", "rootfs.ext4")
	a, _ := os.Stat(src)
	b, err := os.Stat(stored)
	if err != nil || !os.SameFile(a, b) {
		t.Fatalf("the object is not the linked file: %v", err)
	}
	if b.Mode().Perm() != DefaultFileMode {
		t.Errorf("object mode %v, want %v as copied objects have", b.Mode().Perm(), DefaultFileMode)
	}
	// The scratch name can go; the object stays.
	if err := os.RemoveAll(filepath.Dir(src)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Stat(ctx, "a/rootfs.ext4")
	if err != nil || got.Size != int64(len(data)) || got.SHA256 != info(data).SHA256 {
		t.Fatalf("Stat = %+v, %v", got, err)
	}

	// Another filesystem: copied.
	shm := "/dev/shm"
	if st, err := os.Stat(shm); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm to hold a file on another filesystem")
	}
	f, err := os.CreateTemp(shm, "cube-store-test-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if fi, err := f.Stat(); err == nil && sameDevice(fi, b) {
		t.Skip("/dev/shm is the store's own filesystem here (TMPDIR on tmpfs)")
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "b/rootfs.ext4", f, info(data)); err != nil {
		t.Fatal(err)
	}
	fa, _ := f.Stat()
	fb, _ := os.Stat(filepath.Join(storeDir, "b", "rootfs.ext4"))
	if os.SameFile(fa, fb) {
		t.Fatal("a file on another filesystem was linked")
	}
}

// TestFileOpenSweepsCrashLeftovers: temp files a killed Put left (a copy or
// a hard link to a build's image) are removed when the store opens and no
// other opener could be writing them; objects and foreign files stay, and
// an opener beside a live one removes nothing.
func TestFileOpenSweepsCrashLeftovers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := []byte("a published artifact")
	s := openFileStore(t, dir)
	if err := s.Put(ctx, "a/a.ext4", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(t.TempDir(), "image.ext4")
	if err := os.WriteFile(scratch, data, 0o600); err != nil {
		t.Fatal(err)
	}
	files := []struct {
		path string // under dir
		link bool   // a hard link to scratch, as putFile makes
		kept bool
	}{
		{"a/a.ext4", false, true},
		{"a/.cube-tmp-deadbeef", false, false},
		{"a/.cube-tmp-0123456789abcdef", true, false},
		{".cube-tmp-probe-feed", false, false},
		{"p/q/.cube-tmp-cafe", false, false},
		{"a/notes.txt", false, true},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case f.path == "a/a.ext4":
		case f.link:
			err = os.Link(scratch, p)
		default:
			err = os.WriteFile(p, []byte("partial"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	s = openFileStore(t, dir)
	for _, f := range files {
		_, err := os.Lstat(filepath.Join(dir, f.path))
		if kept := err == nil; kept != f.kept {
			t.Errorf("%s: kept=%v after Open, want %v (%v)", f.path, kept, f.kept, err)
		}
	}
	if got, err := s.Stat(ctx, "a/a.ext4"); err != nil || got.SHA256 != info(data).SHA256 {
		t.Fatalf("the artifact after the sweep: %+v, %v", got, err)
	}

	// While s is open its Puts may be live: a second opener keeps them.
	live := filepath.Join(dir, "a", ".cube-tmp-live")
	if err := os.WriteFile(live, []byte("being written"), 0o644); err != nil {
		t.Fatal(err)
	}
	openFileStore(t, dir)
	if _, err := os.Lstat(live); err != nil {
		t.Fatalf("a second opener removed a temp file the first may be writing: %v", err)
	}
}

// TestFileFailedLinkPutLeavesTheLinkedFileAlone: a Put of an *os.File that
// is already an object (Open gives one) is linked, and when its bytes are
// not what the Put claims, the object it came from keeps its sha256, under
// its own key or another: a refused Put changes nothing.
func TestFileFailedLinkPutLeavesTheLinkedFileAlone(t *testing.T) {
	ctx := context.Background()
	data := []byte("a published artifact")
	wrong := ports.ObjectInfo{Size: int64(len(data)), SHA256: info([]byte("other bytes of the same size!")).SHA256}
	for _, key := range []string{"b/copy.ext4", "a/a.ext4"} {
		t.Run(key, func(t *testing.T) {
			dir := t.TempDir()
			s := openFileStore(t, dir)
			if err := s.Put(ctx, "a/a.ext4", bytes.NewReader(data), info(data)); err != nil {
				t.Fatal(err)
			}
			rc, err := s.Open(ctx, "a/a.ext4", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if _, ok := rc.(*os.File); !ok {
				t.Skip("Open does not return an *os.File; nothing is linked")
			}
			if err := s.Put(ctx, key, rc, wrong); !errors.Is(err, ErrContentMismatch) {
				t.Fatalf("Put of mismatching bytes = %v, want ErrContentMismatch", err)
			}
			if got, err := s.Stat(ctx, "a/a.ext4"); err != nil || got.SHA256 != info(data).SHA256 {
				t.Fatalf("the object after a refused Put of its file: %+v, %v; want sha256 %s", got, err, info(data).SHA256)
			}
			if got := entries(t, dir); strings.Join(got, " ") != "a a/a.ext4" {
				t.Fatalf("after the refused Put: %v, want only the object", got)
			}
		})
	}
}

// TestFileLinkPutOfTheObjectItself: a Put of an object's own file under its
// own key succeeds and leaves no temp name behind (renaming a link onto
// another link of the same file does nothing, so the temp name would stay).
func TestFileLinkPutOfTheObjectItself(t *testing.T) {
	ctx := context.Background()
	data := []byte("a published artifact")
	dir := t.TempDir()
	s := openFileStore(t, dir)
	if err := s.Put(ctx, "a/a.ext4", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(ctx, "a/a.ext4", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := s.Put(ctx, "a/a.ext4", rc, info(data)); err != nil {
		t.Fatal(err)
	}
	if files := regularFiles(t, dir); len(files) != 1 || files[0] != filepath.Join(dir, "a", "a.ext4") {
		t.Fatalf("files after the Put: %v, want only the object", files)
	}
	if got, err := s.Stat(ctx, "a/a.ext4"); err != nil || got.SHA256 != info(data).SHA256 {
		t.Fatalf("Stat = %+v, %v", got, err)
	}
}

// sameDevice reports whether two files are on one filesystem.
func sameDevice(a, b os.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev
}

// TestObjectModes: objects and their directories are never readable by
// everyone by default (0640 in 0750), whatever the process's umask and
// whether the object was copied or linked in; file_mode sets another mode
// (for a Cubelet or upstream master reading the files as another user);
// a store written with wider modes is tightened when opened; modes that
// lock the service out or let everyone write are refused. Before, objects
// were 0644 in 0755 directories.
func TestObjectModes(t *testing.T) {
	ctx := context.Background()
	data := []byte("an ext4 image, perhaps with secrets in it")
	for _, tc := range []struct {
		param     string
		file, dir os.FileMode
	}{
		{"", 0o640, 0o750},
		{"&file_mode=0600", 0o600, 0o700},
		{"&file_mode=644", 0o644, 0o755},
	} {
		dir := t.TempDir()
		s, err := Open(ctx, "file://"+dir+"/store?create_dir=true"+tc.param)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "rfs-a/rfs-a.ext4", bytes.NewReader(data), info(data)); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(dir, "scratch.ext4")
		if err := os.WriteFile(src, data, 0o666); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(src) // linked in, not copied
		if err != nil {
			t.Fatal(err)
		}
		err = s.Put(ctx, "rfs-b/rfs-b.ext4", f, info(data))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]os.FileMode{
			"store": tc.dir, "store/rfs-a": tc.dir, "store/rfs-a/rfs-a.ext4": tc.file, "store/rfs-b/rfs-b.ext4": tc.file,
		} {
			if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || fi.Mode().Perm() != want {
				t.Errorf("file_mode %q: %s: %v %v, want %v", tc.param, p, fi.Mode().Perm(), err, want)
			}
		}
		s.Close()
	}

	// A store written before: 0644 objects in 0755 directories.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rfs-old"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "rfs-old", "rfs-old.ext4")
	if err := os.WriteFile(old, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for p, want := range map[string]os.FileMode{dir: 0o750, filepath.Dir(old): 0o750, old: 0o640} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("reopened store: %s: %v %v, want %v", p, fi.Mode().Perm(), err, want)
		}
	}

	for _, bad := range []string{"0666", "0400", "0746", "9", "0o640", "01640"} {
		if _, err := Open(ctx, "file://"+t.TempDir()+"?file_mode="+bad); err == nil || !strings.Contains(err.Error(), "file_mode") {
			t.Errorf("file_mode=%s: %v, want a refusal naming file_mode", bad, err)
		}
	}
}
