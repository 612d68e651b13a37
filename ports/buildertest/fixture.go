package buildertest

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/cubesandbox/templatecenter/ports"
)

// FixtureTime is later than every mtime in the fixtures; the suite passes
// it as BuildSpec.Time.
var FixtureTime = time.Unix(1_700_000_000, 0)

// fixtureBase is the first mtime used in the layers; entries get distinct
// times after it so that a builder mixing them up is caught.
var fixtureBase = time.Unix(1_600_000_000, 0)

// Sizes of the big files in the fidelity input.
const (
	LargeFileSize  = 20<<20 + 123 // random bytes
	SparseFileSize = 16 << 20     // zeros except three small marks
	ManyFiles      = 3000         // files in one directory
)

// op is one tar entry of a layer under construction.
type op struct {
	hdr  tar.Header
	body []byte
}

// layerBuilder collects the entries of one layer.
type layerBuilder struct {
	ops  []op
	tick *int
}

func (l *layerBuilder) add(h tar.Header, body []byte, xattrs []string) {
	*l.tick++
	h.ModTime = fixtureBase.Add(time.Duration(*l.tick) * time.Minute)
	if len(xattrs)%2 != 0 {
		panic("xattrs come in name, value pairs")
	}
	for i := 0; i < len(xattrs); i += 2 {
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords["SCHILY.xattr."+xattrs[i]] = xattrs[i+1]
	}
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(body))
	}
	l.ops = append(l.ops, op{hdr: h, body: body})
}

func (l *layerBuilder) dir(name string, mode int64, uid, gid int, xattrs ...string) {
	l.add(tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid}, nil, xattrs)
}

func (l *layerBuilder) file(name string, mode int64, uid, gid int, body []byte, xattrs ...string) {
	l.add(tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: uid, Gid: gid}, body, xattrs)
}

func (l *layerBuilder) hardlink(name, target string) {
	l.add(tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644}, nil, nil)
}

func (l *layerBuilder) symlink(name, target string, uid, gid int) {
	l.add(tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, Uid: uid, Gid: gid}, nil, nil)
}

func (l *layerBuilder) device(name string, typ byte, mode int64, uid, gid int, major, minor int64, xattrs ...string) {
	l.add(tar.Header{Typeflag: typ, Name: name, Mode: mode, Uid: uid, Gid: gid, Devmajor: major, Devminor: minor}, nil, xattrs)
}

func (l *layerBuilder) fifo(name string, mode int64, uid, gid int) {
	l.add(tar.Header{Typeflag: tar.TypeFifo, Name: name, Mode: mode, Uid: uid, Gid: gid}, nil, nil)
}

// whiteout hides name (and everything below it) in the lower layers.
func (l *layerBuilder) whiteout(name string) {
	dir, base := path.Split(name)
	l.add(tar.Header{Typeflag: tar.TypeReg, Name: dir + ".wh." + base, Mode: 0o644}, nil, nil)
}

// opaque hides every lower child of dir.
func (l *layerBuilder) opaque(dir string) {
	l.add(tar.Header{Typeflag: tar.TypeReg, Name: dir + "/.wh..wh..opq", Mode: 0o644}, nil, nil)
}

// capNetRaw is a security.capability value (VFS_CAP_REVISION_2, effective)
// granting CAP_NET_RAW permitted.
func capNetRaw() string {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000001)
	binary.LittleEndian.PutUint32(b[4:], 1<<13)
	return string(b)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), 'c', 'u', 'b', 'e'}))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sparseBytes() []byte {
	b := make([]byte, SparseFileSize)
	copy(b, "HEAD")
	copy(b[SparseFileSize/2:], "MIDDLE")
	copy(b[SparseFileSize-4:], "TAIL")
	return b
}

// Long names: a 255-byte component and a symlink target too long for the
// inode (ext4 keeps targets up to 59 bytes inside it).
var (
	longName   = strings.Repeat("n", 251) + ".txt"
	target59   = "/usr/lib/" + strings.Repeat("t", 50)
	target60   = "/usr/lib/" + strings.Repeat("u", 51)
	longTarget = "../" + strings.Repeat("very-long-directory-name/", 8) + "end"
	bigXattr   = strings.Repeat("x", 300)
)

// fidelityLayers returns the three layers of the fidelity input, in order.
func fidelityLayers() [3][]op {
	tick := 0
	l0, l1, l2 := &layerBuilder{tick: &tick}, &layerBuilder{tick: &tick}, &layerBuilder{tick: &tick}

	// Layer 0: a base system.
	l0.dir("bin", 0o755, 0, 0)
	l0.dir("etc", 0o755, 0, 0)
	l0.file("etc/hostname", 0o644, 0, 0, []byte("cube\n"), "user.comment", "hello xattr")
	l0.file("etc/empty", 0o644, 0, 0, nil)
	l0.file("etc/old", 0o644, 0, 0, []byte("to be whited out\n"))
	l0.file("etc/reborn", 0o644, 0, 0, []byte("first life\n"))
	l0.dir("usr", 0o755, 0, 0, "trusted.cube.marker", "1")
	l0.dir("usr/bin", 0o755, 0, 0)
	l0.file("usr/bin/su", 0o4755, 0, 0, []byte("setuid binary\n"))
	l0.file("usr/bin/wall", 0o2755, 0, 5, []byte("setgid binary\n"))
	l0.file("usr/bin/ping", 0o755, 0, 0, []byte("ping\n"), "security.capability", capNetRaw())
	l0.file("usr/bin/hl-base", 0o755, 0, 0, []byte("shared by three names\n"))
	l0.hardlink("usr/bin/hl-peer", "usr/bin/hl-base")
	l0.dir("usr/lib", 0o755, 0, 0)
	l0.file("usr/lib/libfoo.so.1", 0o644, 0, 0, []byte("\x7fELF fake library\n"))
	l0.symlink("usr/lib/libfoo.so", "libfoo.so.1", 0, 0)
	l0.symlink("usr/lib/fast59", target59, 0, 0)
	l0.symlink("usr/lib/slow60", target60, 0, 0)
	l0.symlink("usr/lib/slowlong", longTarget, 1234, 5678)
	l0.dir("var", 0o755, 0, 0)
	l0.symlink("var/run", "/run", 0, 0)
	l0.dir("run", 0o755, 0, 0)
	l0.fifo("run/ctl.fifo", 0o620, 1234, 5678)
	l0.dir("tmp", 0o1777, 0, 0)
	l0.dir("root", 0o700, 0, 0)
	l0.dir("ro", 0o555, 0, 0)
	l0.file("ro/readme", 0o444, 0, 0, []byte("read only\n"))
	l0.dir("home", 0o755, 0, 0)
	l0.dir("home/user", 0o750, 1234, 5678)
	l0.file("home/user/notes", 0o640, 1234, 5678, []byte("notes\n"))
	l0.dir("data", 0o755, 0, 0)
	l0.file("data/nobody", 0o600, 65534, 65534, []byte("nobody's\n"))
	l0.file("data/bigid", 0o644, 100000, 100001, []byte("32-bit ids\n"))
	l0.file("data/"+longName, 0o644, 0, 0, []byte("255-byte name\n"))
	l0.file("data/héllo-wörld-日本語.txt", 0o644, 0, 0, []byte("non-ASCII name\n"))
	l0.file("data/withbig", 0o644, 0, 0, []byte("big xattr\n"), "user.big", bigXattr, "user.small", "s")
	l0.symlink("data/dangling", "/nonexistent/target", 0, 0)
	l0.dir("dev", 0o755, 0, 0)
	l0.device("dev/null", tar.TypeChar, 0o666, 0, 0, 1, 3)
	l0.device("dev/sda", tar.TypeBlock, 0o660, 0, 6, 8, 0)
	l0.device("dev/big", tar.TypeChar, 0o600, 0, 0, 300, 70000)
	l0.device("dev/tty", tar.TypeChar, 0o620, 0, 5, 5, 0, "security.label", "tty")
	l0.dir("opt", 0o755, 0, 0)
	l0.file("opt/large.bin", 0o644, 0, 0, randomBytes(LargeFileSize, 1))
	l0.file("opt/sparse.img", 0o644, 0, 0, sparseBytes())
	l0.dir("opt/dir", 0o755, 0, 0)
	l0.file("opt/dir/a", 0o644, 0, 0, []byte("a\n"))
	l0.file("opt/dir/b", 0o644, 0, 0, []byte("b\n"))
	l0.dir("gone", 0o755, 0, 0)
	l0.file("gone/x", 0o644, 0, 0, []byte("x\n"))
	l0.dir("gone/sub", 0o755, 0, 0)
	l0.file("gone/sub/y", 0o644, 0, 0, []byte("y\n"))
	l0.dir("x", 0o755, 0, 0)
	l0.file("x/a", 0o644, 0, 0, []byte("a is a file\n"))
	l0.dir("x/b", 0o755, 0, 0)
	l0.file("x/b/c", 0o644, 0, 0, []byte("c\n"))
	l0.dir("many", 0o755, 0, 0)
	for i := range ManyFiles {
		var body []byte
		if i%500 == 0 {
			body = fmt.Appendf(nil, "file %d\n", i)
		}
		l0.file(fmt.Sprintf("many/file-%04d", i), 0o644, 0, 0, body)
	}

	// Layer 1: deletions, replacements and a cross-layer hard link.
	l1.whiteout("etc/old")
	l1.whiteout("etc/reborn")
	l1.whiteout("gone")
	l1.opaque("opt/dir")
	l1.file("opt/dir/new", 0o644, 0, 0, []byte("new in layer 1\n"))
	l1.dir("home", 0o711, 0, 0) // metadata change of a directory keeps its children
	l1.dir("x/a", 0o755, 0, 0)  // file replaced by a directory
	l1.file("x/a/inner", 0o644, 0, 0, []byte("inner\n"))
	l1.file("x/b", 0o600, 0, 0, []byte("b is a file now\n")) // directory replaced by a file
	l1.hardlink("usr/bin/hl-upper", "usr/bin/hl-base")
	l1.file("etc/hostname", 0o644, 0, 0, []byte("cube-1\n"), "user.comment", "changed")

	// Layer 2: back again.
	l2.file("x/a", 0o644, 0, 0, []byte("a is a file again\n")) // directory replaced by a file
	l2.file("etc/reborn", 0o600, 1234, 5678, []byte("second life\n"))
	l2.dir("var/lib", 0o755, 0, 0)
	l2.file("var/lib/state", 0o644, 0, 0, []byte("state\n"))

	return [3][]op{l0.ops, l1.ops, l2.ops}
}

// WhitedOut lists paths of the fidelity input's lower layers that must not
// exist in the result.
var WhitedOut = []string{"etc/old", "gone", "gone/x", "gone/sub", "gone/sub/y", "opt/dir/a", "opt/dir/b", "x/a/inner", "x/b/c"}

// media types of the three fidelity layers, one per compression.
var layerMediaTypes = [3]string{
	"application/vnd.oci.image.layer.v1.tar+gzip",
	"application/vnd.oci.image.layer.v1.tar",
	"application/vnd.oci.image.layer.v1.tar+zstd",
}

// FidelityInput writes the fidelity layers into dir and returns them, in
// order, with the Tree a faithful builder must produce from them.
func FidelityInput(t testing.TB, dir string) ([]ports.FlattenLayer, Tree) {
	t.Helper()
	ls := fidelityLayers()
	var out []ports.FlattenLayer
	for i, ops := range ls {
		p := filepath.Join(dir, fmt.Sprintf("layer%d", i))
		if err := writeLayer(p, ops, layerMediaTypes[i]); err != nil {
			t.Fatalf("write layer %d: %v", i, err)
		}
		out = append(out, ports.FlattenLayer{Path: p, MediaType: layerMediaTypes[i], Digest: fmt.Sprintf("fidelity-layer-%d", i)})
	}
	return out, expectedTree(ls[:])
}

// writeLayer writes ops as a tar, compressed as mediaType says.
func writeLayer(p string, ops []op, mediaType string) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var w io.WriteCloser = nopCloser{f}
	switch {
	case strings.HasSuffix(mediaType, "+gzip"):
		w = gzip.NewWriter(f)
	case strings.HasSuffix(mediaType, "+zstd"):
		if w, err = zstd.NewWriter(f); err != nil {
			return err
		}
	}
	if err := writeTar(w, ops); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func writeTar(w io.Writer, ops []op) error {
	tw := tar.NewWriter(w)
	for _, o := range ops {
		h := o.hdr
		if err := tw.WriteHeader(&h); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		if _, err := tw.Write(o.body); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	return tw.Close()
}

// expectedTree applies the layers with the suite's own model of the OCI
// layer rules: whiteouts and opaque markers hide entries of lower layers
// only; a directory over a directory replaces its metadata and keeps its
// children; anything else replaces the old entry and everything below it;
// a hard link shares its target's inode.
func expectedTree(ls [][]op) Tree {
	type inode struct {
		e *Entry
	}
	state := map[string]*inode{}
	removeTree := func(p string) {
		old := state[p]
		delete(state, p)
		if old == nil || old.e.Type != TypeDir {
			return
		}
		for q := range state {
			if strings.HasPrefix(q, p+"/") {
				delete(state, q)
			}
		}
	}
	for _, ops := range ls {
		for _, o := range ops { // whiteouts first: they act on lower layers only
			dir, base := path.Split(strings.TrimSuffix(o.hdr.Name, "/"))
			dir = strings.TrimSuffix(dir, "/")
			switch {
			case base == ".wh..wh..opq":
				for q := range state {
					if strings.HasPrefix(q, dir+"/") {
						delete(state, q)
					}
				}
			case strings.HasPrefix(base, ".wh."):
				removeTree(path.Join(dir, strings.TrimPrefix(base, ".wh.")))
			}
		}
		for _, o := range ops {
			h := o.hdr
			p := strings.TrimSuffix(h.Name, "/")
			if strings.HasPrefix(path.Base(p), ".wh.") {
				continue
			}
			if h.Typeflag == tar.TypeLink {
				removeTree(p)
				state[p] = state[h.Linkname]
				continue
			}
			e := &Entry{
				Mode:  uint32(h.Mode & 0o7777),
				UID:   uint32(h.Uid),
				GID:   uint32(h.Gid),
				MTime: h.ModTime.Unix(),
			}
			for k, v := range h.PAXRecords {
				if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
					if e.Xattrs == nil {
						e.Xattrs = map[string]string{}
					}
					e.Xattrs[name] = v
				}
			}
			switch h.Typeflag {
			case tar.TypeDir:
				e.Type = TypeDir
			case tar.TypeReg:
				e.Type, e.Size = TypeReg, int64(len(o.body))
				sum := sha256.Sum256(o.body)
				e.SHA256 = hex.EncodeToString(sum[:])
			case tar.TypeSymlink:
				e.Type, e.Target, e.Mode = TypeSymlink, h.Linkname, 0o777
			case tar.TypeChar, tar.TypeBlock:
				e.Type = TypeChar
				if h.Typeflag == tar.TypeBlock {
					e.Type = TypeBlock
				}
				e.Major, e.Minor = uint32(h.Devmajor), uint32(h.Devminor)
			case tar.TypeFifo:
				e.Type = TypeFIFO
			}
			if old := state[p]; !(old != nil && old.e.Type == TypeDir && e.Type == TypeDir) {
				removeTree(p)
			}
			state[p] = &inode{e: e}
		}
	}

	tree := Tree{".": {Path: ".", Type: TypeDir, Mode: 0o755, Inode: 1}}
	ids := map[*inode]uint64{}
	for p, in := range state {
		id, ok := ids[in]
		if !ok {
			id = uint64(len(ids) + 2)
			ids[in] = id
		}
		e := *in.e
		e.Path, e.Inode = p, id
		tree[p] = &e
	}
	return tree
}
