package pipeline

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testca"
)

// treeSpec is an entry of a test tree: "d name", "f name content",
// "l name target" (symlink) or "h name target" (hard link).
type treeSpec string

// makeTree builds a tree, in the order given (the specs list it in
// pre-order with sorted siblings), its file contents in one file.
func makeTree(t *testing.T, specs ...treeSpec) []ports.TreeEntry {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "content"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var out []ports.TreeEntry
	for _, s := range specs {
		kind, rest, _ := strings.Cut(string(s), " ")
		name, arg, _ := strings.Cut(rest, " ")
		h := &tar.Header{Name: name, Mode: 0o755, ModTime: time.Unix(1, 0), Uid: 7, Gid: 7}
		e := ports.TreeEntry{Header: h}
		switch kind {
		case "d":
			h.Typeflag = tar.TypeDir
		case "f":
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o600, int64(len(arg))
			off, _ := f.Seek(0, 2)
			f.WriteString(arg)
			e.File, e.Offset = f, off
		case "l":
			h.Typeflag, h.Linkname = tar.TypeSymlink, arg
		case "h":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeLink, arg, 0o600
		}
		out = append(out, e)
	}
	checkOrder(t, out) // BakeCA finds names by the tree's order
	return out
}

// contentOf reads the content of the file at p (following a hard link).
func contentOf(t *testing.T, tree []ports.TreeEntry, p string) (string, *tar.Header) {
	t.Helper()
	v := newTreeView(ports.TreeSlice(tree))
	i, kind := v.regular(p)
	if kind != regular {
		t.Fatalf("%s is not a regular file in the tree", p)
	}
	b, err := readEntry(tree[i])
	if err != nil {
		t.Fatal(err)
	}
	j, _ := v.find(p)
	return string(b), tree[j].Header
}

// checkOrder holds a tree to TreeEntry's order: parents first, then a
// pre-order walk with siblings sorted by name.
func checkOrder(t *testing.T, tree []ports.TreeEntry) {
	t.Helper()
	seen := map[string]bool{".": true}
	var prev string
	for _, e := range tree {
		n := cleanName(e.Header.Name)
		if !seen[path.Dir(n)] {
			t.Fatalf("%s comes before its parent", n)
		}
		if prev != "" && path.Dir(prev) == path.Dir(n) && prev > n {
			t.Fatalf("siblings out of order: %s before %s", prev, n)
		}
		seen[n], prev = true, n
	}
}

func bake(t *testing.T, tree []ports.TreeEntry, ca []byte) ([]ports.TreeEntry, CAResult) {
	t.Helper()
	c, err := core.ParseCubeCA(ca)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "ca-content"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	baked, res, err := BakeCA(ports.TreeSlice(tree), c, f, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	out, err := ports.TreeEntries(baked)
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, out)
	return out, res
}

func TestBakeCA(t *testing.T) {
	ca, other := string(testca.PEM(1)), string(testca.PEM(9))
	tests := []struct {
		name    string
		tree    []treeSpec
		written int
		seeded  bool
		files   map[string]string // path: content
		links   map[string]string // path: symlink target still there
		notes   []string
	}{
		{"debian: bundle appended, anchor dropped",
			[]treeSpec{"d etc", "d etc/ssl", "d etc/ssl/certs", treeSpec("f etc/ssl/certs/ca-certificates.crt " + strings.TrimSuffix(other, "\n")),
				"d usr", "d usr/local", "d usr/local/share", "d usr/local/share/ca-certificates", "f usr/local/share/ca-certificates/zz.crt x"},
			2, false, map[string]string{
				"etc/ssl/certs/ca-certificates.crt":                    other + ca, // a newline is added first
				"usr/local/share/ca-certificates/cube-egress-root.crt": ca,
			}, nil, nil},
		{"rhel: through the legacy symlink it is already there",
			[]treeSpec{"d etc", "d etc/pki", "d etc/pki/ca-trust", "d etc/pki/ca-trust/extracted", "d etc/pki/ca-trust/extracted/pem",
				treeSpec("f etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem " + other), "d etc/pki/ca-trust/source", "d etc/pki/ca-trust/source/anchors",
				"d etc/pki/tls", "d etc/pki/tls/certs", "l etc/pki/tls/certs/ca-bundle.crt ../../ca-trust/extracted/pem/tls-ca-bundle.pem"},
			2, false, map[string]string{
				"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem":     other + ca,
				"etc/pki/ca-trust/source/anchors/cube-egress-root.crt": ca,
			}, map[string]string{"etc/pki/tls/certs/ca-bundle.crt": "../../ca-trust/extracted/pem/tls-ca-bundle.pem"},
			[]string{"etc/pki/tls/certs/ca-bundle.crt: present"}},
		{"distroless: a bundle is seeded",
			[]treeSpec{"d etc", "f etc/passwd root:x:0:0::/:/sbin/nologin", "d usr"},
			1, true, map[string]string{"etc/ssl/certs/ca-certificates.crt": ca}, nil,
			[]string{"etc/ssl/certs/ca-certificates.crt: seeded (the image has no trust store)"}},
		{"scratch: every parent is made", nil, 1, true, map[string]string{"etc/ssl/certs/ca-certificates.crt": ca}, nil, nil},
		{"android: /etc links into /system",
			[]treeSpec{"l etc /system/etc", "d system", "d system/etc", "d system/etc/security", "d system/etc/security/cacerts"},
			1, false, map[string]string{"system/etc/security/cacerts/cube-egress-root.crt": ca}, map[string]string{"etc": "/system/etc"}, nil},
		{"a hard-linked bundle changes for every name",
			[]treeSpec{"d data", treeSpec("f data/bundle " + other), "d etc", "d etc/ssl", "d etc/ssl/certs", "h etc/ssl/certs/ca-certificates.crt data/bundle"},
			1, false, map[string]string{"data/bundle": other + ca, "etc/ssl/certs/ca-certificates.crt": other + ca}, nil, nil},
		{"a link climbing out stays in the image",
			[]treeSpec{treeSpec("f bundle.pem " + other), "d etc", "d etc/ssl", "d etc/ssl/certs", "l etc/ssl/certs/ca-certificates.crt ../../../../../../bundle.pem"},
			1, false, map[string]string{"bundle.pem": other + ca}, nil, nil},
		{"a link loop is skipped",
			[]treeSpec{"d etc", "d etc/ssl", "d etc/ssl/certs", "l etc/ssl/certs/ca-certificates.crt ca-certificates.crt"},
			0, false, nil, nil, []string{"etc/ssl/certs/ca-certificates.crt: more than 40 symlinks: a loop"}},
		{"no room for a seed", []treeSpec{"f etc not a directory"}, 0, false, nil, nil,
			[]string{"etc/ssl/certs/ca-certificates.crt: seed skipped: a parent path is not a directory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, res := bake(t, makeTree(t, tc.tree...), []byte(ca))
			if res.TargetsWritten != tc.written || res.Seeded != tc.seeded || res.Baked != (tc.written > 0) {
				t.Fatalf("result %+v, want %d written, seeded %v", res, tc.written, tc.seeded)
			}
			for p, want := range tc.files {
				got, h := contentOf(t, out, p)
				if got != want {
					t.Errorf("%s holds\n%s\nwant\n%s", p, got, want)
				}
				if strings.HasSuffix(p, AnchorFileName) || tc.seeded {
					if h.Mode != 0o644 || h.Uid != 0 || h.Gid != 0 {
						t.Errorf("%s: mode %o owner %d:%d, want a root-owned 0644 file", p, h.Mode, h.Uid, h.Gid)
					}
				} else if h.Mode != 0o600 || h.Uid != 7 {
					t.Errorf("%s: the bundle lost its mode or owner: %o %d", p, h.Mode, h.Uid)
				}
			}
			v := newTreeView(ports.TreeSlice(out))
			idx := func(p string) int { i, _ := v.find(p); return i }
			for p, target := range tc.links {
				if i, ok := v.find(p); !ok || out[i].Header.Typeflag != tar.TypeSymlink || out[i].Header.Linkname != target {
					t.Errorf("%s is no longer the symlink to %s", p, target)
				}
			}
			if tc.seeded {
				for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs"} {
					if h := out[idx(d)].Header; h.Typeflag != tar.TypeDir || (h.Mode != 0o755 && h.Uid != 7) {
						t.Errorf("%s: %+v", d, h)
					}
				}
			}
			for _, n := range tc.notes {
				if !strings.Contains(strings.Join(res.Notes, "\n"), n) {
					t.Errorf("notes %q lack %q", res.Notes, n)
				}
			}
		})
	}
}

// TestBakeCAIsIdempotent: baking a tree that has the CA (an image built
// FROM a baked one) writes nothing and still counts as baked.
func TestBakeCAIsIdempotent(t *testing.T) {
	ca := testca.PEM(1)
	tree := makeTree(t, "d etc", "d etc/ssl", "d etc/ssl/certs", treeSpec("f etc/ssl/certs/ca-certificates.crt "+string(testca.PEM(9))),
		"d usr", "d usr/local", "d usr/local/share", "d usr/local/share/ca-certificates")
	once, first := bake(t, tree, ca)
	twice, second := bake(t, once, ca)
	if first.TargetsWritten != 2 || second.TargetsWritten != 0 || !second.Baked || second.Seeded || len(twice) != len(once) {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	got, _ := contentOf(t, twice, "etc/ssl/certs/ca-certificates.crt")
	if n := bytes.Count([]byte(got), []byte("BEGIN CERTIFICATE")); n != 2 {
		t.Fatalf("the bundle holds %d certificates after two bakes, want 2", n)
	}
}

// countingTree counts the entries read from it.
type countingTree struct {
	ports.Tree
	reads int
}

func (c *countingTree) Entry(i int) (ports.TreeEntry, error) {
	c.reads++
	return c.Tree.Entry(i)
}

// TestBakeCAOverlaysTheTree: baking reads a few entries of a large tree,
// by binary search, and lays its changes over it rather than copying it.
func TestBakeCAOverlaysTheTree(t *testing.T) {
	specs := []treeSpec{"d etc", "d etc/ssl", "d etc/ssl/certs", treeSpec("f etc/ssl/certs/ca-certificates.crt " + string(testca.PEM(9))), "d usr", "d usr/lib"}
	for i := range 20000 {
		specs = append(specs, treeSpec(fmt.Sprintf("l usr/lib/l%05d x", i)))
	}
	base := ports.TreeSlice(makeTree(t, specs...))
	c, err := core.ParseCubeCA(testca.PEM(1))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "ca-content"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ct := &countingTree{Tree: base}
	baked, res, err := BakeCA(ct, c, f, time.Unix(1_700_000_000, 0))
	if err != nil || res.TargetsWritten != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if ct.reads > 2000 {
		t.Fatalf("baking read %d entries of a tree of %d", ct.reads, base.Len())
	}
	if baked.Len() != base.Len() {
		t.Fatalf("%d entries after baking, %d before", baked.Len(), base.Len())
	}
	got, err := ports.TreeEntries(baked)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := contentOf(t, got, "etc/ssl/certs/ca-certificates.crt"); !strings.Contains(s, string(testca.PEM(1))) {
		t.Fatal("the bundle lacks the CA")
	}
}
