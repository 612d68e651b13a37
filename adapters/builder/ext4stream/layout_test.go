package ext4stream

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// A rebuild whose top layer changed leaves the lower layer's blocks where
// they were: the base's content, inodes and directory entries are placed
// first. In tree order, the app's directory (sorted before usr/) would
// move everything after it.
func TestLowerLayersKeepTheirPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	body := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	base := []entry{dir("usr/", 0o755), dir("usr/lib/", 0o755)}
	for i := range 120 {
		base = append(base, file(fmt.Sprintf("usr/lib/f%03d", i), 0o644, body(4096+r.IntN(40<<10))))
	}
	app := func(sizes ...int) []entry {
		es := []entry{dir("app/", 0o755)}
		for i, n := range sizes {
			es = append(es, file(fmt.Sprintf("app/a%d", i), 0o644, body(n)))
		}
		return es
	}
	// entriesOf turns a base and an app layer into one tree in tree
	// order (app/ before usr/), the app's entries marked layer 1 unless
	// flat.
	entriesOf := func(appLayer []entry, flat bool) ports.TreeSlice {
		es := flattenertest.TarEntries(t, tarOf(t, append(append([]entry{dir("./", 0o755)}, appLayer...), base...)...), true)
		for i := 1; i <= len(appLayer) && !flat; i++ {
			es[i].Layer = 1
		}
		return es
	}
	same := func(flat bool) float64 {
		one, _, err := buildEntries(t, entriesOf(app(100<<10), flat))
		if err != nil {
			t.Fatal(err)
		}
		two, _, err := buildEntries(t, entriesOf(app(300<<10, 50<<10), flat))
		if err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(one)
		b, _ := os.ReadFile(two)
		equal, blocks := 0, min(len(a), len(b))/blockSize
		for i := range blocks {
			if bytes.Equal(a[i*blockSize:(i+1)*blockSize], b[i*blockSize:(i+1)*blockSize]) {
				equal++
			}
		}
		return float64(equal) / float64(blocks)
	}
	layered, flat := same(false), same(true)
	t.Logf("blocks equal at the same offset: %.3f with layers, %.3f in tree order", layered, flat)
	// What moves with layers is the metadata after the data (inode
	// tables, directories: a tenth of this small image), not the base.
	if layered < 0.85 {
		t.Errorf("with layers, %.3f of the blocks stayed in place, want at least 0.85", layered)
	}
	if flat > 0.5 {
		t.Errorf("in tree order %.3f of the blocks stayed in place: the test no longer moves the base", flat)
	}
}
