package diskio

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

func TestBuffers(t *testing.T) {
	for _, tc := range []struct{ count, size int }{
		{1, Align},
		{3, 3*Align + 5},
		{7, 4 << 20},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.count, tc.size), func(t *testing.T) {
			b := NewBuffers(tc.count, tc.size)
			defer b.Release()
			p := b.Pieces()
			if len(p) != tc.count {
				t.Fatalf("%d pieces, want %d", len(p), tc.count)
			}
			for i, piece := range p {
				if len(piece) != tc.size || cap(piece) != tc.size {
					t.Errorf("piece %d: len %d cap %d, want %d", i, len(piece), cap(piece), tc.size)
				}
				if addr(piece)%Align != 0 {
					t.Errorf("piece %d at %#x: not on an Align boundary", i, addr(piece))
				}
				for j := range piece { // writable, and no piece overlaps another
					piece[j] = byte(i)
				}
			}
			for i, piece := range p {
				if piece[0] != byte(i) || piece[len(piece)-1] != byte(i) {
					t.Errorf("piece %d was overwritten by another", i)
				}
			}
			if runtime.GOOS == "linux" && !raceEnabled && tc.size%hugeAlign == 0 && addr(p[0])%hugeAlign != 0 {
				t.Errorf("pieces of %d bytes start at %#x, not on a hugeAlign boundary", tc.size, addr(p[0]))
			}
			b.Release()
			b.Release() // a second call does nothing
			if b.Pieces() != nil {
				t.Error("pieces still handed out after Release")
			}
		})
	}
	if p := NewBuffers(0, Align).Pieces(); len(p) != 0 {
		t.Errorf("NewBuffers(0, ...) gave %d pieces", len(p))
	}
}

// TestBuffersAskForHugePages checks, where the kernel takes the advice
// (THP in "madvise" or "always" mode), that the region of 4 MiB pieces is
// eligible for transparent huge pages: the reason Buffers exist.
func TestBuffersAskForHugePages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("huge pages are asked for on Linux only")
	}
	if raceEnabled {
		t.Skip("under -race the pieces come from the heap")
	}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages are off here (%q, %v)", strings.TrimSpace(string(mode)), err)
	}
	b := NewBuffers(2, 4<<20)
	defer b.Release()
	at := addr(b.Pieces()[0])
	eligible, found := thpEligible(t, at)
	if !found {
		t.Skip("/proc/self/smaps has no THPeligible field here")
	}
	if !eligible {
		t.Errorf("the mapping at %#x is not eligible for huge pages (THP mode %q)", at, strings.TrimSpace(string(mode)))
	}
}

// thpEligible reads /proc/self/smaps for the mapping holding at.
func thpEligible(t *testing.T, at uintptr) (eligible, found bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && strings.Contains(line[:strings.IndexByte(line, ' ')], "-") {
			in = lo <= at && at < hi
			continue
		}
		if in && strings.HasPrefix(line, "THPeligible:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "THPeligible:")) == "1", true
		}
	}
	return false, false
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
