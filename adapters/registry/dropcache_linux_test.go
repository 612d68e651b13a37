package registry

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestStreamReaderDropsWhatItRead: a blob read to its end through its
// stream does not stay in the page cache (the build that read it never
// reads it again), while its bytes read back whole.
func TestStreamReaderDropsWhatItRead(t *testing.T) {
	data := bytes.Repeat([]byte("compressed layer bytes "), (3*dropEvery)/23)
	path := filepath.Join(t.TempDir(), "blob")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil { // committed blobs are synced, so clean
		t.Fatal(err)
	}
	f.Close()
	if cached(t, path) == 0 {
		t.Skip("the test directory's filesystem keeps no written page in the cache")
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err == nil && fs.Type == unix.TMPFS_MAGIC {
		t.Skip("the test directory is on tmpfs, whose pages are the file itself")
	}

	st := newBlobStream()
	st.finish(path, nil)
	r := st.reader()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(data))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := cached(t, path); n != 0 {
		t.Errorf("%d pages of the blob still cached after it was read and closed", n)
	}
}

// cached counts path's pages in the page cache.
func cached(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
