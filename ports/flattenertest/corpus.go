package flattenertest

import (
	"archive/tar"
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Limits are the budgets a case's outcome depends on. A harness that can
// bound its flattener or consumer maps them onto its own; cases with
// non-zero Limits are skipped for one that cannot.
type Limits struct {
	MaxEntries    int   // entries (implied directories included)
	MaxTotalBytes int64 // declared regular file sizes, per layer and in the result
	MaxFileBytes  int64 // declared size of one regular file
	MaxPathDepth  int   // components in one path
	MaxXattrBytes int   // xattr names plus values, per entry
}

// IsZero reports whether l sets no budget.
func (l Limits) IsZero() bool { return l == Limits{} }

// Case is one entry of the hostile corpus (security reference §6a).
//
// The layers (or raw blobs) go to a flattener; Stream goes to tree
// consumers (builders and staging extractors), which take a flattened tree
// and must refuse what a hostile or buggy flattener could put in one.
type Case struct {
	Name string
	// Layers are entry lists, one per layer; or Blobs gives raw layer bytes.
	Layers func(v *Victim) [][]Entry
	Blobs  func(t testing.TB, v *Victim) []Blob
	// Stream is the tree handed to tree consumers; by default the entries
	// of all layers concatenated.
	Stream func(t testing.TB, v *Victim) []byte
	Limits Limits
	// Flatten is the rule the flattener refuses the layers with. "" means
	// it accepts them and keeps everything inside the root: its output
	// meets the ports.TreeEntry contract and holds every line of Want
	// (Describe format).
	Flatten string
	Want    func(v *Victim) []string
	// Gone lists names the accepted output must not hold.
	Gone []string
	// Tree is the rule a tree consumer refuses Stream with; TreeOK says it
	// must accept Stream instead. A case with neither attacks the layer
	// encoding (compression, media type), which trees do not have.
	Tree   string
	TreeOK bool
}

// TreeLevel reports whether the case runs against tree consumers.
func (c Case) TreeLevel() bool { return c.Tree != "" || c.TreeOK }

// LayerBlobs returns the case's layers as blobs in the given form:
// MediaTar, MediaGzip or MediaZstd (the last sniffed: media type "").
// Cases with raw Blobs return them whatever the form.
func (c Case) LayerBlobs(t testing.TB, v *Victim, form string) []Blob {
	t.Helper()
	if c.Blobs != nil {
		return c.Blobs(t, v)
	}
	var out []Blob
	for _, l := range c.Layers(v) {
		b := Tar(t, l...)
		switch form {
		case MediaGzip:
			out = append(out, Blob{Gzip(t, b), MediaGzip})
		case MediaZstd:
			out = append(out, Blob{Zstd(t, b), ""})
		default:
			out = append(out, Blob{b, MediaTar})
		}
	}
	return out
}

// TreeStream returns what tree consumers are handed.
func (c Case) TreeStream(t testing.TB, v *Victim) []byte {
	t.Helper()
	if c.Stream != nil {
		return c.Stream(t, v)
	}
	var all []Entry
	for _, l := range c.Layers(v) {
		all = append(all, l...)
	}
	return Tar(t, all...)
}

func one(es ...Entry) func(*Victim) [][]Entry {
	return func(*Victim) [][]Entry { return [][]Entry{es} }
}

func deepName(n int) string { return strings.Repeat("d/", n-1) + "f" }

func itoa(n int) string { return strconv.Itoa(n) }

// small is the budget of the budget cases.
var small = Limits{MaxEntries: 100, MaxTotalBytes: 1 << 20, MaxFileBytes: 1 << 20}

// Cases returns the hostile corpus.
func Cases() []Case {
	var cs []Case
	cs = append(cs, nameCases()...)
	cs = append(cs, symlinkCases()...)
	cs = append(cs, resolveCases()...)
	cs = append(cs, hardlinkCases()...)
	cs = append(cs, whiteoutCases()...)
	cs = append(cs, metadataCases()...)
	cs = append(cs, budgetCases()...)
	cs = append(cs, encodingCases()...)
	return cs
}

func nameCases() []Case {
	return []Case{
		{Name: "dotdot-file", Layers: one(Reg("../evil", "x")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "bare-dotdot", Layers: one(Dir("..")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "double-dotdot", Layers: one(Reg("../../pwned", "x")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "overwrite-victim", Layers: func(v *Victim) [][]Entry { return [][]Entry{{Reg(v.Up(v.Dir)+"/hello", "pwned")}} },
			Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "slash-dotdot", Layers: one(Reg("/../victim/hello", "pwned")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "inner-dotdot-escape", Layers: one(Reg("a/../../b", "x")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "inner-dotdot-local", Layers: one(Reg("a/../b", "x")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "sibling-prefix-file", Layers: one(Reg("../dest-evil/secret", "pwned")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "empty-name", Layers: one(Reg("", "x")), Flatten: RuleEmptyName, Tree: RuleEmptyName},
		{Name: "nul-in-pax-path", Blobs: func(t testing.TB, v *Victim) []Blob {
			// archive/tar refuses the record itself (validPAXRecord): the
			// layer is corrupt before a name reaches the flattener.
			return []Blob{{Data: nulPAXPath(), MediaType: MediaTar}}
		}, Stream: func(t testing.TB, v *Victim) []byte { return nulPAXPath() }, Flatten: RuleCorruptArchive, Tree: RuleCorruptArchive},
		{Name: "long-component", Layers: one(Reg(strings.Repeat("n", 256), "x")), Flatten: RuleNameTooLong, Tree: RuleNameTooLong},
		{Name: "long-path", Layers: one(Reg(strings.Repeat(strings.Repeat("p", 200)+"/", 21)+"f", "x")), Flatten: RulePathTooLong, Tree: RulePathTooLong},
		{Name: "deep-path", Layers: one(Reg(deepName(129), "x")), Limits: Limits{MaxPathDepth: 128}, Flatten: RulePathTooDeep, Tree: RulePathTooDeep},
		{Name: "deep-nesting-5000", Layers: one(Reg(deepName(5000), "x")), Flatten: RulePathTooLong, Tree: RulePathTooLong},
		{Name: "root-as-symlink", Layers: one(Sym("/", "/tmp")), Flatten: RuleRootNotDir, Tree: RuleAbsoluteName},
		{Name: "dot-as-file", Layers: one(Reg(".", "x")), Flatten: RuleRootNotDir, Tree: RuleRootNotDir},
		// Names a flattener never emits: absolute or not clean.
		{Name: "tree-absolute-name", Layers: one(Dir("etc"), Reg("/etc/passwd", "x")),
			Want: lines("etc 5", "etc/passwd 0 =x"), Tree: RuleAbsoluteName},
		{Name: "tree-unclean-name", Layers: one(Dir("a"), Reg("a//b", "x")),
			Want: lines("a 5", "a/b 0 =x"), Tree: RuleUncleanName},
		{Name: "tree-dot-slash-name", Layers: one(Reg("./a", "x")), Want: lines("a 0 =x"), Tree: RuleUncleanName},
		{Name: "tree-duplicate-file", Layers: one(Reg("f", "one"), Reg("f", "two")), Want: lines("f 0 =two"), Tree: RuleDuplicateEntry},
		{Name: "tree-duplicate-dir", Layers: one(Dir("d"), Dir("d")), Want: lines("d 5"), Tree: RuleDuplicateEntry},
		{Name: "tree-garbage", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: bytes.Repeat([]byte("not a tar "), 200), MediaType: MediaTar}}
		}, Stream: func(t testing.TB, v *Victim) []byte { return bytes.Repeat([]byte("not a tar "), 200) },
			Flatten: RuleCorruptArchive, Tree: RuleCorruptArchive},
	}
}

func symlinkCases() []Case {
	// Symlinks may point anywhere and are stored verbatim. A flattener
	// resolves parents through them inside the root (the image is the
	// root: absolute targets restart there, ".." stops there), so every
	// write below one lands inside the image; a tree consumer refuses them
	// (the tree must be resolved already).
	return []Case{
		{Name: "symlink-write-through-same-layer", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("etc", v.Dir), Reg("etc/hello", "pwned")}}
		}, Want: victimFile("hello"), Tree: RuleParentSymlink},
		{Name: "symlink-write-through-across-layers", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("etc", v.Dir)}, {Reg("etc/hello", "pwned")}}
		}, Want: victimFile("hello"), Tree: RuleParentSymlink},
		{Name: "symlink-relative-up-and-out", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("up", "../../../../../../../../.."+v.Dir)}, {Reg("up/hello", "pwned")}}
		}, Want: victimFile("hello"), Tree: RuleParentSymlink},
		{Name: "symlink-chain-two-hops", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Dir("inner"), Sym("inner/go_up", ".."), Sym("inner/go_up/escape", "../victim"), Reg("inner/go_up/escape/newfile", "pwned")}}
		}, Want: lines("escape 2 -> ../victim", "inner/go_up 2 -> ..", "victim/newfile 0 =pwned"), Tree: RuleParentSymlink},
		{Name: "symlink-override-path", Layers: func(v *Victim) [][]Entry {
			// containerd SymlinkOverridePath: dir, then "foo -> /", then a
			// write below it aimed at the host /tmp.
			return [][]Entry{{Dir("foo"), Reg("foo/f", "x"), Sym("foo", "/"), Reg("foo/tmp/"+v.HostTmp, "pwned"), Dir("foo")}}
		}, Want: func(v *Victim) []string { return []string{"foo 5", "tmp/" + v.HostTmp + " 0 =pwned"} },
			Gone: []string{"foo/f"}, Tree: RuleDuplicateEntry},
		{Name: "symlink-override-path-across-layers", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Dir("foo"), Reg("foo/f", "x")}, {Sym("foo", "/")}, {Reg("foo/tmp/"+v.HostTmp, "pwned")}}
		}, Want: func(v *Victim) []string { return []string{"foo 2 -> /", "tmp/" + v.HostTmp + " 0 =pwned"} },
			Gone: []string{"foo/f"}, Tree: RuleDuplicateEntry},
		{Name: "symlink-named-dotdot", Layers: one(Sym("..", "/")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "symlink-loop-write", Layers: one(Sym("a", "b"), Sym("b", "a"), Reg("a/x", "x")), Flatten: RuleSymlinkLoop, Tree: RuleParentSymlink},
		{Name: "relative-escape-before-absolute", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("escape", ".."), Sym("absolute", v.Dir), Reg("escape/absolute/hello", "pwned")}}
		}, Want: victimFile("hello"), Tree: RuleParentSymlink},
		{Name: "absolute-symlink-deep-write", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Dir("var"), Sym("var/run", v.Dir)}, {Reg("var/run/sub/deep", "pwned")}}
		}, Want: victimFile("sub/deep"), Tree: RuleParentSymlink},
		{Name: "symlink-target-too-long", Layers: one(Sym("l", strings.Repeat("t", 4096))), Flatten: RuleSymlinkTarget, Tree: RuleSymlinkTarget},
		{Name: "symlink-empty-target", Layers: one(Sym("l", "")), Flatten: RuleSymlinkTarget, Tree: RuleSymlinkTarget},
		{Name: "escaping-symlinks-stored-as-data", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("abs", v.Dir), Sym("rel", "../../../../../../victim/hello"), Sym("root", "/")}}
		}, Want: func(v *Victim) []string {
			return []string{"abs 2 -> " + v.Dir, "rel 2 -> ../../../../../../victim/hello", "root 2 -> /"}
		}, TreeOK: true},
		{Name: "write-below-file-same-layer", Layers: one(Reg("f", "x"), Reg("f/x", "y")), Flatten: RuleParentNotDir, Tree: RuleParentNotDir},
		{Name: "write-below-file-across-layers", Layers: func(*Victim) [][]Entry { return [][]Entry{{Reg("f", "x")}, {Reg("f/x", "y")}} },
			Flatten: RuleParentNotDir, Tree: RuleParentNotDir},
		{Name: "write-below-fifo", Layers: one(Fifo("p"), Reg("p/x", "y")), Flatten: RuleParentNotDir, Tree: RuleParentNotDir},
	}
}

// resolveCases attack the resolution of parents through symlinks.
func resolveCases() []Case {
	chain := func(n int) []Entry { // s0 -> s1 -> ... -> s<n-1> -> d, then s0/x
		es := []Entry{Dir("d")}
		for i := range n {
			next := "s" + itoa(i+1)
			if i == n-1 {
				next = "d"
			}
			es = append(es, Sym("s"+itoa(i), next))
		}
		return append(es, Reg("s0/x", "x"))
	}
	return []Case{
		{Name: "resolve-chain-escapes-by-dotdot", Layers: one(Sym("a", "b/../../../../"), Sym("b", "c/d"), Sym("c", "../../.."), Reg("a/x", "pwned")),
			Want: lines("x 0 =pwned"), Gone: []string{"d"}, Tree: RuleParentSymlink},
		{Name: "resolve-absolute-dotdot-target", Layers: one(Sym("l", "/../../../../etc"), Reg("l/passwd", "pwned")),
			Want: lines("etc 5", "etc/passwd 0 =pwned"), Tree: RuleParentSymlink},
		{Name: "resolve-symlink-to-root-write", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("r", "/")}, {Reg("r/"+v.InRoot(v.Dir)+"/hello", "pwned")}}
		}, Want: victimFile("hello"), Tree: RuleParentSymlink},
		{Name: "resolve-loop-self", Layers: one(Sym("a", "a"), Reg("a/x", "x")), Flatten: RuleSymlinkLoop, Tree: RuleParentSymlink},
		{Name: "resolve-loop-through-dir", Layers: one(Dir("d"), Sym("d/l", "../d/l"), Reg("d/l/x", "x")), Flatten: RuleSymlinkLoop, Tree: RuleParentSymlink},
		{Name: "resolve-loop-absolute", Layers: one(Dir("d"), Sym("d/l", "/d/m"), Sym("d/m", "/d/l"), Reg("d/l/x", "x")), Flatten: RuleSymlinkLoop, Tree: RuleParentSymlink},
		{Name: "resolve-40-hops", Layers: one(chain(40)...), Want: lines("d/x 0 =x"), Tree: RuleParentSymlink},
		{Name: "resolve-41-hops", Layers: one(chain(41)...), Flatten: RuleSymlinkLoop, Tree: RuleParentSymlink},
		{Name: "resolve-hardlink-target-loop", Layers: one(Sym("a", "b"), Sym("b", "a"), Hard("x", "a/f")), Flatten: RuleSymlinkLoop, Tree: RuleHardlinkMissing},
		{Name: "resolve-whiteout-loop", Layers: func(*Victim) [][]Entry {
			return [][]Entry{{Sym("a", "b"), Sym("b", "a")}, {Whiteout("a", "x")}}
		}, Flatten: RuleSymlinkLoop, Tree: RuleWhiteoutInTree},
		{Name: "symlink-replaces-dir-then-write", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Dir("d"), Reg("d/f", "lower")}, {Sym("d", v.Dir)}, {Reg("d/f2", "pwned")}}
		}, Want: func(v *Victim) []string { return []string{"d 2 -> " + v.Dir, v.InRoot(v.Dir) + "/f2 0 =pwned"} },
			Gone: []string{"d/f"}, Tree: RuleDuplicateEntry},
		{Name: "symlink-replaces-dir-relative-escape", Layers: func(*Victim) [][]Entry {
			return [][]Entry{{Dir("d"), Reg("d/f", "lower")}, {Sym("d", "../../..")}, {Reg("d/etc/passwd", "pwned")}}
		}, Want: lines("d 2 -> ../../..", "etc 5", "etc/passwd 0 =pwned"), Gone: []string{"d/f"}, Tree: RuleDuplicateEntry},
		{Name: "resolve-through-symlink-to-file", Layers: one(Reg("f", "x"), Sym("l", "f"), Reg("l/x", "y")), Flatten: RuleParentNotDir, Tree: RuleParentSymlink},
		{Name: "resolve-through-symlink-to-device", Layers: one(Dev("null", tar.TypeChar, 1, 3), Sym("l", "/null"), Reg("l/x", "y")), Flatten: RuleParentNotDir, Tree: RuleParentSymlink},
		{Name: "resolve-dangling-then-dotdot", Layers: one(Dir("etc"), Sym("l", "missing/../etc"), Reg("l/x", "x")),
			Want: lines("etc 5", "etc/x 0 =x", "l 2 -> missing/../etc"), Gone: []string{"missing"}, Tree: RuleParentSymlink},
		{Name: "resolve-target-whiteout-component", Layers: one(Sym("l", ".wh.x"), Reg("l/f", "x")), Flatten: RuleWhiteoutInPath, Tree: RuleParentSymlink},
		{Name: "resolve-target-long-component", Layers: one(Sym("l", strings.Repeat("c", 300)), Reg("l/f", "x")), Flatten: RuleNameTooLong, Tree: RuleParentSymlink},
		{Name: "resolve-target-too-deep", Layers: one(Sym("l", strings.Repeat("a/", 200)), Reg("l/f", "x")),
			Limits: Limits{MaxPathDepth: 128}, Flatten: RulePathTooDeep, Tree: RuleParentSymlink},
		{Name: "resolve-result-too-long", Layers: one(Sym("l", strings.Repeat(strings.Repeat("p", 200)+"/", 20)), Reg("l/"+strings.Repeat("q", 100), "x")),
			Flatten: RulePathTooLong, Tree: RuleParentSymlink},
		{Name: "hardlink-replaces-its-target-dir", Layers: one(Dir("d"), Reg("d/f", "x"), Hard("d", "d/f")),
			Flatten: RuleHardlinkMissing, Tree: RuleDuplicateEntry},
		{Name: "hardlink-replaces-its-target-dir-via-symlink", Layers: one(Dir("d"), Reg("d/f", "x"), Sym("l", "d"), Hard("d", "l/f")),
			Flatten: RuleHardlinkMissing, Tree: RuleDuplicateEntry},
		{Name: "resolve-hardlink-to-self", Layers: one(Sym("l", "."), Reg("a", "x"), Hard("a", "l/a")), Flatten: RuleHardlinkSelf, Tree: RuleDuplicateEntry},
		{Name: "resolve-hardlink-through-symlink-to-symlink", Layers: func(v *Victim) [][]Entry {
			// The last component is never followed: a link to "d/s" names
			// the symlink s, which points at a host file.
			return [][]Entry{{Dir("d"), Sym("d/s", v.Dir+"/hello"), Sym("l", "d"), Hard("x", "l/s")}}
		}, Flatten: RuleHardlinkNotRegular, Tree: RuleHardlinkMissing},
	}
}

func hardlinkCases() []Case {
	return []Case{
		{Name: "hardlink-relative-out", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Hard("lnk", v.Up(v.Dir)+"/hello")}}
		}, Flatten: RuleHardlinkEscape, Tree: RuleHardlinkEscape},
		{Name: "hardlink-absolute-host-path", Layers: func(v *Victim) [][]Entry {
			// An absolute target means the image root: root/<victim path>/hello does not exist.
			return [][]Entry{{Hard("lnk", filepath.Join(v.Dir, "hello"))}}
		}, Flatten: RuleHardlinkMissing, Tree: RuleAbsoluteName},
		{Name: "hardlink-sibling-prefix", Layers: one(Hard("lnk", "../dest-evil/secret")), Flatten: RuleHardlinkEscape, Tree: RuleHardlinkEscape},
		// The target's directory resolves inside the root: root/<victim
		// path>/hello does not exist.
		{Name: "hardlink-through-symlink-parent", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("d1", v.Dir), Hard("lnk", "d1/hello")}}
		}, Flatten: RuleHardlinkMissing, Tree: RuleHardlinkMissing},
		{Name: "hardlink-to-symlink-then-chmod", Layers: func(v *Victim) [][]Entry {
			// CVE-2021-32760 shape: a hard link to a symlink to a host
			// file, carrying mode 0777 and another owner.
			return [][]Entry{{Sym("sl", filepath.Join(v.Dir, "hello")), Hard("hl", "sl").With(func(h *tar.Header) { h.Mode = 0o777; h.Uid = 1234 })}}
		}, Flatten: RuleHardlinkNotRegular, Tree: RuleHardlinkNotRegular},
		{Name: "hardlink-to-directory", Layers: one(Dir("d"), Hard("hl", "d")), Flatten: RuleHardlinkDir, Tree: RuleHardlinkDir},
		{Name: "hardlink-to-implied-directory", Layers: one(Reg("d/f", "x"), Hard("hl", "d")), Flatten: RuleHardlinkDir, Tree: RuleHardlinkDir},
		{Name: "hardlink-to-root", Layers: one(Hard("hl", "/")), Flatten: RuleHardlinkDir, Tree: RuleAbsoluteName},
		{Name: "hardlink-missing", Layers: one(Hard("hl", "nothing")), Flatten: RuleHardlinkMissing, Tree: RuleHardlinkMissing},
		{Name: "hardlink-forward-reference", Layers: one(Hard("hl", "later"), Reg("later", "x")), Flatten: RuleHardlinkMissing, Tree: RuleHardlinkMissing},
		{Name: "hardlink-self", Layers: one(Reg("a", "x"), Hard("a", "a")), Flatten: RuleHardlinkSelf, Tree: RuleHardlinkSelf},
		{Name: "hardlink-to-device", Layers: one(Dev("null", tar.TypeChar, 1, 3), Hard("hl", "null")), Flatten: RuleHardlinkNotRegular, Tree: RuleHardlinkNotRegular},
		{Name: "hardlink-to-fifo", Layers: one(Fifo("p"), Hard("hl", "p")), Flatten: RuleHardlinkNotRegular, Tree: RuleHardlinkNotRegular},
		{Name: "hardlink-loophole-then-file", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Hard("loophole-victim", v.Up(v.Dir)+"/hello"), Reg("loophole-victim", "pwned")}}
		}, Flatten: RuleHardlinkEscape, Tree: RuleHardlinkEscape},
		{Name: "tree-hardlink-unclean-target", Layers: one(Dir("d"), Reg("d/f", "x"), Hard("hl", "d//f")),
			Want: lines("d 5", "d/f 0 =x", "hl 1 -> d/f"), Tree: RuleUncleanName},
	}
}

func whiteoutCases() []Case {
	return []Case{
		{Name: "whiteout-root", Layers: one(Reg(".wh..", "")), Flatten: RuleWhiteoutInvalid, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-root-parent", Layers: one(Reg(".wh...", "")), Flatten: RuleWhiteoutInvalid, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-parent", Layers: one(Dir("etc"), Reg("etc/.wh...", "")), Flatten: RuleWhiteoutInvalid, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-current-dir", Layers: one(Dir("etc"), Reg("etc/.wh..", "")), Flatten: RuleWhiteoutInvalid, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-empty", Layers: one(Reg(".wh.", "")), Flatten: RuleWhiteoutInvalid, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-escape-dotdot", Layers: one(Reg("../.wh.victim", "")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "whiteout-relative-path", Layers: one(Reg("dne/../.wh.etc", "")), Flatten: RulePathTraversal, Tree: RulePathTraversal},
		{Name: "whiteout-of-whiteout", Layers: one(Reg(".wh..wh.foo", "")), Flatten: RuleWhiteoutInvalid, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-dir-component", Layers: one(Dir(".wh.etc"), Reg(".wh.etc/somefile", "x")), Flatten: RuleWhiteoutInPath, Tree: RuleWhiteoutInTree},
		// Through a symlink a whiteout acts on the resolved directory, here
		// one the image does not have: a no-op, never the host's.
		{Name: "whiteout-through-symlink", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("localetc", v.Dir)}, {Whiteout("localetc", "hello")}}
		}, Want: func(v *Victim) []string { return []string{"localetc 2 -> " + v.Dir} }, Tree: RuleWhiteoutInTree},
		{Name: "opaque-through-symlink", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Sym("l", v.Dir)}, {Opaque("l")}}
		}, Want: func(v *Victim) []string { return []string{"l 2 -> " + v.Dir} }, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-through-dangling-symlink", Layers: func(v *Victim) [][]Entry {
			return [][]Entry{{Dir("etc"), Reg("etc/keep", "k"), Sym("localetc", "/dne")}, {Whiteout("localetc", "etc")}}
		}, Want: lines("etc/keep 0 =k", "localetc 2 -> /dne"), Gone: []string{"dne"}, Tree: RuleWhiteoutInTree},
		{Name: "opaque-below-file", Layers: one(Reg("f", "x"), Opaque("f")), Flatten: RuleParentNotDir, Tree: RuleWhiteoutInTree},
		{Name: "whiteout-below-file-across-layers", Layers: func(*Victim) [][]Entry { return [][]Entry{{Reg("f", "x")}, {Whiteout("f", "x")}} },
			Flatten: RuleParentNotDir, Tree: RuleWhiteoutInTree},
		{Name: "tree-leftover-whiteout", Layers: one(Reg("a", "x"), Whiteout("", "b")), Want: lines("a 0 =x"), Tree: RuleWhiteoutInTree},
	}
}

func metadataCases() []Case {
	return []Case{
		{Name: "xattr-overlay-opaque", Layers: one(Dir("d").With(Xattrs("trusted.overlay.opaque", "y"))), Flatten: RuleXattrForbidden, Tree: RuleXattrForbidden},
		{Name: "xattr-user-overlay", Layers: one(Dir("d").With(Xattrs("user.overlay.redirect", "/x"))), Flatten: RuleXattrForbidden, Tree: RuleXattrForbidden},
		{Name: "xattr-unknown-namespace", Layers: one(Reg("f", "x").With(Xattrs("weird.attr", "v"))), Flatten: RuleXattrForbidden, Tree: RuleXattrForbidden},
		{Name: "xattr-user-on-symlink", Layers: one(Sym("s", "t").With(Xattrs("user.x", "v"))), Flatten: RuleXattrForbidden, Tree: RuleXattrForbidden},
		{Name: "xattr-user-on-device", Layers: one(Dev("null", tar.TypeChar, 1, 3).With(Xattrs("user.x", "v"))), Flatten: RuleXattrForbidden, Tree: RuleXattrForbidden},
		// A control character in a name: builders that write a script
		// (debugfs) would take the rest of the name as commands.
		{Name: "xattr-name-newline", Layers: one(Reg("f", "x").With(Xattrs("user.a", "1", "user.x\n!touch /tmp/cube-corpus-pwned\n", "v"))), Flatten: RuleXattrForbidden, Tree: RuleXattrForbidden},
		{Name: "xattr-name-carriage-return-on-device", Layers: one(Dev("null", tar.TypeChar, 1, 3).With(Xattrs("security.x\rdump -p /f /tmp/cube-corpus-pwned", "v"))), Flatten: RuleXattrForbidden, Tree: RuleXattrForbidden},
		{Name: "xattr-value-too-large", Layers: one(Reg("f", "x").With(Xattrs("user.big", strings.Repeat("v", 70000)))), Flatten: RuleXattrTooLarge, Tree: RuleXattrTooLarge},
		{Name: "xattr-budget", Layers: one(Reg("f", "x").With(Xattrs("user.a", strings.Repeat("v", 40000), "user.b", strings.Repeat("v", 40000)))),
			Limits: Limits{MaxXattrBytes: 64 << 10}, Flatten: RuleXattrTooLarge, Tree: RuleXattrTooLarge},
		{Name: "device-number-range", Layers: one(Dev("d", tar.TypeBlock, 5000, 0)), Flatten: RuleBadDevice, Tree: RuleBadDevice},
		{Name: "device-minor-range", Layers: one(Dev("d", tar.TypeChar, 1, 1<<20)), Flatten: RuleBadDevice, Tree: RuleBadDevice},
		// Devices are image content: kept in the tree, never created on
		// the host by a consumer that defers them (staging) or has no host
		// tree at all (streaming builders).
		{Name: "devices-never-on-host", Layers: one(Dir("dev"), Dev("dev/sda", tar.TypeBlock, 8, 0), Dev("dev/mem", tar.TypeChar, 1, 1)),
			Want: lines("dev 5", "dev/mem 3", "dev/sda 4"), TreeOK: true},
		{Name: "uid-negative", Layers: one(Reg("f", "x").With(func(h *tar.Header) { h.Uid = -1 })), Flatten: RuleBadOwner, Tree: RuleBadOwner},
		{Name: "uid-minus-one", Layers: one(Reg("f", "x").With(func(h *tar.Header) { h.Uid = 1<<32 - 1 })), Flatten: RuleBadOwner, Tree: RuleBadOwner},
		{Name: "gid-too-large", Layers: one(Reg("f", "x").With(func(h *tar.Header) { h.Gid = 1 << 32 })), Flatten: RuleBadOwner, Tree: RuleBadOwner},
		{Name: "type-contiguous", Layers: one(Reg("f", "x").With(func(h *tar.Header) { h.Typeflag = tar.TypeCont })), Flatten: RuleUnsupportedType, Tree: RuleUnsupportedType},
		{Name: "type-volume", Layers: one(Entry{Header: tar.Header{Typeflag: 'V', Name: "vol"}}), Flatten: RuleUnsupportedType, Tree: RuleUnsupportedType},
		{Name: "type-unknown", Layers: one(Entry{Header: tar.Header{Typeflag: 'Z', Name: "z"}}), Flatten: RuleUnsupportedType, Tree: RuleUnsupportedType},
		{Name: "truncated-entry", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: truncatedTar(t), MediaType: MediaTar}}
		}, Stream: func(t testing.TB, v *Victim) []byte { return truncatedTar(t) }, Flatten: RuleCorruptArchive, Tree: RuleCorruptArchive},
		{Name: "truncated-content", Blobs: func(t testing.TB, v *Victim) []Blob {
			b := Tar(t, Reg("big", strings.Repeat("b", 64<<10)))
			return []Blob{{Data: b[:len(b)/2], MediaType: MediaTar}}
		}, Stream: func(t testing.TB, v *Victim) []byte {
			b := Tar(t, Reg("big", strings.Repeat("b", 64<<10)))
			return b[:len(b)/2]
		}, Flatten: RuleCorruptArchive, Tree: RuleCorruptArchive},
		// A tree that stops at an entry boundary parses as a shorter
		// tree: only the missing end-of-archive marker gives it away.
		// Layers are judged by their digests; trees have none.
		{Name: "tree-cut-at-entry-boundary", Layers: one(Reg("a", "a"), Reg("b", "b")),
			Stream: func(t testing.TB, v *Victim) []byte {
				b := Tar(t, Reg("a", "a"), Reg("b", "b"))
				return b[:len(b)-1024]
			}, Want: lines("a 0 =a", "b 0 =b"), Tree: RuleCorruptArchive},
		{Name: "tree-empty-stream", Layers: one(), Stream: func(testing.TB, *Victim) []byte { return nil }, Tree: RuleCorruptArchive},
	}
}

func budgetCases() []Case {
	return []Case{
		{Name: "sparse-bomb-4GiB", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: Gzip(t, SparseBomb()), MediaType: MediaGzip}}
		}, Stream: func(t testing.TB, v *Victim) []byte { return SparseBomb() },
			Limits: Limits{MaxFileBytes: 4 << 30}, Flatten: RuleFileTooLarge, Tree: RuleFileTooLarge},
		{Name: "sparse-bomb-under-file-limit", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: Gzip(t, SparseBomb()), MediaType: MediaGzip}}
		}, Stream: func(t testing.TB, v *Victim) []byte { return SparseBomb() },
			Limits: Limits{MaxFileBytes: 8 << 30, MaxTotalBytes: 1 << 30}, Flatten: RuleLayerTooLarge, Tree: RuleImageTooLarge},
		{Name: "gzip-bomb-declared-size", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: Gzip(t, zeroFile(16<<20)), MediaType: MediaGzip}}
		}, Stream: func(t testing.TB, v *Victim) []byte { return zeroFile(16 << 20) }, Limits: small, Flatten: RuleFileTooLarge, Tree: RuleFileTooLarge},
		{Name: "many-files-over-layer-budget", Layers: func(*Victim) [][]Entry {
			var es []Entry
			for i := range 40 {
				es = append(es, Reg("f"+itoa(i), strings.Repeat("z", 32<<10)))
			}
			return [][]Entry{es}
		}, Limits: small, Flatten: RuleLayerTooLarge, Tree: RuleImageTooLarge},
		{Name: "image-over-budget-across-layers", Layers: func(*Victim) [][]Entry {
			return [][]Entry{{Reg("a", strings.Repeat("z", 700<<10))}, {Reg("b", strings.Repeat("z", 700<<10))}}
		}, Limits: small, Flatten: RuleImageTooLarge, Tree: RuleImageTooLarge},
		{Name: "entry-count-bomb", Layers: func(*Victim) [][]Entry {
			var es []Entry
			for i := range 150 {
				es = append(es, Dir("d"+itoa(i)))
			}
			return [][]Entry{es}
		}, Limits: small, Flatten: RuleTooManyEntries, Tree: RuleTooManyEntries},
		{Name: "implied-dir-bomb", Layers: func(*Victim) [][]Entry {
			var es []Entry
			for i := range 20 {
				es = append(es, Reg("x"+itoa(i)+"/a/b/c/d/e/f", ""))
			}
			return [][]Entry{es}
		}, Limits: small, Flatten: RuleTooManyEntries, Tree: RuleTooManyEntries},
	}
}

// encodingCases attack the layer encoding; trees have none.
func encodingCases() []Case {
	return []Case{
		// Relies on a decompressed-metadata allowance below 70 MiB.
		{Name: "pax-global-header-flood", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: Gzip(t, GlobalHeaders(70)), MediaType: MediaGzip}}
		}, Flatten: RuleDecompressionBomb},
		// Relies on a zstd window cap below 2 GiB.
		{Name: "zstd-huge-window", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: ZstdWindowFrame(Tar(t, Reg("f", "x")), 31), MediaType: MediaZstd}}
		}, Flatten: RuleZstdWindow},
		{Name: "media-type-lies-gzip", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: Tar(t, Reg("f", "x")), MediaType: MediaGzip}}
		}, Flatten: RuleMediaTypeMismatch},
		{Name: "media-type-lies-plain", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: Gzip(t, Tar(t, Reg("f", "x"))), MediaType: MediaTar}}
		}, Flatten: RuleMediaTypeMismatch},
		{Name: "media-type-bzip2", Blobs: func(t testing.TB, v *Victim) []Blob {
			return []Blob{{Data: Tar(t, Reg("f", "x")), MediaType: "application/vnd.oci.image.layer.v1.tar+bzip2"}}
		}, Flatten: RuleMediaType},
		{Name: "gzip-truncated", Blobs: func(t testing.TB, v *Victim) []Blob {
			b := Gzip(t, Tar(t, Reg("f", strings.Repeat("abc", 10000))))
			return []Blob{{Data: b[:len(b)/2], MediaType: MediaGzip}}
		}, Flatten: RuleCorruptArchive},
	}
}

func lines(l ...string) func(*Victim) []string { return func(*Victim) []string { return l } }

// victimFile is the line of a file "pwned" aimed at the victim's file p,
// resolved inside the root.
func victimFile(p string) func(v *Victim) []string {
	return func(v *Victim) []string { return []string{v.InRoot(v.Dir) + "/" + p + " 0 =pwned"} }
}

func nulPAXPath() []byte {
	return append(RawPAXEntry("x", tar.TypeReg, []byte("x"), "path", "ok\x00/../../evil"), EndOfArchive()...)
}

func truncatedTar(t testing.TB) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Size: 2000, Mode: 0o644})
	tw.Write(bytes.Repeat([]byte("x"), 2000))
	tw.Close()
	return buf.Bytes()[:512+100]
}

// zeroFile is a tar with one file of n zero bytes.
func zeroFile(n int) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Size: int64(n), Mode: 0o644})
	tw.Write(make([]byte, n))
	tw.Close()
	return buf.Bytes()
}

// GlobalHeaders is n PAX global headers of almost 1 MiB each.
func GlobalHeaders(n int) []byte {
	rec := PAXRecords("comment", strings.Repeat("c", 1<<20-64))
	var out []byte
	for range n {
		out = append(out, RawHeader("pax_global_header", tar.TypeXGlobalHeader, int64(len(rec)))...)
		out = append(out, Pad(rec)...)
	}
	return append(out, EndOfArchive()...)
}

// SparseBomb is a PAX 1.0 sparse file declaring 4 GiB + 2 bytes with one
// byte of data: 291 bytes once gzipped.
func SparseBomb() []byte {
	return append(SparseFile("bomb", 4294967298, int64(4294967297), "X"), EndOfArchive()...)
}

// ZstdWindowFrame is a hand-made zstd frame declaring a 2^windowLog window
// and holding data in one raw block (encoders pick small windows for small
// inputs, so the header is written directly).
func ZstdWindowFrame(data []byte, windowLog int) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	h := len(data)<<3 | 1 // raw block, last
	out = append(out, byte(h), byte(h>>8), byte(h>>16))
	return append(out, data...)
}
