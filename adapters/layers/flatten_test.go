package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func TestFlattenSemantics(t *testing.T) {
	cases := []struct {
		name   string
		layers [][]ent
		want   []string // "name type [-> link] [=body]" in output order
	}{
		{
			name: "whiteout file and directory across layers",
			layers: [][]ent{
				{dir("etc"), reg("etc/a", "a"), reg("etc/b", "b"), dir("opt"), reg("opt/x", "x")},
				{reg("etc/.wh.a", ""), reg(".wh.opt", "")},
			},
			want: []string{"etc 5", "etc/b 0 =b"},
		},
		{
			name: "whiteout then recreate in the same layer",
			layers: [][]ent{
				{dir("d"), reg("d/old", "o")},
				{reg(".wh.d", ""), dir("d"), reg("d/new", "n")},
			},
			want: []string{"d 5", "d/new 0 =n"},
		},
		{
			name: "whiteout does not hide its own layer (spec)",
			layers: [][]ent{
				{reg("a", "lower")},
				{reg("a", "upper"), reg(".wh.a", "")},
			},
			want: []string{"a 0 =upper"},
		},
		{
			name: "whiteout of something absent is a no-op",
			layers: [][]ent{
				{reg("a", "a")},
				{reg("nope/.wh.x", ""), reg(".wh.ghost", "")},
			},
			want: []string{"a 0 =a"},
		},
		{
			name: "redundant nested whiteouts",
			layers: [][]ent{
				{dir("foo"), reg("foo/bar", "b"), reg("keep", "k")},
				{reg(".wh.foo", ""), reg("foo/.wh.bar", ""), reg("new/deep/.wh.x", "")},
			},
			want: []string{"keep 0 =k"},
		},
		{
			name: "whiteout of a symlink removes the link, not its target",
			layers: [][]ent{
				{dir("etc"), reg("etc/hosts", "h"), sym("localetc", "etc")},
				{reg(".wh.localetc", "")},
			},
			want: []string{"etc 5", "etc/hosts 0 =h"},
		},
		{
			name: "whiteouts of any type or size act by name only",
			layers: [][]ent{
				{reg("a", "a"), reg("b", "b"), reg("c", "c"), reg("d", "d")},
				{
					dir(".wh.a"),
					sym(".wh.b", "/etc/passwd"),
					reg(".wh.c", "content is ignored"),
					dev(".wh.d", tar.TypeChar, 0, 0),
				},
			},
			want: nil,
		},
		{
			name: "overlayfs-style markers are plain data in OCI layers",
			layers: [][]ent{
				{reg("x", "x")},
				{dev("x", tar.TypeChar, 0, 0)},
			},
			want: []string{"x 3"},
		},
		{
			name: "names differing in case or normalisation stay distinct",
			layers: [][]ent{
				{reg("etc", "lower"), reg("Etc", "upper"), reg("caf\u00e9", "nfc"), reg("cafe\u0301", "nfd")},
			},
			want: []string{"Etc 0 =upper", "cafe\u0301 0 =nfd", "caf\u00e9 0 =nfc", "etc 0 =lower"},
		},
		{
			name: "opaque directory keeps its own layer's children",
			layers: [][]ent{
				{dir("a"), dir("a/b"), reg("a/b/old", "o"), reg("a/keep-lower", "k")},
				{reg("a/b/c/foo", "f"), reg("a/.wh..wh..opq", "")},
			},
			want: []string{"a 5", "a/b 5", "a/b/c 5", "a/b/c/foo 0 =f"},
		},
		{
			name: "root opaque",
			layers: [][]ent{
				{dir("bin"), reg("bin/sh", "sh"), reg("top", "t")},
				{reg(".wh..wh..opq", ""), reg("new", "n")},
			},
			want: []string{"new 0 =n"},
		},
		{
			name: "file replaced by dir and back across layers",
			layers: [][]ent{
				{reg("x", "file1")},
				{dir("x"), reg("x/child", "c")},
				{reg("x", "file2")},
			},
			want: []string{"x 0 =file2"},
		},
		{
			name: "dir replaced by file and back in one layer",
			layers: [][]ent{
				{dir("x"), reg("x/lower", "l")},
				{dir("x"), reg("x/a", "a"), reg("x", "file"), dir("x"), reg("x/b", "b")},
			},
			want: []string{"x 5", "x/b 0 =b"},
		},
		{
			name: "explicit dir replaces lower symlink",
			layers: [][]ent{
				{sym("etc", "/somewhere")},
				{dir("etc"), reg("etc/passwd", "p")},
			},
			want: []string{"etc 5", "etc/passwd 0 =p"},
		},
		{
			name: "symlink replaces lower directory and its subtree",
			layers: [][]ent{
				{dir("lib"), reg("lib/a", "a")},
				{sym("lib", "usr/lib")},
			},
			want: []string{"lib 2 -> usr/lib"},
		},
		{
			name: "duplicate entries in one layer: last wins",
			layers: [][]ent{
				{reg("f", "first"), reg("f", "second"), sym("s", "a"), sym("s", "b")},
			},
			want: []string{"f 0 =second", "s 2 -> b"},
		},
		{
			name: "implied parents are synthesized",
			layers: [][]ent{
				{reg("usr/local/bin/tool", "t")},
			},
			want: []string{"usr 5", "usr/local 5", "usr/local/bin 5", "usr/local/bin/tool 0 =t"},
		},
		{
			name: "absolute names and ./ prefixes are made relative",
			layers: [][]ent{
				{dir("/etc/"), reg("./etc//hosts", "h"), reg("/./a", "a")},
			},
			want: []string{"a 0 =a", "etc 5", "etc/hosts 0 =h"},
		},
		{
			name: "absolute symlinks are stored verbatim, never followed",
			layers: [][]ent{
				{dir("var"), sym("var/run", "/run"), sym("escape", "../../../../etc/shadow"), dir("run")},
			},
			want: []string{"escape 2 -> ../../../../etc/shadow", "run 5", "var 5", "var/run 2 -> /run"},
		},
		{
			name: "hard link emitted after its target even when it sorts first",
			layers: [][]ent{
				{reg("z", "content"), hard("a", "z")},
			},
			want: []string{"a 0 =content", "z 1 -> a"},
		},
		{
			name: "hard link to a lower layer",
			layers: [][]ent{
				{reg("bin/perl", "perl")},
				{hard("/bin/perl5", "/bin/perl")},
			},
			want: []string{"bin 5", "bin/perl 0 =perl", "bin/perl5 1 -> bin/perl"},
		},
		{
			name: "hard link survives whiteout of its target (materialised)",
			layers: [][]ent{
				{reg("a", "shared"), hard("b", "a")},
				{reg(".wh.a", "")},
			},
			want: []string{"b 0 =shared"},
		},
		{
			name: "replacing one name of a hard-linked file leaves the other",
			layers: [][]ent{
				{reg("a", "old"), hard("b", "a")},
				{reg("a", "new")},
			},
			want: []string{"a 0 =new", "b 0 =old"},
		},
		{
			name: "hard link chain shares one inode",
			layers: [][]ent{
				{reg("a", "x"), hard("b", "a"), hard("c", "b")},
			},
			want: []string{"a 0 =x", "b 1 -> a", "c 1 -> a"},
		},
		{
			name: "hard link to a name replaced earlier in the same layer",
			layers: [][]ent{
				{reg("a", "v1"), hard("b", "a"), reg("a", "v2"), hard("c", "a")},
			},
			want: []string{"a 0 =v2", "b 0 =v1", "c 1 -> a"},
		},
		{
			name: "special files",
			layers: [][]ent{
				{dev("dev/null", tar.TypeChar, 1, 3), dev("dev/sda", tar.TypeBlock, 8, 0), fifo("run/fifo")},
			},
			want: []string{"dev 5", "dev/null 3", "dev/sda 4", "run 5", "run/fifo 6"},
		},
		{
			name: "non-UTF-8 and odd bytes kept verbatim",
			layers: [][]ent{
				{reg("caf\xe9", "latin1"), reg("new\nline", "n"), reg(`back\slash`, "b")},
			},
			want: []string{`back\slash 0 =b`, "caf\xe9 0 =latin1", "new\nline 0 =n"},
		},
		{
			name: "pax global headers are ignored",
			layers: [][]ent{
				{ent{h: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": "git"}}}, reg("f", "f")},
			},
			want: []string{"f 0 =f"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := mustFlatten(t, tc.layers...)
			gotL := describe(readTar(t, out))
			if !slices.Equal(gotL, tc.want) {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(gotL, "\n  "), strings.Join(tc.want, "\n  "))
			}
			checkInvariants(t, out)
		})
	}
}

func describe(es []got) []string {
	var out []string
	for _, e := range es {
		s := e.h.Name + " " + string(e.h.Typeflag)
		if e.h.Linkname != "" {
			s += " -> " + e.h.Linkname
		}
		if e.h.Typeflag == tar.TypeReg {
			s += " =" + e.body
		}
		out = append(out, s)
	}
	return out
}

// checkInvariants asserts the Flatten output contract (ports.BuildSpec.Tree).
func checkInvariants(t testing.TB, out []byte) {
	t.Helper()
	seen := map[string]byte{}
	for _, e := range readTar(t, out) {
		n := e.h.Name
		if n == "" || strings.HasPrefix(n, "/") || strings.HasPrefix(n, "./") || strings.HasSuffix(n, "/") ||
			filepath.Clean(n) != n || !filepath.IsLocal(n) {
			t.Fatalf("unclean name %q", n)
		}
		if strings.HasPrefix(filepath.Base(n), whPrefix) {
			t.Fatalf("whiteout left in output: %q", n)
		}
		if _, dup := seen[n]; dup {
			t.Fatalf("duplicate %q", n)
		}
		if d := filepath.Dir(n); d != "." && seen[d] != tar.TypeDir {
			t.Fatalf("%q before its parent directory", n)
		}
		if e.h.Typeflag == tar.TypeLink && seen[e.h.Linkname] != tar.TypeReg {
			t.Fatalf("hard link %q to %q which is not an earlier regular file", n, e.h.Linkname)
		}
		seen[n] = e.h.Typeflag
	}
}

func TestFlattenMetadata(t *testing.T) {
	out := mustFlatten(t,
		[]ent{
			dir("d").with(func(h *tar.Header) { h.Mode = 0o1777; h.Uid = 7; h.Gid = 8 }),
			reg("d/suid", "s").with(func(h *tar.Header) { h.Mode = 0o4755; h.Uid = 0 }),
			reg("sgid", "g").with(func(h *tar.Header) { h.Mode = 0o2711; h.Uid = 1000; h.Gid = 50 }),
			reg("ping", "p").with(xattrs("security.capability", "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "user.note", "hi")),
			reg("typebits", "t").with(func(h *tar.Header) { h.Mode = 0o100640 }),
			reg("future", "f").with(func(h *tar.Header) { h.ModTime = h.ModTime.AddDate(3000, 0, 0) }),
			reg("past", "p").with(func(h *tar.Header) { h.ModTime = h.ModTime.AddDate(-100, 0, 0) }),
			dev("null", tar.TypeChar, 1, 3),
		},
		[]ent{dir("d").with(func(h *tar.Header) { h.Mode = 0o750; h.Uid = 9 })}, // later metadata wins
	)
	es := readTar(t, out)
	check := func(name string, mode int64, uid, gid int) *got {
		t.Helper()
		e := find(es, name)
		if e == nil {
			t.Fatalf("%s missing", name)
		}
		if e.h.Mode != mode || e.h.Uid != uid || e.h.Gid != gid {
			t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", name, e.h.Mode, e.h.Uid, e.h.Gid, mode, uid, gid)
		}
		return e
	}
	check("d", 0o750, 9, 0)
	check("d/suid", 0o4755, 0, 0)
	check("sgid", 0o2711, 1000, 50)
	check("typebits", 0o640, 0, 0)
	if e := check("future", 0o644, 0, 0); e.h.ModTime.Unix() != maxMtime {
		t.Errorf("future mtime %v not clamped", e.h.ModTime)
	}
	if e := check("past", 0o644, 0, 0); e.h.ModTime.Unix() != 0 {
		t.Errorf("pre-epoch mtime %v not clamped", e.h.ModTime)
	}
	if e := check("d/suid", 0o4755, 0, 0); !e.h.ModTime.Equal(fixedTime) {
		t.Errorf("mtime %v, want %v", e.h.ModTime, fixedTime)
	}
	p := check("ping", 0o644, 0, 0)
	if p.h.PAXRecords[paxXattr+"security.capability"] == "" || p.h.PAXRecords[paxXattr+"user.note"] != "hi" {
		t.Errorf("xattrs lost: %v", p.h.PAXRecords)
	}
	if n := check("null", 0o666, 0, 0); n.h.Devmajor != 1 || n.h.Devminor != 3 {
		t.Errorf("device %d:%d", n.h.Devmajor, n.h.Devminor)
	}
}

func TestFlattenStats(t *testing.T) {
	layers := plainLayers(t, []ent{
		dir("d"), reg("d/a", "12345"), hard("d/b", "d/a"), sym("s", "d"), fifo("p"), dev("c", tar.TypeChar, 1, 1), reg("x/y", "zz"),
	})
	_, st, err := flatten(t, layers, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Entries: 8, Files: 2, Dirs: 2, Symlinks: 1, Hardlinks: 1, Devices: 1, FIFOs: 1, ContentBytes: 7}
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
}

func TestFlattenDeterministic(t *testing.T) {
	a := []ent{dir("etc"), reg("etc/b", "b"), reg("etc/a", "a"), reg("z", "z"), hard("y", "z"), reg("m/n", "n")}
	b := []ent{reg("m/n", "n"), reg("z", "z"), hard("y", "z"), reg("etc/a", "a"), dir("etc"), reg("etc/b", "b")}
	outA1 := mustFlatten(t, a)
	outA2 := mustFlatten(t, a)
	outB := mustFlatten(t, b)
	if !bytes.Equal(outA1, outA2) {
		t.Fatal("same input, different output")
	}
	// Entry order inside a layer does not matter either (metadata equal).
	if !slices.Equal(describe(readTar(t, outA1)), describe(readTar(t, outB))) {
		t.Fatalf("order-dependent output:\n%v\n%v", describe(readTar(t, outA1)), describe(readTar(t, outB)))
	}
}

func TestFlattenCompressionAndSniffing(t *testing.T) {
	tarB := mkTar(t, reg("f", strings.Repeat("data", 1000)), dir("d"))
	for _, b := range []blob{
		{tarB, mtTar}, {tarB, ""}, {tarB, "application/vnd.docker.image.rootfs.diff.tar"},
		{gz(t, tarB), mtGzip}, {gz(t, tarB), ""}, {gz(t, tarB), "application/vnd.docker.image.rootfs.diff.tar.gzip"},
		{gz(t, tarB), "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"},
		{zst(t, tarB), mtZstd}, {zst(t, tarB), ""},
		{append(gz(t, tarB[:512*3]), gz(t, tarB[512*3:])...), mtGzip},    // multi-member gzip
		{append(bytes.Repeat(gz(t, nil), 5000), gz(t, tarB)...), mtGzip}, // thousands of empty members (CVE-2022-30631 shape)
		{append(gz(t, tarB), "trailing garbage"...), mtGzip},             // never read: the tar ends first
	} {
		out, _, err := flatten(t, writeLayers(t, b), DefaultLimits())
		if err != nil {
			t.Fatalf("%q: %v", b.mediaType, err)
		}
		if got := describe(readTar(t, out)); !slices.Equal(got, []string{"d 5", "f 0 =" + strings.Repeat("data", 1000)}) {
			t.Fatalf("%q: %v", b.mediaType, got)
		}
	}
}

func TestFlattenEmptyAndNoLayers(t *testing.T) {
	for _, layers := range [][]Layer{nil, writeLayers(t, blob{nil, ""}), writeLayers(t, blob{endOfArchive(), mtTar})} {
		out, st, err := flatten(t, layers, DefaultLimits())
		if err != nil || st.Entries != 0 || len(readTar(t, out)) != 0 {
			t.Fatalf("got %v %+v", err, st)
		}
	}
}

func TestFlattenSparseFile(t *testing.T) {
	data := make([]byte, 513)
	copy(data, "1\n10\n1\n")
	data[512] = 'X'
	b := append(rawPAXEntry("GNUSparseFile.0/s", tar.TypeReg, data,
		"GNU.sparse.major", "1", "GNU.sparse.minor", "0", "GNU.sparse.name", "s", "GNU.sparse.realsize", "11"), endOfArchive()...)
	for _, bl := range []blob{{b, mtTar}, {gz(t, b), mtGzip}} {
		out, _, err := flatten(t, writeLayers(t, bl), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(readTar(t, out)); !slices.Equal(got, []string{"s 0 =" + string(make([]byte, 10)) + "X"}) {
			t.Fatalf("%q", got)
		}
	}
}

func TestFlattenErrors(t *testing.T) {
	layers := plainLayers(t, []ent{reg("ok", "x")}, []ent{reg("../evil", "x")})
	_, _, err := flatten(t, layers, DefaultLimits())
	var re *RejectError
	if !errors.As(err, &re) || re.Layer != 1 || re.Digest != "sha256:test1" || re.Entry != "../evil" {
		t.Fatalf("got %#v", err)
	}
	if !errors.Is(err, core.ErrInvalidArgument) || !errors.Is(err, ErrRejected) {
		t.Fatal("RejectError must match ErrRejected and core.ErrInvalidArgument")
	}
	for _, want := range []string{"layer 1", "sha256:test1", `"../evil"`, RulePathTraversal} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}

	// The lowest bad layer is reported even when several are bad.
	layers = plainLayers(t, []ent{reg("ok", "x")}, []ent{reg("/../a", "")}, []ent{reg("", "")})
	for range 5 {
		if _, _, err := flatten(t, layers, DefaultLimits()); !errors.As(err, &re) || re.Layer != 1 {
			t.Fatalf("got %v", err)
		}
	}

	// A missing file is an I/O error, not a rejection.
	_, _, err = flatten(t, []Layer{{Path: filepath.Join(t.TempDir(), "nope")}}, DefaultLimits())
	if err == nil || errors.Is(err, ErrRejected) {
		t.Fatalf("got %v", err)
	}

	// Cancellation.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Flatten(ctx, plainLayers(t, []ent{reg("a", "a")}), &bytes.Buffer{}, Limits{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}

	// Output write errors surface as such.
	if _, err := Flatten(context.Background(), plainLayers(t, []ent{reg("a", "a")}), failWriter{}, Limits{}); err == nil || errors.Is(err, ErrRejected) {
		t.Fatalf("got %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestFlattenGolden pins the output of a small multi-layer image byte for
// byte (run with -update to rewrite testdata/golden.txt).
func TestFlattenGolden(t *testing.T) {
	layers := []blob{
		{gz(t, mkTar(t,
			dir("bin"), reg("bin/sh", "#!sh"), hard("bin/bash", "bin/sh"), dir("etc"), reg("etc/passwd", "root:x:0:0"),
			reg("etc/shadow", "secret").with(func(h *tar.Header) { h.Mode = 0o600 }), dir("var"), sym("var/run", "/run"),
			dir("usr/lib"), reg("usr/lib/libc.so", "elf"), dev("dev/null", tar.TypeChar, 1, 3), fifo("dev/initctl"),
			reg("usr/bin/ping", "ping").with(xattrs("security.capability", "\x01\x00\x00\x02")),
		)), mtGzip},
		{zst(t, mkTar(t,
			reg("etc/.wh.shadow", ""), reg("usr/lib/.wh..wh..opq", ""), reg("usr/lib/libc.so.6", "elf6"),
			reg("bin/sh", "#!dash").with(func(h *tar.Header) { h.Mode = 0o4755 }), dir("tmp").with(func(h *tar.Header) { h.Mode = 0o1777 }),
		)), mtZstd},
		{mkTar(t, reg("home/user/.profile", "export X").with(func(h *tar.Header) { h.Uid, h.Gid = 1000, 1000 })), mtTar},
	}
	out, _, err := flatten(t, writeLayers(t, layers...), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, out)
	var b strings.Builder
	for _, e := range readTar(t, out) {
		fmt.Fprintf(&b, "%c %04o %d:%d %d %s", e.h.Typeflag, e.h.Mode, e.h.Uid, e.h.Gid, e.h.ModTime.Unix(), e.h.Name)
		if e.h.Linkname != "" {
			fmt.Fprintf(&b, " -> %s", e.h.Linkname)
		}
		if e.h.Typeflag == tar.TypeChar {
			fmt.Fprintf(&b, " %d:%d", e.h.Devmajor, e.h.Devminor)
		}
		if e.h.Typeflag == tar.TypeReg {
			fmt.Fprintf(&b, " %q", e.body)
		}
		for k, v := range e.h.PAXRecords {
			if strings.HasPrefix(k, paxXattr) {
				fmt.Fprintf(&b, " %s=%q", k, v)
			}
		}
		b.WriteString("\n")
	}
	golden := filepath.Join("testdata", "golden.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if b.String() != string(want) {
		t.Fatalf("output differs from %s:\n%s", golden, b.String())
	}
}

// TestFlattenBigFileIsNoBomb: a compressed file larger than the metadata
// allowance is legitimate content, not a bomb.
func TestFlattenBigFileIsNoBomb(t *testing.T) {
	old := metaBase
	metaBase = 64 << 10
	defer func() { metaBase = old }()
	b := zeroFile(t, 4<<20)
	out, st, err := flatten(t, writeLayers(t, blob{gz(t, b), mtGzip}, blob{zst(t, b), mtZstd}), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if st.ContentBytes != 4<<20 || len(readTar(t, out)) != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Metadata beyond the (shrunk) allowance still trips the rule.
	_, _, err = flatten(t, writeLayers(t, blob{gz(t, globalHeaders(1)), mtGzip}), DefaultLimits())
	wantRule(t, err, RuleDecompressionBomb)
}
