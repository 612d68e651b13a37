package pipeline

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Where upstream bakes the CubeEgress root CA into a rootfs
// (cube_egress_ca.Bake): it is appended to every trust bundle the image
// has, dropped as AnchorFileName into every anchor directory it has, and,
// when the image has neither (distroless, scratch), a bundle holding only
// it is seeded at SeedBundlePath. Paths are inside the image.
var (
	CABundleFiles = []string{
		"etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine
		"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // RHEL, Fedora, CentOS
		"etc/pki/tls/certs/ca-bundle.crt",                  // RHEL legacy, Amazon Linux 2
	}
	CAAnchorDirs = []string{
		"usr/local/share/ca-certificates",  // Debian, Ubuntu
		"etc/pki/ca-trust/source/anchors",  // RHEL, Fedora, CentOS
		"etc/ca-certificates/trust-source", // Arch
		"system/etc/security/cacerts",      // Android
	}
)

const (
	// AnchorFileName is the CA's file name in an anchor directory.
	AnchorFileName = "cube-egress-root.crt"
	// SeedBundlePath is the bundle created for an image with no trust
	// store (where Go and distroless images look first).
	SeedBundlePath = "etc/ssl/certs/ca-certificates.crt"
	maxSymlinkHops = 40
)

// CAResult is what baking the CA did (upstream's bake result, persisted on
// the artifact row as cube_egress_ca_*).
type CAResult struct {
	// Baked: the CA is in the image's trust stores (written now, or there
	// already).
	Baked       bool
	Fingerprint string
	// TargetsWritten counts the bundles appended to, anchors dropped and
	// bundles seeded; places that already held the CA are not counted.
	TargetsWritten int
	// Seeded: the image had no trust store and got a bundle of its own.
	Seeded bool
	// Notes says, place by place, what was skipped and why.
	Notes []string
}

// BakeCA applies ca to the tree as upstream's bake applies it to a rootfs
// directory. Paths resolve through the image's symlinks inside the image
// (never outside it): a bundle reached through a link is appended to where
// the link leads, and a hard-linked bundle changes for every name. New
// files are 0644 and new directories 0755, owned by root, stamped at. New
// and changed content is written to content, which must stay open while
// the tree is used. The result is tree with the changed and added entries
// laid over it (it reads tree's entries, which must stay valid as long).
func BakeCA(tree ports.Tree, ca *core.CubeCA, content *os.File, at time.Time) (ports.Tree, CAResult, error) {
	v := newTreeView(tree)
	v.content = content
	res := CAResult{Fingerprint: ca.Fingerprint}
	present := false
	note := func(p, why string) { res.Notes = append(res.Notes, p+": "+why) }

	for _, rel := range CABundleFiles {
		p, err := v.resolve(rel, true)
		if err != nil {
			note(rel, err.Error())
			continue
		}
		i, kind := v.regular(p)
		switch kind {
		case missing:
			note(rel, "missing")
			continue
		case other:
			note(rel, "not a regular file")
			continue
		}
		data, err := v.read(i)
		if err != nil {
			return nil, res, fmt.Errorf("read %s: %w", rel, err)
		}
		if holdsDER(data, ca.DER) {
			present = true
			note(rel, "present")
			continue
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		data = append(data, ca.PEM...)
		off, err := v.write(data)
		if err != nil {
			return nil, res, fmt.Errorf("append the CA to %s: %w", rel, err)
		}
		if err := v.setContent(i, content, off, int64(len(data))); err != nil {
			return nil, res, err
		}
		res.TargetsWritten++
	}

	for _, rel := range CAAnchorDirs {
		dir, err := v.resolve(rel, true)
		if err != nil {
			note(rel, err.Error())
			continue
		}
		if i, ok := v.find(dir); !ok {
			note(rel, "dir missing")
			continue
		} else if v.typeOf(i) != tar.TypeDir {
			note(rel, "not a directory")
			continue
		}
		name := dir + "/" + AnchorFileName
		if j, kind := v.regular(name); kind == regular {
			data, err := v.read(j)
			if err != nil {
				return nil, res, fmt.Errorf("read %s: %w", name, err)
			}
			if bytes.Equal(data, ca.PEM) {
				present = true
				note(rel, "present")
				continue
			}
		}
		if err := v.putFile(name, ca.PEM, at); err != nil {
			return nil, res, err
		}
		res.TargetsWritten++
	}

	if res.TargetsWritten == 0 && !present {
		dir, err := v.mkdirAll(path.Dir(SeedBundlePath), at)
		switch {
		case errors.Is(err, errOccupied):
			note(SeedBundlePath, "seed skipped: a parent path is not a directory")
		case err != nil:
			note(SeedBundlePath, "seed skipped: "+err.Error())
		default:
			name := dir + "/" + path.Base(SeedBundlePath)
			if _, ok := v.find(name); ok {
				note(SeedBundlePath, "seed skipped: the path exists and is not a bundle")
				break
			}
			if err := v.putFile(name, ca.PEM, at); err != nil {
				return nil, res, err
			}
			res.TargetsWritten++
			res.Seeded = true
			note(SeedBundlePath, "seeded (the image has no trust store)")
		}
	}
	if v.err != nil {
		return nil, res, fmt.Errorf("read the tree: %w", v.err)
	}
	res.Baked = res.TargetsWritten > 0 || present
	return v.tree, res, nil
}

// holdsDER reports whether a PEM bundle holds the certificate der.
func holdsDER(bundle, der []byte) bool {
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return false
		}
		if b.Type == "CERTIFICATE" && bytes.Equal(b.Bytes, der) {
			return true
		}
	}
}

// readEntry reads a regular entry's content.
func readEntry(e ports.TreeEntry) ([]byte, error) {
	if e.Header.Size == 0 || e.File == nil {
		return nil, nil
	}
	buf := make([]byte, e.Header.Size)
	if _, err := e.File.ReadAt(buf, e.Offset); err != nil {
		return nil, err
	}
	return buf, nil
}

// overlay is a tree with some entries replaced and a few inserted, kept
// apart from the tree it lies over: baking the CA changes a handful of
// entries of a tree that may have millions, which stays where it is (a
// flattener may keep it on disk).
type overlay struct {
	base    ports.Tree
	changed map[int]ports.TreeEntry // by index in the overlay
	// added are the inserted entries by position, ascending: at[k] is the
	// overlay index of added[k].
	at    []int
	added []ports.TreeEntry
}

// Len implements ports.Tree.
func (o *overlay) Len() int { return o.base.Len() + len(o.added) }

// Entry implements ports.Tree.
func (o *overlay) Entry(i int) (ports.TreeEntry, error) {
	if e, ok := o.changed[i]; ok {
		return ports.TreeSlice{e}.Entry(0)
	}
	b := i
	for k, at := range o.at {
		switch {
		case at == i:
			return ports.TreeSlice{o.added[k]}.Entry(0)
		case at < i:
			b--
		}
	}
	return o.base.Entry(b)
}

// set replaces entry i.
func (o *overlay) set(i int, e ports.TreeEntry) { o.changed[i] = e }

// insert puts e at index i, moving the entries from i on one up.
func (o *overlay) insert(i int, e ports.TreeEntry) {
	changed := make(map[int]ports.TreeEntry, len(o.changed))
	for j, c := range o.changed {
		if j >= i {
			j++
		}
		changed[j] = c
	}
	o.changed = changed
	k := 0
	for k < len(o.at) && o.at[k] < i {
		k++
	}
	for j := k; j < len(o.at); j++ {
		o.at[j]++
	}
	o.at = slices.Insert(o.at, k, i)
	o.added = slices.Insert(o.added, k, e)
}

// treeView finds entries of a tree by path and adds to it, keeping its
// order: pre-order, siblings sorted by name, which is the order of the
// names compared component by component, so a name is found by binary
// search. The first error reading the tree is kept in err (and lookups
// then find nothing).
type treeView struct {
	tree *overlay
	err  error
	// content holds what the view writes (new files, changed bundles).
	content *os.File
}

// write appends data to the content file and returns its offset.
func (v *treeView) write(data []byte) (int64, error) {
	off, err := v.content.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	_, err = v.content.Write(data)
	return off, err
}

func newTreeView(tree ports.Tree) *treeView {
	return &treeView{tree: &overlay{base: tree, changed: map[int]ports.TreeEntry{}}}
}

// entry reads entry i; a failure is kept in v.err and gives an entry
// without a header.
func (v *treeView) entry(i int) ports.TreeEntry {
	e, err := v.tree.Entry(i)
	if err == nil && e.Header == nil {
		err = fmt.Errorf("entry %d has no header", i)
	}
	if err != nil {
		if v.err == nil {
			v.err = err
		}
		return ports.TreeEntry{Header: &tar.Header{}}
	}
	return e
}

func (v *treeView) typeOf(i int) byte { return v.entry(i).Header.Typeflag }

func (v *treeView) read(i int) ([]byte, error) {
	e := v.entry(i)
	if v.err != nil {
		return nil, v.err
	}
	return readEntry(e)
}

// search returns the first index whose name is not before p in the
// tree's order, and whether that entry is p.
func (v *treeView) search(p string) (int, bool) {
	i, found := sort.Find(v.tree.Len(), func(i int) int {
		return compareNames(p, cleanName(v.entry(i).Header.Name))
	})
	return i, found && v.err == nil
}

// find returns the index of the entry named p.
func (v *treeView) find(p string) (int, bool) { return v.search(p) }

// compareNames orders names component by component (a parent before its
// children, siblings by name).
func compareNames(a, b string) int {
	for {
		ca, ra, moreA := strings.Cut(a, "/")
		cb, rb, moreB := strings.Cut(b, "/")
		if c := strings.Compare(ca, cb); c != 0 {
			return c
		}
		switch {
		case !moreA && !moreB:
			return 0
		case !moreA:
			return -1
		case !moreB:
			return 1
		}
		a, b = ra, rb
	}
}

// setContent gives the regular entry i new content.
func (v *treeView) setContent(i int, f *os.File, off, size int64) error {
	e := v.entry(i)
	if v.err != nil {
		return v.err
	}
	e.Header.Size = size
	e.File, e.Offset, e.Zero, e.ZeroKnown = f, off, nil, false
	v.tree.set(i, e)
	return nil
}

func cleanName(n string) string { return strings.TrimSuffix(strings.TrimPrefix(n, "./"), "/") }

// resolve follows the image's symlinks in every component of p (the last
// one too when followLast) and returns the path they lead to; absolute
// targets restart at the image's root and ".." stops there. More than 40
// links is an error.
func (v *treeView) resolve(p string, followLast bool) (string, error) {
	parts := strings.Split(p, "/")
	cur, hops := "", 0
	for len(parts) > 0 {
		c := parts[0]
		parts = parts[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur = path.Dir(cur); cur == "." {
				cur = ""
			}
			continue
		}
		next := path.Join(cur, c)
		if i, ok := v.find(next); ok && (len(parts) > 0 || followLast) {
			if h := v.entry(i).Header; h.Typeflag == tar.TypeSymlink {
				if hops++; hops > maxSymlinkHops {
					return "", fmt.Errorf("more than %d symlinks: a loop", maxSymlinkHops)
				}
				if strings.HasPrefix(h.Linkname, "/") {
					cur = ""
				}
				parts = append(strings.Split(h.Linkname, "/"), parts...)
				continue
			}
		}
		cur = next
	}
	return cur, nil
}

type entryKind int

const (
	missing entryKind = iota
	regular
	other
)

// regular returns the entry holding p's content: p's own, or, for a hard
// link, the file it links to.
func (v *treeView) regular(p string) (int, entryKind) {
	i, ok := v.find(p)
	if !ok {
		return 0, missing
	}
	if h := v.entry(i).Header; h.Typeflag == tar.TypeLink {
		if i, ok = v.find(cleanName(h.Linkname)); !ok {
			return 0, other
		}
	}
	if t := v.typeOf(i); t != tar.TypeReg {
		return 0, other
	}
	return i, regular
}

// putFile makes name a regular file holding data: a new entry, or the one
// there replaced (a directory there is an error, as renaming over it is
// upstream).
func (v *treeView) putFile(name string, data []byte, at time.Time) error {
	off, err := v.write(data)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f := v.content
	if i, kind := v.regular(name); kind == regular {
		return v.setContent(i, f, off, int64(len(data)))
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: at}
	e := ports.TreeEntry{Header: h, File: f, Offset: off}
	i, ok := v.search(name)
	if ok {
		if v.typeOf(i) == tar.TypeDir {
			return fmt.Errorf("%s is a directory", name)
		}
		v.tree.set(i, e)
		return nil
	}
	v.tree.insert(i, e)
	return nil
}

var errOccupied = errors.New("path occupied")

// mkdirAll makes every directory of p that is missing (0755, root) and
// returns the path p resolves to; errOccupied when a component is not a
// directory.
func (v *treeView) mkdirAll(p string, at time.Time) (string, error) {
	cur := ""
	for _, c := range strings.Split(p, "/") {
		next, err := v.resolve(path.Join(cur, c), true)
		if err != nil {
			return "", err
		}
		i, ok := v.search(next)
		switch {
		case v.err != nil:
			return "", v.err
		case !ok:
			v.tree.insert(i, ports.TreeEntry{Header: &tar.Header{Typeflag: tar.TypeDir, Name: next, Mode: 0o755, ModTime: at}})
		case v.typeOf(i) != tar.TypeDir:
			return "", errOccupied
		}
		cur = next
	}
	return cur, nil
}
