package ext4stream

import (
	"hash/maphash"
	"strings"
)

// lookupIndex finds a directory's entry by name without holding full
// paths: a map from a 32-bit hash of (directory inode, leaf name) to the
// dirent, checked against the name in the arena. The rare second name
// whose hash collides with one already there goes in a small map keyed by
// the name itself. Both stay constant time per lookup however large the
// directory.
type lookupIndex struct {
	seed    maphash.Seed
	byHash  map[uint32]uint32  // hash -> dirent
	collide map[dirName]uint32 // names whose hash was taken -> dirent
}

type dirName struct {
	dir  uint32
	name string
}

func newLookupIndex() lookupIndex {
	return lookupIndex{seed: maphash.MakeSeed(), byHash: map[uint32]uint32{}, collide: map[dirName]uint32{}}
}

func (l *lookupIndex) key(dir uint32, name string) uint32 {
	h := maphash.String(l.seed, name)
	return uint32(h^h>>32) ^ dir*0x9E3779B1
}

// add indexes dirent i, name in dir, a name not in dir yet.
func (l *lookupIndex) add(i, dir uint32, name string) {
	k := l.key(dir, name)
	if _, taken := l.byHash[k]; taken {
		l.collide[dirName{dir, strings.Clone(name)}] = i // not the caller's: a substring of the whole entry name
		return
	}
	l.byHash[k] = i
}

// child returns the inode named name in the directory dir.
func (w *fsWriter) child(dir uint32, name string) (uint32, bool) {
	l := &w.lookup
	i, ok := l.byHash[l.key(dir, name)]
	if !ok {
		return 0, false
	}
	if e := &w.dirents[i]; e.parent != dir || string(w.direntName(i)) != name {
		if i, ok = l.collide[dirName{dir, name}]; !ok {
			return 0, false
		}
	}
	return w.dirents[i].ino, true
}

// find returns the inode of a clean tree name ("." is the root), walking
// its components from the root.
func (w *fsWriter) find(name string) (uint32, bool) {
	at := uint32(rootIno)
	if name == "." {
		return at, true
	}
	for rest := name; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		ino, ok := w.child(at, c)
		if !ok {
			return 0, false
		}
		at = ino
	}
	return at, true
}
