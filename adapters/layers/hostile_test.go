package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostileCase is one entry of the hostile corpus (security reference §6a).
// Each runs through Flatten (plain, gzip and zstd variants of its layers)
// and, fed straight to Extract as one stream, through Extract; both must
// refuse it with the named rule and leave everything outside the root as it
// was.
type hostileCase struct {
	name string
	// layers are entry lists, one per layer; or blobs gives raw layer bytes.
	layers func(v *victim) [][]ent
	blobs  func(t testing.TB, v *victim) []blob
	// stream is what Extract is handed; by default the entries of all
	// layers concatenated.
	stream  func(t testing.TB, v *victim) []byte
	lim     Limits
	flatten string // expected Flatten rule
	// extract is the expected Extract rule; "" when the attack lives in the
	// compression layer, which Extract (taking an uncompressed tree) never sees.
	extract string
}

func one(es ...ent) func(*victim) [][]ent {
	return func(*victim) [][]ent { return [][]ent{es} }
}

func deepName(n int) string {
	return strings.Repeat("d/", n-1) + "f"
}

func hostileCases() []hostileCase {
	small := Limits{MaxEntries: 100, MaxTotalBytes: 1 << 20, MaxFileBytes: 1 << 20}
	return []hostileCase{
		// Names and paths.
		{name: "dotdot-file", layers: one(reg("../evil", "x")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "bare-dotdot", layers: one(dir("..")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "double-dotdot", layers: one(reg("../../pwned", "x")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "overwrite-victim", layers: func(v *victim) [][]ent { return [][]ent{{reg(v.up(v.dir)+"/hello", "pwned")}} },
			flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "slash-dotdot", layers: one(reg("/../victim/hello", "pwned")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "inner-dotdot-escape", layers: one(reg("a/../../b", "x")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "inner-dotdot-local", layers: one(reg("a/../b", "x")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "sibling-prefix-file", layers: one(reg("../dest-evil/secret", "pwned")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "empty-name", layers: one(reg("", "x")), flatten: RuleEmptyName, extract: RuleEmptyName},
		{name: "nul-in-pax-path", blobs: func(t testing.TB, v *victim) []blob {
			// archive/tar refuses the record itself (validPAXRecord): the
			// layer is corrupt before a name reaches us.
			b := append(rawPAXEntry("x", tar.TypeReg, []byte("x"), "path", "ok\x00/../../evil"), endOfArchive()...)
			return []blob{{data: b, mediaType: mtTar}}
		}, stream: func(t testing.TB, v *victim) []byte {
			return append(rawPAXEntry("x", tar.TypeReg, []byte("x"), "path", "ok\x00/../../evil"), endOfArchive()...)
		}, flatten: RuleCorruptArchive, extract: RuleCorruptArchive},
		{name: "long-component", layers: one(reg(strings.Repeat("n", 256), "x")), flatten: RuleNameTooLong, extract: RuleNameTooLong},
		{name: "long-path", layers: one(reg(strings.Repeat(strings.Repeat("p", 200)+"/", 21)+"f", "x")), flatten: RulePathTooLong, extract: RulePathTooLong},
		{name: "deep-path", layers: one(reg(deepName(129), "x")), flatten: RulePathTooDeep, extract: RulePathTooDeep},
		{name: "deep-nesting-5000", layers: one(reg(deepName(5000), "x")), flatten: RulePathTooLong, extract: RulePathTooLong},
		{name: "root-as-symlink", layers: one(sym("/", "/tmp")), flatten: RuleRootNotDir, extract: RuleRootNotDir},
		{name: "dot-as-file", layers: one(reg(".", "x")), flatten: RuleRootNotDir, extract: RuleRootNotDir},

		// Symlinks: any target may be stored, none may be written through.
		{name: "symlink-write-through-same-layer", layers: func(v *victim) [][]ent {
			return [][]ent{{sym("etc", v.dir), reg("etc/hello", "pwned")}}
		}, flatten: RuleParentSymlink, extract: RuleParentSymlink},
		{name: "symlink-write-through-across-layers", layers: func(v *victim) [][]ent {
			return [][]ent{{sym("etc", v.dir)}, {reg("etc/hello", "pwned")}}
		}, flatten: RuleParentSymlink, extract: RuleParentSymlink},
		{name: "symlink-relative-up-and-out", layers: func(v *victim) [][]ent {
			return [][]ent{{sym("up", "../../../../../../../../.."+v.dir)}, {reg("up/hello", "pwned")}}
		}, flatten: RuleParentSymlink, extract: RuleParentSymlink},
		{name: "symlink-chain-two-hops", layers: func(v *victim) [][]ent {
			return [][]ent{{dir("inner"), sym("inner/go_up", ".."), sym("inner/go_up/escape", "../victim"), reg("inner/go_up/escape/newfile", "pwned")}}
		}, flatten: RuleParentSymlink, extract: RuleParentSymlink},
		{name: "symlink-override-path", layers: func(v *victim) [][]ent {
			// containerd SymlinkOverridePath: dir, then "foo -> /", then a
			// write below it aimed at the host /tmp.
			return [][]ent{{dir("foo"), reg("foo/f", "x"), sym("foo", "/"), reg("foo/tmp/"+v.hostTmp, "pwned"), dir("foo")}}
		}, flatten: RuleParentSymlink, extract: RuleDuplicateEntry},
		{name: "symlink-override-path-across-layers", layers: func(v *victim) [][]ent {
			return [][]ent{{dir("foo"), reg("foo/f", "x")}, {sym("foo", "/")}, {reg("foo/tmp/"+v.hostTmp, "pwned")}}
		}, flatten: RuleParentSymlink, extract: RuleDuplicateEntry},
		{name: "symlink-named-dotdot", layers: one(sym("..", "/")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "symlink-loop-write", layers: one(sym("a", "b"), sym("b", "a"), reg("a/x", "x")), flatten: RuleParentSymlink, extract: RuleParentSymlink},
		{name: "relative-escape-before-absolute", layers: func(v *victim) [][]ent {
			return [][]ent{{sym("escape", ".."), sym("absolute", v.dir), reg("escape/absolute/hello", "pwned")}}
		}, flatten: RuleParentSymlink, extract: RuleParentSymlink},
		{name: "absolute-symlink-deep-write", layers: func(v *victim) [][]ent {
			return [][]ent{{dir("var"), sym("var/run", v.dir)}, {reg("var/run/sub/deep", "pwned")}}
		}, flatten: RuleParentSymlink, extract: RuleParentSymlink},
		{name: "symlink-target-too-long", layers: one(sym("l", strings.Repeat("t", 4096))), flatten: RuleSymlinkTarget, extract: RuleSymlinkTarget},
		{name: "symlink-empty-target", layers: one(sym("l", "")), flatten: RuleSymlinkTarget, extract: RuleSymlinkTarget},
		{name: "write-below-file-same-layer", layers: one(reg("f", "x"), reg("f/x", "y")), flatten: RuleParentNotDir, extract: RuleParentNotDir},
		{name: "write-below-file-across-layers", layers: func(*victim) [][]ent { return [][]ent{{reg("f", "x")}, {reg("f/x", "y")}} },
			flatten: RuleParentNotDir, extract: RuleParentNotDir},

		// Hard links.
		{name: "hardlink-relative-out", layers: func(v *victim) [][]ent {
			return [][]ent{{hard("lnk", v.up(v.dir)+"/hello")}}
		}, flatten: RuleHardlinkEscape, extract: RuleHardlinkEscape},
		{name: "hardlink-absolute-host-path", layers: func(v *victim) [][]ent {
			// An absolute target means the image root: root/<victim path>/hello does not exist.
			return [][]ent{{hard("lnk", filepath.Join(v.dir, "hello"))}}
		}, flatten: RuleHardlinkMissing, extract: RuleHardlinkMissing},
		{name: "hardlink-sibling-prefix", layers: one(hard("lnk", "../dest-evil/secret")), flatten: RuleHardlinkEscape, extract: RuleHardlinkEscape},
		{name: "hardlink-through-symlink-parent", layers: func(v *victim) [][]ent {
			return [][]ent{{sym("d1", v.dir), hard("lnk", "d1/hello")}}
		}, flatten: RuleHardlinkMissing, extract: RuleHardlinkMissing},
		{name: "hardlink-to-symlink-then-chmod", layers: func(v *victim) [][]ent {
			// CVE-2021-32760 shape: a hard link to a symlink to a host
			// file, carrying mode 0777 and another owner.
			return [][]ent{{sym("sl", filepath.Join(v.dir, "hello")), hard("hl", "sl").with(func(h *tar.Header) { h.Mode = 0o777; h.Uid = 1234 })}}
		}, flatten: RuleHardlinkNotRegular, extract: RuleHardlinkNotRegular},
		{name: "hardlink-to-directory", layers: one(dir("d"), hard("hl", "d")), flatten: RuleHardlinkDir, extract: RuleHardlinkDir},
		{name: "hardlink-to-root", layers: one(hard("hl", "/")), flatten: RuleHardlinkDir, extract: RuleHardlinkDir},
		{name: "hardlink-missing", layers: one(hard("hl", "nothing")), flatten: RuleHardlinkMissing, extract: RuleHardlinkMissing},
		{name: "hardlink-forward-reference", layers: one(hard("hl", "later"), reg("later", "x")), flatten: RuleHardlinkMissing, extract: RuleHardlinkMissing},
		{name: "hardlink-self", layers: one(reg("a", "x"), hard("a", "a")), flatten: RuleHardlinkSelf, extract: RuleHardlinkSelf},
		{name: "hardlink-to-device", layers: one(dev("null", tar.TypeChar, 1, 3), hard("hl", "null")), flatten: RuleHardlinkNotRegular, extract: RuleHardlinkNotRegular},
		{name: "hardlink-loophole-then-file", layers: func(v *victim) [][]ent {
			return [][]ent{{hard("loophole-victim", v.up(v.dir)+"/hello"), reg("loophole-victim", "pwned")}}
		}, flatten: RuleHardlinkEscape, extract: RuleHardlinkEscape},

		// Whiteouts.
		{name: "whiteout-root", layers: one(reg(".wh..", "")), flatten: RuleWhiteoutInvalid, extract: RuleWhiteoutInvalid},
		{name: "whiteout-root-parent", layers: one(reg(".wh...", "")), flatten: RuleWhiteoutInvalid, extract: RuleWhiteoutInvalid},
		{name: "whiteout-parent", layers: one(dir("etc"), reg("etc/.wh...", "")), flatten: RuleWhiteoutInvalid, extract: RuleWhiteoutInvalid},
		{name: "whiteout-current-dir", layers: one(dir("etc"), reg("etc/.wh..", "")), flatten: RuleWhiteoutInvalid, extract: RuleWhiteoutInvalid},
		{name: "whiteout-empty", layers: one(reg(".wh.", "")), flatten: RuleWhiteoutInvalid, extract: RuleWhiteoutInvalid},
		{name: "whiteout-escape-dotdot", layers: one(reg("../.wh.victim", "")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "whiteout-relative-path", layers: one(reg("dne/../.wh.etc", "")), flatten: RulePathTraversal, extract: RulePathTraversal},
		{name: "whiteout-of-whiteout", layers: one(reg(".wh..wh.foo", "")), flatten: RuleWhiteoutInvalid, extract: RuleWhiteoutInvalid},
		{name: "whiteout-dir-component", layers: one(dir(".wh.etc"), reg(".wh.etc/somefile", "x")), flatten: RuleWhiteoutInPath, extract: RuleWhiteoutInTree},
		{name: "whiteout-through-symlink", layers: func(v *victim) [][]ent {
			return [][]ent{{sym("localetc", v.dir)}, {reg("localetc/.wh.hello", "")}}
		}, flatten: RuleParentSymlink, extract: RuleWhiteoutInTree},
		{name: "opaque-through-symlink", layers: func(v *victim) [][]ent {
			return [][]ent{{sym("l", v.dir)}, {reg("l/.wh..wh..opq", "")}}
		}, flatten: RuleParentSymlink, extract: RuleWhiteoutInTree},
		{name: "opaque-below-file", layers: one(reg("f", "x"), reg("f/.wh..wh..opq", "")), flatten: RuleParentNotDir, extract: RuleWhiteoutInTree},

		// Metadata.
		{name: "xattr-overlay-opaque", layers: one(dir("d").with(xattrs("trusted.overlay.opaque", "y"))), flatten: RuleXattrForbidden, extract: RuleXattrForbidden},
		{name: "xattr-user-overlay", layers: one(dir("d").with(xattrs("user.overlay.redirect", "/x"))), flatten: RuleXattrForbidden, extract: RuleXattrForbidden},
		{name: "xattr-unknown-namespace", layers: one(reg("f", "x").with(xattrs("weird.attr", "v"))), flatten: RuleXattrForbidden, extract: RuleXattrForbidden},
		{name: "xattr-user-on-symlink", layers: one(sym("s", "t").with(xattrs("user.x", "v"))), flatten: RuleXattrForbidden, extract: RuleXattrForbidden},
		{name: "xattr-value-too-large", layers: one(reg("f", "x").with(xattrs("user.big", strings.Repeat("v", 70000)))), flatten: RuleXattrTooLarge, extract: RuleXattrTooLarge},
		{name: "xattr-budget", layers: one(reg("f", "x").with(xattrs("user.a", strings.Repeat("v", 40000), "user.b", strings.Repeat("v", 40000)))), flatten: RuleXattrTooLarge, extract: RuleXattrTooLarge},
		{name: "device-number-range", layers: one(dev("d", tar.TypeBlock, 5000, 0)), flatten: RuleBadDevice, extract: RuleBadDevice},
		{name: "uid-negative", layers: one(reg("f", "x").with(func(h *tar.Header) { h.Uid = -1 })), flatten: RuleBadOwner, extract: RuleBadOwner},
		{name: "gid-too-large", layers: one(reg("f", "x").with(func(h *tar.Header) { h.Gid = 1 << 32 })), flatten: RuleBadOwner, extract: RuleBadOwner},
		{name: "type-contiguous", layers: one(reg("f", "x").with(func(h *tar.Header) { h.Typeflag = tar.TypeCont })), flatten: RuleUnsupportedType, extract: RuleUnsupportedType},
		{name: "type-volume", layers: one(ent{h: tar.Header{Typeflag: 'V', Name: "vol"}}), flatten: RuleUnsupportedType, extract: RuleUnsupportedType},
		{name: "type-unknown", layers: one(ent{h: tar.Header{Typeflag: 'Z', Name: "z"}}), flatten: RuleUnsupportedType, extract: RuleUnsupportedType},
		{name: "truncated-entry", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: truncated(t), mediaType: mtTar}}
		}, stream: func(t testing.TB, v *victim) []byte { return truncated(t) }, flatten: RuleCorruptArchive, extract: RuleCorruptArchive},

		// Sizes and bombs.
		{name: "sparse-bomb-4GiB", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: gz(t, sparseBomb()), mediaType: mtGzip}}
		}, stream: func(t testing.TB, v *victim) []byte { return sparseBomb() }, flatten: RuleFileTooLarge, extract: RuleFileTooLarge},
		{name: "sparse-bomb-under-file-limit", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: gz(t, sparseBomb()), mediaType: mtGzip}}
		}, stream: func(t testing.TB, v *victim) []byte { return sparseBomb() },
			lim: Limits{MaxFileBytes: 8 << 30, MaxTotalBytes: 1 << 30}, flatten: RuleLayerTooLarge, extract: RuleImageTooLarge},
		{name: "gzip-bomb-declared-size", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: gz(t, zeroFile(t, 16<<20)), mediaType: mtGzip}}
		}, stream: func(t testing.TB, v *victim) []byte { return zeroFile(t, 16<<20) }, lim: small, flatten: RuleFileTooLarge, extract: RuleFileTooLarge},
		{name: "many-files-over-layer-budget", layers: func(*victim) [][]ent {
			var es []ent
			for i := range 40 {
				es = append(es, reg("f"+itoa(i), strings.Repeat("z", 32<<10)))
			}
			return [][]ent{es}
		}, lim: small, flatten: RuleLayerTooLarge, extract: RuleImageTooLarge},
		{name: "image-over-budget-across-layers", layers: func(*victim) [][]ent {
			return [][]ent{{reg("a", strings.Repeat("z", 700<<10))}, {reg("b", strings.Repeat("z", 700<<10))}}
		}, lim: small, flatten: RuleImageTooLarge, extract: RuleImageTooLarge},
		{name: "entry-count-bomb", layers: func(*victim) [][]ent {
			var es []ent
			for i := range 150 {
				es = append(es, dir("d"+itoa(i)))
			}
			return [][]ent{es}
		}, lim: small, flatten: RuleTooManyEntries, extract: RuleTooManyEntries},
		{name: "implied-dir-bomb", layers: func(*victim) [][]ent {
			var es []ent
			for i := range 20 {
				es = append(es, reg("x"+itoa(i)+"/a/b/c/d/e/f", ""))
			}
			return [][]ent{es}
		}, lim: small, flatten: RuleTooManyEntries, extract: RuleTooManyEntries},
		{name: "pax-global-header-flood", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: gz(t, globalHeaders(70)), mediaType: mtGzip}}
		}, flatten: RuleDecompressionBomb},
		{name: "zstd-huge-window", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: zstdWindowFrame(mkTar(t, reg("f", "x")), 31), mediaType: mtZstd}}
		}, flatten: RuleZstdWindow},
		{name: "media-type-lies-gzip", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: mkTar(t, reg("f", "x")), mediaType: mtGzip}}
		}, flatten: RuleMediaTypeMismatch},
		{name: "media-type-lies-plain", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: gz(t, mkTar(t, reg("f", "x"))), mediaType: mtTar}}
		}, flatten: RuleMediaTypeMismatch},
		{name: "media-type-bzip2", blobs: func(t testing.TB, v *victim) []blob {
			return []blob{{data: mkTar(t, reg("f", "x")), mediaType: "application/vnd.oci.image.layer.v1.tar+bzip2"}}
		}, flatten: RuleMediaType},
		{name: "gzip-truncated", blobs: func(t testing.TB, v *victim) []blob {
			b := gz(t, mkTar(t, reg("f", strings.Repeat("abc", 10000))))
			return []blob{{data: b[:len(b)/2], mediaType: mtGzip}}
		}, flatten: RuleCorruptArchive},
	}
}

// zstdWindowFrame is a hand-made zstd frame declaring a 2^windowLog window
// and holding data in one raw block (encoders pick small windows for small
// inputs, so the header is written directly).
func zstdWindowFrame(data []byte, windowLog int) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	h := len(data)<<3 | 1 // raw block, last
	out = append(out, byte(h), byte(h>>8), byte(h>>16))
	return append(out, data...)
}

func truncated(t testing.TB) []byte {
	b := mkTar(t, reg("f", strings.Repeat("x", 2000)))
	return b[:512+100]
}

// zeroFile is a tar with one file of n zero bytes.
func zeroFile(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Size: int64(n), Mode: 0o644})
	tw.Write(make([]byte, n))
	tw.Close()
	return buf.Bytes()
}

// globalHeaders is n PAX global headers of almost 1 MiB each.
func globalHeaders(n int) []byte {
	rec := paxRecords("comment", strings.Repeat("c", 1<<20-64))
	var out []byte
	for range n {
		out = append(out, rawHeader("pax_global_header", tar.TypeXGlobalHeader, int64(len(rec)))...)
		out = append(out, pad(rec)...)
	}
	return append(out, endOfArchive()...)
}

func TestHostileCorpus(t *testing.T) {
	cases := hostileCases()
	if len(cases) < 40 {
		t.Fatalf("corpus has %d cases, want at least 40", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // spools must not outlive Flatten
			v := newVictim(t)

			for _, variant := range hostileVariants(t, tc, v) {
				var out bytes.Buffer
				_, err := Flatten(context.Background(), variant.layers, &out, tc.lim)
				if err == nil {
					t.Fatalf("Flatten(%s) accepted the corpus case", variant.name)
				}
				t.Logf("Flatten(%s): %v", variant.name, err)
				wantRule(t, err, tc.flatten)
				if left, _ := os.ReadDir(tmp); len(left) > 0 {
					t.Errorf("spool files left in TMPDIR: %v", left)
				}
			}
			v.check(t)

			if tc.extract == "" {
				return
			}
			if !isRoot() {
				t.Log("Extract half skipped: needs root")
				return
			}
			stream := hostileStream(t, tc, v)
			_, err := Extract(context.Background(), bytes.NewReader(stream), v.root, ExtractOptions{SkipDevices: true, Limits: tc.lim})
			if err == nil {
				t.Fatal("Extract accepted the corpus case")
			}
			t.Logf("Extract: %v", err)
			wantRule(t, err, tc.extract)
			v.check(t)
		})
	}
}

type variant struct {
	name   string
	layers []Layer
}

func hostileVariants(t *testing.T, tc hostileCase, v *victim) []variant {
	if tc.blobs != nil {
		return []variant{{"blobs", writeLayers(t, tc.blobs(t, v)...)}}
	}
	var plainB, gzB, zstB []blob
	for _, l := range tc.layers(v) {
		b := mkTar(t, l...)
		plainB = append(plainB, blob{b, mtTar})
		gzB = append(gzB, blob{gz(t, b), mtGzip})
		zstB = append(zstB, blob{zst(t, b), ""}) // sniffed
	}
	return []variant{
		{"plain", writeLayers(t, plainB...)},
		{"gzip", writeLayers(t, gzB...)},
		{"zstd", writeLayers(t, zstB...)},
	}
}

func hostileStream(t *testing.T, tc hostileCase, v *victim) []byte {
	if tc.stream != nil {
		return tc.stream(t, v)
	}
	var all []ent
	for _, l := range tc.layers(v) {
		all = append(all, l...)
	}
	return mkTar(t, all...)
}
