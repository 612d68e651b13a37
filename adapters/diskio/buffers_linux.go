package diskio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapBuffers maps an anonymous region for count pieces of size bytes,
// starting on a hugeAlign boundary, and advises huge pages for it (the
// advice failing, as where THP is compiled out, leaves small pages: still
// correct). It returns nil if the region cannot be mapped.
func mapBuffers(count, size int) *Buffers {
	stride := (size + Align - 1) &^ (Align - 1)
	n := count * stride
	if stride < size || n/count != stride || n > 1<<40 {
		return nil
	}
	m, err := unix.Mmap(-1, 0, n+hugeAlign, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(m))) & (hugeAlign - 1))
	region := m[skip : skip+n]
	_ = unix.Madvise(region, unix.MADV_HUGEPAGE)
	return &Buffers{pieces: carve(region, count, size, stride), release: func() { _ = unix.Munmap(m) }}
}
