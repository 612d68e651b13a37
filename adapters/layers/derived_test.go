package layers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// TestDerivedIndexRoundTrip: a kept layer loads back to the same tree,
// entry by entry (xattrs, hard links, whiteouts, entries whose fields are
// zero after ones whose fields are not); an index cut short anywhere is
// not used: the layer is decoded again, to the same tree.
func TestDerivedIndexRoundTrip(t *testing.T) {
	var ents []flattenertest.Entry
	for i := range 300 {
		name := fmt.Sprintf("d%d/f%d", i%7, i)
		e := flattenertest.Reg(name, strings.Repeat("x", i*37))
		if i%3 == 0 {
			e = e.With(flattenertest.Xattrs("user.k", fmt.Sprint(i)))
		}
		ents = append(ents, e)
		if i%50 == 0 {
			ents = append(ents, flattenertest.Hard(name+".l", name), flattenertest.Sym(name+".s", "f0"))
		}
	}
	lower := flattenertest.Tar(t, ents...)
	upper := flattenertest.Tar(t, flattenertest.Whiteout("d1", "f1"), flattenertest.Reg("empty", ""), flattenertest.Dir("d2"))
	blobs := []blob{{Data: flattenertest.Gzip(t, lower), MediaType: mtGzip}, {Data: flattenertest.Gzip(t, upper), MediaType: mtGzip}}
	plain, _, err := flatten(t, writeLayers(t, blobs...), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	withCache := func() ([]Layer, *flattenertest.DirCache) {
		ls := writeLayers(t, blobs...)
		c := &flattenertest.DirCache{Dir: t.TempDir()}
		ls[0].Derived = c
		return ls, c
	}
	ls, cache := withCache()
	if _, _, err := flatten(t, ls, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	index := ""
	for _, f := range cache.Files() {
		if strings.HasSuffix(f, ".index") {
			index = filepath.Join(cache.Dir, f)
		}
	}
	full, err := os.ReadFile(index)
	if err != nil {
		t.Fatalf("the layer was not kept: %v (files %v)", err, cache.Files())
	}
	// Loaded whole: the blob is gone, so only the kept layer can answer.
	if err := os.Remove(ls[0].Path); err != nil {
		t.Fatal(err)
	}
	got, _, err := flatten(t, ls, DefaultLimits())
	if err != nil {
		t.Fatalf("flatten from the kept layer: %v", err)
	}
	if string(got) != string(plain) {
		t.Fatal("the kept layer loads to another tree")
	}
	for _, cut := range []int{1, len(full) / 3, len(full) / 2, len(full) - 1} {
		ls, cache := withCache()
		if _, _, err := flatten(t, ls, DefaultLimits()); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cache.Dir, filepath.Base(index)), full[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		got, _, err := flatten(t, ls, DefaultLimits())
		if err != nil {
			t.Fatalf("index cut at %d of %d: %v", cut, len(full), err)
		}
		if string(got) != string(plain) {
			t.Fatalf("index cut at %d of %d: another tree", cut, len(full))
		}
	}
}
