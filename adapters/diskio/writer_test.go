package diskio

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestWriter: pieces land at their offsets whatever order they complete
// in and whichever path they take, and every piece's done runs once.
func TestWriter(t *testing.T) {
	const n = 8
	tests := []struct {
		name       string
		direct     bool // give the Writer a direct descriptor
		misalign   bool // pieces start one byte past a boundary
		wantDirect bool // Direct() afterwards
	}{
		{name: "aligned pieces go direct", direct: true, wantDirect: true},
		{name: "misaligned pieces go through the page cache", direct: true, misalign: true, wantDirect: true},
		{name: "no direct descriptor", direct: false, wantDirect: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := create(t)
			var direct *os.File
			if tt.direct {
				if direct = openDirect(f); direct == nil {
					t.Skip("the test directory's filesystem refuses direct I/O")
				}
			}
			w := newWriter(f, direct, 3)
			var done atomic.Int32
			want := make([]byte, n*Align)
			// Reverse order: the file grows from its end, out of order.
			for i := n - 1; i >= 0; i-- {
				b := block(byte('a'+i), tt.misalign)
				copy(want[i*Align:], b)
				w.WriteAt(b, int64(i*Align), func() { done.Add(1) })
			}
			if err := w.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got := done.Load(); got != n {
				t.Errorf("done ran %d times, want %d", got, n)
			}
			if got := w.Direct(); got != tt.wantDirect {
				t.Errorf("Direct() = %v, want %v", got, tt.wantDirect)
			}
			sameFile(t, f.Name(), want)
		})
	}
}

// TestWriterRefusedDirect: a direct write the filesystem refuses (here a
// buffer off the boundary gets EINVAL) is written through the page cache,
// and direct I/O stays off for the rest of the file.
func TestWriterRefusedDirect(t *testing.T) {
	f := create(t)
	direct := openDirect(f)
	if direct == nil {
		t.Skip("the test directory's filesystem refuses direct I/O")
	}
	b := block('x', true)
	if _, err := direct.WriteAt(b, Align); err == nil {
		// tmpfs since Linux 6.6 takes any buffer: nothing is refused.
		t.Skip("the test directory's filesystem takes misaligned direct writes")
	}
	w := newWriter(f, direct, 1)
	if err := w.writeDirect(b, Align); err != nil {
		t.Fatalf("writeDirect: %v", err)
	}
	if w.Direct() {
		t.Error("Direct() = true after a refused write")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sameFile(t, f.Name(), slices.Concat(make([]byte, Align), b))
}

// TestWriterFailure: after a failed write the later pieces are skipped,
// every done still runs, and Err and Close report the failure.
func TestWriterFailure(t *testing.T) {
	f := create(t)
	ro, err := os.Open(f.Name()) // writes through it fail
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	w := newWriter(ro, nil, 1)
	var done atomic.Int32
	for i := range 4 {
		w.WriteAt(block('a', false), int64(i*Align), func() { done.Add(1) })
	}
	err = w.Close()
	if err == nil || w.Err() == nil {
		t.Fatalf("Close = %v, Err = %v, want the write's error", err, w.Err())
	}
	if got := done.Load(); got != 4 {
		t.Errorf("done ran %d times, want 4", got)
	}
	if fi, _ := os.Stat(f.Name()); fi.Size() != 0 {
		t.Errorf("file holds %d bytes, want none", fi.Size())
	}
}

// TestWriterRenamedFile: the bytes land in the file the Writer was given,
// even when its name has since been given to another file (a temporary
// renamed into place, a path reused): the second descriptor for direct
// I/O would otherwise open that other file.
func TestWriterRenamedFile(t *testing.T) {
	f := create(t)
	moved := f.Name() + ".moved"
	if err := os.Rename(f.Name(), moved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Name(), nil, 0o600); err != nil { // another file, same name
		t.Fatal(err)
	}
	w := NewWriter(f, 1)
	b := block('r', false)
	w.WriteAt(b, 0, nil)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sameFile(t, moved, b)
	sameFile(t, f.Name(), nil)
}

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{1, Align, 3*Align + 5} {
		b := AlignedBuffer(n)
		if len(b) != n || cap(b) != n || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%Align != 0 {
			t.Errorf("AlignedBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
	}
}

func create(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// block is one Align-sized block of c, off a boundary when misalign is set.
func block(c byte, misalign bool) []byte {
	b := AlignedBuffer(2 * Align)
	if misalign {
		b = b[1:]
	}
	b = b[:Align]
	copy(b, bytes.Repeat([]byte{c}, Align))
	return b
}

func sameFile(t *testing.T, name string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("file holds %d bytes, not the %d written at their offsets", len(got), len(want))
	}
}

// TestReadAligned: an aligned read goes around the page cache and reads
// the file; a misaligned one is left to the caller.
func TestReadAligned(t *testing.T) {
	f := create(t)
	want := slices.Concat(block('a', false), block('b', false))
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	d := OpenDirectReader(f.Name())
	if d == nil {
		t.Skip("the test directory's filesystem refuses direct I/O")
	}
	defer d.Close()
	b := AlignedBuffer(2 * Align)
	if n, ok, err := ReadAligned(d, b, 0); !ok || err != nil || n != len(b) || !bytes.Equal(b, want) {
		t.Fatalf("aligned read: n %d ok %v err %v, equal %v", n, ok, err, bytes.Equal(b, want))
	}
	if _, ok, _ := ReadAligned(d, b[:Align], 1); ok {
		t.Error("a read at a misaligned offset was taken")
	}
	if _, ok, _ := ReadAligned(d, b[1:Align+1], 0); ok {
		t.Error("a read into misaligned memory was taken")
	}
	if _, ok, _ := ReadAligned(nil, b, 0); ok {
		t.Error("a read without a direct descriptor was taken")
	}
}
