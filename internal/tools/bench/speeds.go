package bench

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/diskio"
)

// Speeds are what this machine's memory, disk and CPU give every pipeline,
// measured before the rounds so that reports from different machines can be
// compared. The pipelines fill page cache (layer caches, spools, staged
// trees) and write images; on a VM whose host takes freed memory back,
// filling new page cache costs several times what reusing freshly freed
// memory does, and that, more than the CPU, moves a pipeline's time from
// one machine to the next.
type Speeds struct {
	// Size is how many bytes each fill and the direct write moved.
	Size int64
	// SHA256 is one core's sha256 rate, bytes per second.
	SHA256 float64
	// Fill and FillSys are the wall and system time of writing Size bytes
	// into new files through the page cache (four writers, 1 MiB writes);
	// Refill and RefillSys the same again right after the first files were
	// deleted, which reuses the memory they freed.
	Fill, FillSys, Refill, RefillSys time.Duration
	// Direct is the rate of Size bytes of 4 MiB O_DIRECT writes, four in
	// flight; 0 where the file system refuses direct I/O.
	Direct float64
	// HashWriting is one core's sha256 rate over the pieces of a second
	// such write, each hashed just before it is handed to the writer: the
	// ext4 builder's copy does that, and on some VMs the writes in flight
	// slow the hashing down by a third (compare with SHA256).
	HashWriting float64
}

// MeasureSpeeds measures Speeds with files of size bytes (rounded down to
// a multiple of 4 MiB, at least 4 MiB) under dir (the work directory, on
// the disk the pipelines use); it removes them.
func MeasureSpeeds(dir string, size int64) (Speeds, error) {
	size = max(4<<20, size&^(4<<20-1))
	s := Speeds{Size: size}
	s.SHA256 = sha256Rate(min(size, 256<<20))
	var err error
	if s.Fill, s.FillSys, err = pageCacheFill(dir, size); err != nil {
		return s, err
	}
	if s.Refill, s.RefillSys, err = pageCacheFill(dir, size); err != nil {
		return s, err
	}
	if s.Direct, _, err = directWrite(dir, size, false); err != nil {
		return s, err
	}
	_, s.HashWriting, err = directWrite(dir, size, true)
	return s, err
}

// String is the report's line.
func (s Speeds) String() string {
	direct := "refused"
	if s.Direct > 0 {
		direct = fmt.Sprintf("%.2f GB/s", s.Direct/1e9)
	}
	return fmt.Sprintf("sha256 %.2f GB/s on one core; %d MiB written into new page cache %.2f s (system %.2f s), again at once %.2f s (system %.2f s); direct writes (4 MiB, 4 in flight) %s; sha256 of the pieces while they are written %.2f GB/s",
		s.SHA256/1e9, s.Size>>20, s.Fill.Seconds(), s.FillSys.Seconds(), s.Refill.Seconds(), s.RefillSys.Seconds(), direct, s.HashWriting/1e9)
}

func sha256Rate(n int64) float64 {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	h := sha256.New()
	start := time.Now()
	for done := int64(0); done < n; done += int64(len(buf)) {
		h.Write(buf)
	}
	return float64(n) / time.Since(start).Seconds()
}

// pageCacheFill writes size bytes into four new files under dir with
// buffered 1 MiB writes and returns the wall and system time it took; the
// files are removed after.
func pageCacheFill(dir string, size int64) (time.Duration, time.Duration, error) {
	const writers = 4
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	files := make([]*os.File, writers)
	for i := range files {
		f, err := os.CreateTemp(dir, "speeds-fill-")
		if err != nil {
			return 0, 0, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		files[i] = f
	}
	sys0 := systemTime()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i, f := range files {
		wg.Go(func() {
			for done := int64(0); done < size/writers; done += int64(len(buf)) {
				if _, err := f.Write(buf); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), systemTime() - sys0, errors.Join(errs...)
}

// directWrite writes size bytes into a new file under dir through the
// pipelines' own direct-I/O writer (adapters/diskio, DefaultDepth 4 MiB
// pieces of its Buffers in flight) and returns its bytes per second, 0 if
// the file system refuses direct I/O. With hash set, each piece is hashed
// (sha256) before it is handed to the writer, as the ext4 builder's copy
// does, and the second rate is the hashing's alone.
func directWrite(dir string, size int64, hash bool) (float64, float64, error) {
	f, err := os.Create(filepath.Join(dir, "speeds-direct"))
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const piece = 4 << 20
	mem := diskio.NewBuffers(diskio.DefaultDepth, piece)
	defer mem.Release() // after w.Close, which waits for every write
	free := make(chan []byte, diskio.DefaultDepth)
	for _, buf := range mem.Pieces() {
		for j := range buf {
			buf[j] = byte(j * 13)
		}
		free <- buf
	}
	h := sha256.New()
	var hashing time.Duration
	w := diskio.NewWriter(f, diskio.DefaultDepth)
	start := time.Now()
	for off := int64(0); off < size && w.Err() == nil; off += piece {
		b := <-free
		b = b[:min(piece, size-off)]
		if hash {
			t := time.Now()
			h.Write(b)
			hashing += time.Since(t)
		}
		w.WriteAt(b, off, func() { free <- b[:piece] })
	}
	if err := w.Close(); err != nil {
		return 0, 0, err
	}
	var hashRate float64
	if hash && hashing > 0 {
		hashRate = float64(size) / hashing.Seconds()
	}
	if !w.Direct() { // no direct descriptor, or a write was refused
		return 0, hashRate, nil
	}
	return float64(size) / time.Since(start).Seconds(), hashRate, nil
}

// systemTime is the system CPU time this process has used.
func systemTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Stime.Nano())
}
