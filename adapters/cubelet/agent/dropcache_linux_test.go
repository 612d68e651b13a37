package agent

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// dropCache drops the clean cached pages of the file at p.
func dropCache(b *testing.B, p string) {
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
