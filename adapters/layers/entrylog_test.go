package layers

import (
	"archive/tar"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestEntryLogRoundTrip: entries come back from the log as they went in,
// across slab boundaries and with records larger than a slab.
func TestEntryLogRoundTrip(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "layer")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := &layerData{file: f}
	var want []*entry
	for i := range 3000 {
		e := &entry{name: "usr/lib/f" + strconv.Itoa(i), typ: tar.TypeReg, size: int64(i), mode: 0o644, uid: i % 7, gid: 1 << 31, mtime: -5 + int64(i)}
		e.raw = e.name
		switch i % 5 {
		case 1:
			e.raw, e.src, e.off = "/"+e.name, f, int64(i)*512
		case 2:
			e.typ, e.link = tar.TypeSymlink, "../x"
		case 3:
			e.wh, e.whName = whFile, "gone"
		case 4:
			e.zero, e.zeroKnown, e.sparse = [][2]uint32{{0, 2}, {5, 1}}, true, true
		}
		if i%100 == 0 {
			// larger than a slab
			e.xattrs = []xattr{{"user.a", strings.Repeat("v", entryLogSlab)}, {"user.b", ""}}
		}
		if i%9 == 0 {
			e.typ, e.major, e.minor = tar.TypeChar, 1, 3
		}
		want = append(want, e)
		d.log.add(d, e)
	}
	if d.log.n != len(want) {
		t.Fatalf("log holds %d entries, want %d", d.log.n, len(want))
	}
	i := 0
	if err := d.log.each(d, true, func(e *entry) error {
		if !reflect.DeepEqual(e, want[i]) {
			t.Fatalf("entry %d: %+v, want %+v", i, e, want[i])
		}
		i++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i != len(want) || d.log.slabs != nil {
		t.Fatalf("%d entries read back; slabs left: %d", i, len(d.log.slabs))
	}
}
