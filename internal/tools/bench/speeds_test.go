package bench

import (
	"os"
	"strings"
	"testing"
)

// MeasureSpeeds measures every figure, says "refused" only where direct
// I/O is, and leaves nothing in the directory.
func TestMeasureSpeeds(t *testing.T) {
	for _, dir := range []string{t.TempDir(), shmDir(t)} {
		if dir == "" {
			continue
		}
		t.Run(dir, func(t *testing.T) {
			s, err := MeasureSpeeds(dir, 5<<20)
			if err != nil {
				t.Fatal(err)
			}
			if s.Size != 4<<20 {
				t.Errorf("Size = %d, want 5 MiB rounded down to 4 MiB", s.Size)
			}
			if s.SHA256 <= 0 || s.Fill <= 0 || s.Refill <= 0 || s.HashWriting <= 0 {
				t.Errorf("a figure was not measured: %+v", s)
			}
			line := s.String()
			if (s.Direct == 0) != strings.Contains(line, "refused") {
				t.Errorf("report %q does not match Direct = %v", line, s.Direct)
			}
			if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
				t.Errorf("left %v in the directory (%v)", ents, err)
			}
		})
	}
}

// shmDir is a directory on tmpfs (which refuses O_DIRECT on older
// kernels), or "" where there is none.
func shmDir(t *testing.T) string {
	d, err := os.MkdirTemp("/dev/shm", "speeds-test-")
	if err != nil {
		return ""
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
