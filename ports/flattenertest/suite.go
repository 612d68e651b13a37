package flattenertest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness makes flatteners for one adapter.
type Harness interface {
	// MakeFlattener returns a flattener with its default budgets.
	MakeFlattener(ctx context.Context) (ports.TreeFlattener, error)
	// Close releases what the harness holds.
	Close()
}

// LimitsHarness is implemented by harnesses whose flattener takes budgets;
// the budget cases of the corpus run only then.
type LimitsHarness interface {
	MakeLimitedFlattener(ctx context.Context, lim Limits) (ports.TreeFlattener, error)
}

// MaterializeHarness is implemented by harnesses that can write a
// flattened tree to a host directory the way a builder's staging does.
// Every tree the flattener accepts from the hostile corpus is then written
// beside the victim files, which must stay untouched. Each runs in its own
// subtest ("materialize/<form>"), which Materialize may skip through t
// when the host lacks what it needs (testenv.Root).
type MaterializeHarness interface {
	Materialize(ctx context.Context, t testing.TB, tree ports.Tree, dest string) error
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// RunConformanceTests runs the TreeFlattener suite: the hostile corpus
// (every case refused with its rule, or accepted and contained), the
// positive layer semantics, the output contract and determinism.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Hostile", testHostile},
		{"Semantics", testSemantics},
		{"Metadata", testMetadata},
		{"Stats", testStats},
		{"Deterministic", testDeterministic},
		{"Compression", testCompression},
		{"Empty", testEmpty},
		{"ErrorNamesLayerEntryRule", testErrorMessage},
		{"Canceled", testCanceled},
		{"Streamed", testStreamed},
		{"DiffID", testDiffID},
		{"Derived", testDerived},
		{"Entries", testEntries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := newHarness(context.Background(), t)
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			t.Cleanup(h.Close)
			tc.fn(t, h)
		})
	}
}

// WriteLayers writes blobs as layer files under t.TempDir().
func WriteLayers(t testing.TB, blobs ...Blob) []ports.FlattenLayer {
	t.Helper()
	d := t.TempDir()
	var out []ports.FlattenLayer
	for i, b := range blobs {
		p := filepath.Join(d, fmt.Sprintf("layer%03d", i))
		if err := os.WriteFile(p, b.Data, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, ports.FlattenLayer{Path: p, MediaType: b.MediaType, Digest: fmt.Sprintf("sha256:test%d", i)})
	}
	return out
}

// PlainLayers makes one uncompressed layer per entry list.
func PlainLayers(t testing.TB, layers ...[]Entry) []ports.FlattenLayer {
	t.Helper()
	var bs []Blob
	for _, l := range layers {
		bs = append(bs, Blob{Data: Tar(t, l...), MediaType: MediaTar})
	}
	return WriteLayers(t, bs...)
}

func flattener(t *testing.T, h Harness, lim Limits) ports.TreeFlattener {
	t.Helper()
	ctx := context.Background()
	if lim.IsZero() {
		f, err := h.MakeFlattener(ctx)
		if err != nil {
			t.Fatalf("MakeFlattener: %v", err)
		}
		return f
	}
	lh, ok := h.(LimitsHarness)
	if !ok {
		t.Skip("depends on budgets this harness cannot set")
	}
	f, err := lh.MakeLimitedFlattener(ctx, lim)
	if err != nil {
		t.Fatalf("MakeLimitedFlattener: %v", err)
	}
	return f
}

// flatten returns the tree f hands over as a tar stream (EntriesTar), so
// that the checks read it as any tar.
func flatten(t *testing.T, f ports.TreeFlattener, ls []ports.FlattenLayer) ([]byte, ports.TreeStats, error) {
	t.Helper()
	var out []byte
	st, err := f.Flatten(context.Background(), ls, func(tree ports.Tree) error {
		out = EntriesTar(t, tree)
		return nil
	})
	return out, st, err
}

func mustFlatten(t *testing.T, h Harness, layers ...[]Entry) []byte {
	t.Helper()
	out, _, err := flatten(t, flattener(t, h, Limits{}), PlainLayers(t, layers...))
	if err != nil {
		t.Fatalf("Flatten: %v", err)
	}
	CheckTree(t, out)
	return out
}

func testHostile(t *testing.T, h Harness) {
	cases := Cases()
	if len(cases) < 40 {
		t.Fatalf("corpus has %d cases, want at least 40", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			f := flattener(t, h, c.Limits)
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // scratch must not outlive Flatten
			v := NewVictim(t)
			forms := []string{MediaTar, MediaGzip, MediaZstd}
			if c.Blobs != nil {
				forms = forms[:1]
			}
			for _, form := range forms {
				out, _, err := flatten(t, f, WriteLayers(t, c.LayerBlobs(t, v, form)...))
				if left, _ := os.ReadDir(tmp); len(left) > 0 {
					t.Errorf("%s: scratch left in TMPDIR: %v", form, names(left))
				}
				v.Check(t)
				if c.Flatten != "" {
					t.Logf("%s: %v", form, err)
					WantRule(t, err, c.Flatten)
					continue
				}
				if err != nil {
					t.Fatalf("%s: refused: %v", form, err)
				}
				CheckTree(t, out)
				got := Describe(t, out)
				if c.Want != nil {
					for _, w := range c.Want(v) {
						if !slices.Contains(got, w) {
							t.Errorf("%s: output lacks %q; got\n  %s", form, w, strings.Join(got, "\n  "))
						}
					}
				}
				for _, g := range c.Gone {
					for _, l := range got {
						if l == g || strings.HasPrefix(l, g+" ") || strings.HasPrefix(l, g+"/") {
							t.Errorf("%s: output holds %q", form, l)
						}
					}
				}
				if m, ok := h.(MaterializeHarness); ok {
					t.Run("materialize/"+form, func(t *testing.T) {
						defer v.Reset(t)
						if err := m.Materialize(context.Background(), t, TarEntries(t, out, false), v.Root); err != nil {
							t.Fatalf("the flattened tree does not materialize: %v", err)
						}
						v.Check(t)
					})
				}
			}
		})
	}
}

func testSemantics(t *testing.T, h Harness) {
	for _, c := range Semantics() {
		t.Run(c.Name, func(t *testing.T) {
			got := Describe(t, mustFlatten(t, h, c.Layers...))
			if !slices.Equal(got, c.Want) {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.Want, "\n  "))
			}
		})
	}
}

func testMetadata(t *testing.T, h Harness) {
	capValue := "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	out := mustFlatten(t, h,
		[]Entry{
			Dir("d").With(func(h *tar.Header) { h.Mode = 0o1777; h.Uid = 7; h.Gid = 8 }),
			Reg("d/suid", "s").With(func(h *tar.Header) { h.Mode = 0o4755 }),
			Reg("sgid", "g").With(func(h *tar.Header) { h.Mode = 0o2711; h.Uid = 1000; h.Gid = 50 }),
			Reg("ping", "p").With(Xattrs("security.capability", capValue, "user.note", "hi")),
			Reg("typebits", "t").With(func(h *tar.Header) { h.Mode = 0o100640 }),
			Reg("bigid", "b").With(func(h *tar.Header) { h.Uid, h.Gid = 100000, 70000 }),
			Dev("null", tar.TypeChar, 1, 3),
			Dev("big", tar.TypeBlock, 300, 70000),
		},
		[]Entry{Dir("d").With(func(h *tar.Header) { h.Mode = 0o750; h.Uid = 9 })}, // later metadata wins
	)
	es := map[string]Entry{}
	for _, e := range ReadTar(t, out) {
		es[e.Header.Name] = e
	}
	check := func(name string, mode int64, uid, gid int) tar.Header {
		t.Helper()
		e, ok := es[name]
		if !ok {
			t.Fatalf("%s missing", name)
		}
		if e.Header.Mode != mode || e.Header.Uid != uid || e.Header.Gid != gid {
			t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", name, e.Header.Mode, e.Header.Uid, e.Header.Gid, mode, uid, gid)
		}
		if !e.Header.ModTime.Equal(FixedTime) {
			t.Errorf("%s: mtime %v, want %v", name, e.Header.ModTime, FixedTime)
		}
		return e.Header
	}
	check("d", 0o750, 9, 0)
	check("d/suid", 0o4755, 0, 0)
	check("sgid", 0o2711, 1000, 50)
	check("typebits", 0o640, 0, 0)
	check("bigid", 0o644, 100000, 70000)
	if p := check("ping", 0o644, 0, 0); p.PAXRecords["SCHILY.xattr.security.capability"] != capValue || p.PAXRecords["SCHILY.xattr.user.note"] != "hi" {
		t.Errorf("xattrs lost: %q", p.PAXRecords)
	}
	if n := check("null", 0o666, 0, 0); n.Devmajor != 1 || n.Devminor != 3 {
		t.Errorf("null: device %d:%d", n.Devmajor, n.Devminor)
	}
	if n := check("big", 0o666, 0, 0); n.Devmajor != 300 || n.Devminor != 70000 {
		t.Errorf("big: device %d:%d", n.Devmajor, n.Devminor)
	}
}

func testStats(t *testing.T, h Harness) {
	out, st, err := flatten(t, flattener(t, h, Limits{}), PlainLayers(t, []Entry{
		Dir("d"), Reg("d/a", "12345"), Hard("d/b", "d/a"), Sym("s", "d"), Fifo("p"), Dev("c", tar.TypeChar, 1, 1), Reg("x/y", "zz"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ReadTar(t, out)); st.Entries != n || st.Entries != 8 {
		t.Errorf("Entries %d, the tree holds %d (want 8)", st.Entries, n)
	}
	if st.ContentBytes != 7 {
		t.Errorf("ContentBytes %d, want 7 (a hard-linked file counts once)", st.ContentBytes)
	}
}

func testDeterministic(t *testing.T, h Harness) {
	a := []Entry{Dir("etc"), Reg("etc/b", "b"), Reg("etc/a", "a"), Reg("z", "z"), Hard("y", "z"), Reg("m/n", "n")}
	b := []Entry{Reg("m/n", "n"), Reg("z", "z"), Hard("y", "z"), Reg("etc/a", "a"), Dir("etc"), Reg("etc/b", "b")}
	a1, a2, b1 := mustFlatten(t, h, a), mustFlatten(t, h, a), mustFlatten(t, h, b)
	if !bytes.Equal(a1, a2) {
		t.Fatal("same input, different output")
	}
	if !slices.Equal(Describe(t, a1), Describe(t, b1)) {
		t.Fatalf("order-dependent output:\n%v\n%v", Describe(t, a1), Describe(t, b1))
	}
}

func testCompression(t *testing.T, h Harness) {
	f := flattener(t, h, Limits{})
	tarB := Tar(t, Reg("f", strings.Repeat("data", 1000)), Dir("d"))
	want := []string{"d 5", "f 0 =" + strings.Repeat("data", 1000)}
	for i, b := range []Blob{
		{tarB, MediaTar}, {tarB, ""}, {tarB, "application/vnd.docker.image.rootfs.diff.tar"},
		{Gzip(t, tarB), MediaGzip}, {Gzip(t, tarB), ""}, {Gzip(t, tarB), "application/vnd.docker.image.rootfs.diff.tar.gzip"},
		{Gzip(t, tarB), "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"},
		{Zstd(t, tarB), MediaZstd}, {Zstd(t, tarB), ""},
		{append(Gzip(t, tarB[:512*3]), Gzip(t, tarB[512*3:])...), MediaGzip},    // multi-member gzip
		{append(bytes.Repeat(Gzip(t, nil), 5000), Gzip(t, tarB)...), MediaGzip}, // thousands of empty members (CVE-2022-30631 shape)
		{append(Gzip(t, tarB), "trailing garbage"...), MediaGzip},               // never read: the tar ends first
	} {
		out, _, err := flatten(t, f, WriteLayers(t, b))
		if err != nil {
			t.Fatalf("blob %d (%q): %v", i, b.MediaType, err)
		}
		if got := Describe(t, out); !slices.Equal(got, want) {
			t.Fatalf("blob %d (%q): %v", i, b.MediaType, got)
		}
	}
	// Sparse files come out expanded.
	sp := append(SparseFile("s", 11, int64(10), "X"), EndOfArchive()...)
	for _, b := range []Blob{{sp, MediaTar}, {Gzip(t, sp), MediaGzip}} {
		out, _, err := flatten(t, f, WriteLayers(t, b))
		if err != nil {
			t.Fatal(err)
		}
		if got := Describe(t, out); !slices.Equal(got, []string{"s 0 =" + string(make([]byte, 10)) + "X"}) {
			t.Fatalf("sparse: %q", got)
		}
	}
}

func testEmpty(t *testing.T, h Harness) {
	f := flattener(t, h, Limits{})
	for i, ls := range [][]ports.FlattenLayer{nil, WriteLayers(t, Blob{nil, ""}), WriteLayers(t, Blob{EndOfArchive(), MediaTar})} {
		out, st, err := flatten(t, f, ls)
		if err != nil || st.Entries != 0 || len(ReadTar(t, out)) != 0 {
			t.Fatalf("input %d: %v %+v", i, err, st)
		}
	}
}

func testErrorMessage(t *testing.T, h Harness) {
	f := flattener(t, h, Limits{})
	ls := PlainLayers(t, []Entry{Reg("ok", "x")}, []Entry{Reg("../evil", "x")})
	_, _, err := flatten(t, f, ls)
	WantRule(t, err, RulePathTraversal)
	for _, want := range []string{"layer 1", ls[1].Digest, `"../evil"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	// The lowest bad layer is reported even when several are bad.
	ls = PlainLayers(t, []Entry{Reg("ok", "x")}, []Entry{Reg("/../a", "")}, []Entry{Reg("", "")})
	for range 5 {
		if _, _, err := flatten(t, f, ls); err == nil || !strings.Contains(err.Error(), "layer 1") {
			t.Fatalf("got %v, want layer 1 named", err)
		}
	}
	// A missing file is an I/O error, not a refusal.
	_, _, err = flatten(t, f, []ports.FlattenLayer{{Path: filepath.Join(t.TempDir(), "nope")}})
	if err == nil || errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("missing layer file: %v", err)
	}
	// The consumer's error comes back as it is.
	full := errors.New("disk full")
	if _, err := f.Flatten(context.Background(), PlainLayers(t, []Entry{Reg("a", "a")}), func(ports.Tree) error { return full }); err != full {
		t.Fatalf("failing consumer: got %v, want its error as is", err)
	}
}

func testCanceled(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := flattener(t, h, Limits{})
	if _, err := f.Flatten(ctx, PlainLayers(t, []Entry{Reg("a", "a")}), func(ports.Tree) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
