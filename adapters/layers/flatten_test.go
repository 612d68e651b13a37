package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// The layer semantics, the hostile corpus and the output contract are the
// port's suite (flattener_test.go); these tests pin what is particular to
// this adapter: time clamping, Stats, RejectError fields, the golden bytes
// and the decompression allowance.

func TestFlattenClampsTimes(t *testing.T) {
	es := flattenertest.ReadTar(t, mustFlatten(t, []ent{
		reg("future", "f").With(func(h *tar.Header) { h.ModTime = h.ModTime.AddDate(3000, 0, 0) }),
		reg("past", "p").With(func(h *tar.Header) { h.ModTime = h.ModTime.AddDate(-100, 0, 0) }),
	}))
	if e := find(es, "future"); e == nil || e.Header.ModTime.Unix() != maxMtime {
		t.Errorf("future mtime not clamped: %+v", e)
	}
	if e := find(es, "past"); e == nil || e.Header.ModTime.Unix() != 0 {
		t.Errorf("pre-epoch mtime not clamped: %+v", e)
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

func TestFlattenErrors(t *testing.T) {
	layers := plainLayers(t, []ent{reg("ok", "x")}, []ent{reg("../evil", "x")})
	_, _, err := flatten(t, layers, DefaultLimits())
	var re *RejectError
	if !errors.As(err, &re) || re.Layer != 1 || re.Digest != "sha256:test1" || re.Entry != "../evil" || re.Rule != RulePathTraversal {
		t.Fatalf("got %#v", err)
	}
	if !errors.Is(err, core.ErrInvalidArgument) || !errors.Is(err, ErrRejected) {
		t.Fatal("RejectError must match ErrRejected and core.ErrInvalidArgument")
	}
	if got := flattenertest.RuleOf(err); got != RulePathTraversal {
		t.Fatalf("RuleOf(%q) = %q", err, got)
	}
}

// TestRuleNamesMatchThePort: the rule names are the port's vocabulary.
func TestRuleNamesMatchThePort(t *testing.T) {
	for ours, port := range map[string]string{
		RuleNulInName: flattenertest.RuleNulInName, RuleEmptyName: flattenertest.RuleEmptyName,
		RulePathTraversal: flattenertest.RulePathTraversal, RuleNameTooLong: flattenertest.RuleNameTooLong,
		RulePathTooLong: flattenertest.RulePathTooLong, RulePathTooDeep: flattenertest.RulePathTooDeep,
		RuleUnsupportedType: flattenertest.RuleUnsupportedType, RuleBadOwner: flattenertest.RuleBadOwner,
		RuleBadMode: flattenertest.RuleBadMode, RuleBadDevice: flattenertest.RuleBadDevice,
		RuleFileTooLarge: flattenertest.RuleFileTooLarge, RuleLayerTooLarge: flattenertest.RuleLayerTooLarge,
		RuleImageTooLarge: flattenertest.RuleImageTooLarge, RuleTooManyEntries: flattenertest.RuleTooManyEntries,
		RuleDecompressionBomb: flattenertest.RuleDecompressionBomb, RuleXattrTooLarge: flattenertest.RuleXattrTooLarge,
		RuleXattrForbidden: flattenertest.RuleXattrForbidden, RuleSymlinkTarget: flattenertest.RuleSymlinkTarget,
		RuleParentSymlink: flattenertest.RuleParentSymlink, RuleParentNotDir: flattenertest.RuleParentNotDir,
		RuleRootNotDir: flattenertest.RuleRootNotDir, RuleHardlinkEscape: flattenertest.RuleHardlinkEscape,
		RuleHardlinkMissing: flattenertest.RuleHardlinkMissing, RuleHardlinkDir: flattenertest.RuleHardlinkDir,
		RuleHardlinkNotRegular: flattenertest.RuleHardlinkNotRegular, RuleHardlinkSelf: flattenertest.RuleHardlinkSelf,
		RuleWhiteoutInvalid: flattenertest.RuleWhiteoutInvalid, RuleWhiteoutInPath: flattenertest.RuleWhiteoutInPath,
		RuleWhiteoutInTree: flattenertest.RuleWhiteoutInTree, RuleDuplicateEntry: flattenertest.RuleDuplicateEntry,
		RuleAbsoluteName: flattenertest.RuleAbsoluteName, RuleUncleanName: flattenertest.RuleUncleanName,
		RuleCorruptArchive: flattenertest.RuleCorruptArchive, RuleMediaType: flattenertest.RuleMediaType,
		RuleMediaTypeMismatch: flattenertest.RuleMediaTypeMismatch, RuleZstdWindow: flattenertest.RuleZstdWindow,
	} {
		if ours != port {
			t.Errorf("rule %q is %q in the port's vocabulary", ours, port)
		}
	}
}

// TestFlattenGolden pins the output of a small multi-layer image byte for
// byte (run with -update to rewrite testdata/golden.txt).
func TestFlattenGolden(t *testing.T) {
	layers := []blob{
		{Data: gz(t, mkTar(t,
			dir("bin"), reg("bin/sh", "#!sh"), hard("bin/bash", "bin/sh"), dir("etc"), reg("etc/passwd", "root:x:0:0"),
			reg("etc/shadow", "secret").With(func(h *tar.Header) { h.Mode = 0o600 }), dir("var"), sym("var/run", "/run"),
			dir("usr/lib"), reg("usr/lib/libc.so", "elf"), dev("dev/null", tar.TypeChar, 1, 3), fifo("dev/initctl"),
			reg("usr/bin/ping", "ping").With(xattrs("security.capability", "\x01\x00\x00\x02")),
		)), MediaType: mtGzip},
		{Data: zst(t, mkTar(t,
			reg("etc/.wh.shadow", ""), reg("usr/lib/.wh..wh..opq", ""), reg("usr/lib/libc.so.6", "elf6"),
			reg("bin/sh", "#!dash").With(func(h *tar.Header) { h.Mode = 0o4755 }), dir("tmp").With(func(h *tar.Header) { h.Mode = 0o1777 }),
		)), MediaType: mtZstd},
		{Data: mkTar(t, reg("home/user/.profile", "export X").With(func(h *tar.Header) { h.Uid, h.Gid = 1000, 1000 }),
			reg("var/run/app.pid", "42")), MediaType: mtTar}, // resolved through var/run -> /run
	}
	out, _, err := flatten(t, writeLayers(t, layers...), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	flattenertest.CheckTree(t, out)
	var b strings.Builder
	for _, e := range flattenertest.ReadTar(t, out) {
		h := e.Header
		fmt.Fprintf(&b, "%c %04o %d:%d %d %s", h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime.Unix(), h.Name)
		if h.Linkname != "" {
			fmt.Fprintf(&b, " -> %s", h.Linkname)
		}
		if h.Typeflag == tar.TypeChar {
			fmt.Fprintf(&b, " %d:%d", h.Devmajor, h.Devminor)
		}
		if h.Typeflag == tar.TypeReg {
			fmt.Fprintf(&b, " %q", e.Body)
		}
		for k, v := range h.PAXRecords {
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
	b := zeroTar(t, 4<<20)
	out, st, err := flatten(t, writeLayers(t, blob{Data: gz(t, b), MediaType: mtGzip}, blob{Data: zst(t, b), MediaType: mtZstd}), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if st.ContentBytes != 4<<20 || len(flattenertest.ReadTar(t, out)) != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Metadata beyond the (shrunk) allowance still trips the rule.
	_, _, err = flatten(t, writeLayers(t, blob{Data: gz(t, flattenertest.GlobalHeaders(1)), MediaType: mtGzip}), DefaultLimits())
	wantRule(t, err, RuleDecompressionBomb)
}

func zeroTar(t testing.TB, n int) []byte {
	return mkTar(t, ent{Header: tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Size: int64(n), Mode: 0o644}, Body: make([]byte, n)})
}

// TestXattrNameControlChars: an xattr name with a control character is
// refused, by Flatten and by Extract, naming the entry and the xattr. A
// builder that scripts debugfs would otherwise run what follows a newline
// as a command.
func TestXattrNameControlChars(t *testing.T) {
	inject := "\ndump -p /payload /tmp/x\n"
	for _, c := range []struct {
		name  string
		entry ent
		xattr string
	}{
		{"newline on a file", reg("etc/f", "x").With(xattrs("user.a", "1", "user.x"+inject, "v")), "user.x" + inject},
		{"newline on a device", dev("dev/null", tar.TypeChar, 1, 3).With(xattrs("security.x"+inject, "v")), "security.x" + inject},
		{"carriage return", dir("d").With(xattrs("trusted.x\rrm", "v")), "trusted.x\rrm"},
		{"tab", reg("f", "x").With(xattrs("user.a\tb", "v")), "user.a\tb"},
		{"DEL", reg("f", "x").With(xattrs("security.a\x7f", "v")), "security.a\x7f"},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := func(err error) {
				t.Helper()
				wantRule(t, err, RuleXattrForbidden)
				var re *RejectError
				errors.As(err, &re)
				if re.Entry != c.entry.Header.Name || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.xattr)) {
					t.Errorf("error %q should name entry %q and xattr %q", err, c.entry.Header.Name, c.xattr)
				}
			}
			_, _, err := flatten(t, plainLayers(t, []ent{c.entry}), DefaultLimits())
			check(err)
			if os.Geteuid() == 0 {
				_, err := extractTar(context.Background(), bytes.NewReader(mkTar(t, c.entry)), t.TempDir(), ExtractOptions{SkipDevices: true})
				check(err)
			}
		})
	}
}

// TestFlattenDiffIDAlgorithms: a diff_id is checked with its own
// algorithm (the registry accepts sha256 and sha512), on a decode and on
// a layer kept in the derived cache; another algorithm is refused by name.
func TestFlattenDiffIDAlgorithms(t *testing.T) {
	tarB := mkTar(t, dir("d"), reg("d/f", strings.Repeat("x", 10000)))
	sum256, sum512 := sha256.Sum256(tarB), sha512.Sum512(tarB)
	id256, id512 := "sha256:"+hex.EncodeToString(sum256[:]), "sha512:"+hex.EncodeToString(sum512[:])
	plainB, gzB := blob{Data: tarB, MediaType: mtTar}, blob{Data: gz(t, tarB), MediaType: mtGzip}
	cases := []struct {
		name  string
		blob  blob
		ids   []string // flattened in turn, over one derived cache when cache is set
		cache bool
		want  error // for the last id; nil means it flattens
	}{
		{"sha256", plainB, []string{id256}, false, nil},
		{"sha512", plainB, []string{id512}, false, nil},
		{"sha512 gzip", gzB, []string{id512}, false, nil},
		{"sha512 kept and loaded", gzB, []string{id512, id512}, true, nil},
		{"kept as sha512, asked as sha256", gzB, []string{id512, id256}, true, nil},
		{"wrong sha512", plainB, []string{"sha512:" + strings.Repeat("0", 128)}, false, ports.ErrDiffIDMismatch},
		{"wrong sha512 over a kept layer", gzB, []string{id512, "sha512:" + strings.Repeat("0", 128)}, true, ports.ErrDiffIDMismatch},
		{"sha384", plainB, []string{"sha384:" + strings.Repeat("0", 96)}, false, core.ErrUnsupported},
		{"no algorithm", plainB, []string{hex.EncodeToString(sum256[:])}, false, core.ErrUnsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := writeLayers(t, c.blob)
			if c.cache {
				ls[0].Derived = &flattenertest.DirCache{Dir: t.TempDir()}
			}
			var err error
			for i, id := range c.ids {
				ls[0].DiffID = id
				_, _, err = flatten(t, ls, DefaultLimits())
				if i < len(c.ids)-1 && err != nil {
					t.Fatalf("flatten %d with %s: %v", i, id, err)
				}
			}
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("flatten: %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("flatten = %v, want %v", err, c.want)
			case errors.Is(c.want, core.ErrUnsupported) && !strings.Contains(err.Error(), "diff_id"):
				t.Fatalf("error %q does not name the diff_id", err)
			}
		})
	}
}
