package ext4stream

import (
	"fmt"
	"testing"
)

// Names whose hashes collide in one directory are each found, and a name
// sharing the hash of one that exists is not taken for it.
func TestLookupHashCollisions(t *testing.T) {
	w := newFSWriter(nil, stamp{}, 1<<20, 1)
	// Two names with one key in the root: a birthday search over 32-bit
	// keys, some 10^5 names.
	seen := map[uint32]string{}
	var a, b string
	for i := 0; a == "" && i < 10_000_000; i++ {
		name := fmt.Sprintf("n%d", i)
		k := w.lookup.key(rootIno, name)
		if first, ok := seen[k]; ok {
			a, b = first, name
		}
		seen[k] = name
	}
	if a == "" {
		t.Fatal("no colliding names found")
	}
	add := func(name string) uint32 {
		w.nodes = append(w.nodes, inode{mode: sIFREG})
		w.link(rootIno, name, uint32(len(w.nodes)))
		return uint32(len(w.nodes))
	}
	inoA := add(a)
	if _, ok := w.child(rootIno, b); ok {
		t.Errorf("%q, not added, is found for %q, whose hash it shares", b, a)
	}
	inoB := add(b)
	for name, want := range map[string]uint32{a: inoA, b: inoB} {
		if ino, ok := w.child(rootIno, name); !ok || ino != want {
			t.Errorf("%q found as %d, %v; want %d", name, ino, ok, want)
		}
		if ino, ok := w.find(name); !ok || ino != want {
			t.Errorf("find(%q) = %d, %v; want %d", name, ino, ok, want)
		}
	}
	if _, ok := w.find(b + "/x"); ok {
		t.Errorf("a name below a file is found")
	}
}
