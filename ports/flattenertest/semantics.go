package flattenertest

import (
	"archive/tar"
)

// Semantic is a positive case: layers and the exact flattened tree they
// give, one Describe line per entry in output order.
type Semantic struct {
	Name   string
	Layers [][]Entry
	Want   []string
}

// Semantics returns the positive cases: whiteouts, opaque directories,
// replacement, hard links and the order of the output tree.
func Semantics() []Semantic {
	return []Semantic{
		{
			Name: "whiteout file and directory across layers",
			Layers: [][]Entry{
				{Dir("etc"), Reg("etc/a", "a"), Reg("etc/b", "b"), Dir("opt"), Reg("opt/x", "x")},
				{Whiteout("etc", "a"), Whiteout("", "opt")},
			},
			Want: []string{"etc 5", "etc/b 0 =b"},
		},
		{
			Name: "whiteout then recreate in the same layer",
			Layers: [][]Entry{
				{Dir("d"), Reg("d/old", "o")},
				{Whiteout("", "d"), Dir("d"), Reg("d/new", "n")},
			},
			Want: []string{"d 5", "d/new 0 =n"},
		},
		{
			Name: "whiteout does not hide its own layer",
			Layers: [][]Entry{
				{Reg("a", "lower")},
				{Reg("a", "upper"), Whiteout("", "a")},
			},
			Want: []string{"a 0 =upper"},
		},
		{
			Name: "whiteout of something absent is a no-op",
			Layers: [][]Entry{
				{Reg("a", "a")},
				{Whiteout("nope", "x"), Whiteout("", "ghost")},
			},
			Want: []string{"a 0 =a"},
		},
		{
			Name: "redundant nested whiteouts",
			Layers: [][]Entry{
				{Dir("foo"), Reg("foo/bar", "b"), Reg("keep", "k")},
				{Whiteout("", "foo"), Whiteout("foo", "bar"), Whiteout("new/deep", "x")},
			},
			Want: []string{"keep 0 =k"},
		},
		{
			Name: "whiteout of a symlink removes the link, not its target",
			Layers: [][]Entry{
				{Dir("etc"), Reg("etc/hosts", "h"), Sym("localetc", "etc")},
				{Whiteout("", "localetc")},
			},
			Want: []string{"etc 5", "etc/hosts 0 =h"},
		},
		{
			Name: "whiteouts of any type or size act by name only",
			Layers: [][]Entry{
				{Reg("a", "a"), Reg("b", "b"), Reg("c", "c"), Reg("d", "d")},
				{
					Dir(".wh.a"),
					Sym(".wh.b", "/etc/passwd"),
					Reg(".wh.c", "content is ignored"),
					Dev(".wh.d", tar.TypeChar, 0, 0),
				},
			},
			Want: nil,
		},
		{
			Name: "overlayfs-style markers are plain data in OCI layers",
			Layers: [][]Entry{
				{Reg("x", "x")},
				{Dev("x", tar.TypeChar, 0, 0)},
			},
			Want: []string{"x 3"},
		},
		{
			Name: "names differing in case or normalisation stay distinct",
			Layers: [][]Entry{
				{Reg("etc", "lower"), Reg("Etc", "upper"), Reg("caf\u00e9", "nfc"), Reg("cafe\u0301", "nfd")},
			},
			Want: []string{"Etc 0 =upper", "cafe\u0301 0 =nfd", "caf\u00e9 0 =nfc", "etc 0 =lower"},
		},
		{
			Name: "opaque directory keeps its own layer's children",
			Layers: [][]Entry{
				{Dir("a"), Dir("a/b"), Reg("a/b/old", "o"), Reg("a/keep-lower", "k")},
				{Reg("a/b/c/foo", "f"), Opaque("a")},
			},
			Want: []string{"a 5", "a/b 5", "a/b/c 5", "a/b/c/foo 0 =f"},
		},
		{
			Name: "opaque marker of a directory that replaced a file",
			Layers: [][]Entry{
				{Reg("x", "file")},
				{Dir("x"), Opaque("x"), Reg("x/new", "n")},
			},
			Want: []string{"x 5", "x/new 0 =n"},
		},
		{
			Name: "root opaque",
			Layers: [][]Entry{
				{Dir("bin"), Reg("bin/sh", "sh"), Reg("top", "t")},
				{Opaque(""), Reg("new", "n")},
			},
			Want: []string{"new 0 =n"},
		},
		{
			Name: "file replaced by dir and back across layers",
			Layers: [][]Entry{
				{Reg("x", "file1")},
				{Dir("x"), Reg("x/child", "c")},
				{Reg("x", "file2")},
			},
			Want: []string{"x 0 =file2"},
		},
		{
			Name: "dir replaced by file and back in one layer",
			Layers: [][]Entry{
				{Dir("x"), Reg("x/lower", "l")},
				{Dir("x"), Reg("x/a", "a"), Reg("x", "file"), Dir("x"), Reg("x/b", "b")},
			},
			Want: []string{"x 5", "x/b 0 =b"},
		},
		{
			Name: "explicit dir replaces lower symlink",
			Layers: [][]Entry{
				{Sym("etc", "/somewhere")},
				{Dir("etc"), Reg("etc/passwd", "p")},
			},
			Want: []string{"etc 5", "etc/passwd 0 =p"},
		},
		{
			Name: "symlink replaces lower directory and its subtree",
			Layers: [][]Entry{
				{Dir("lib"), Reg("lib/a", "a")},
				{Sym("lib", "usr/lib")},
			},
			Want: []string{"lib 2 -> usr/lib"},
		},
		{
			Name: "duplicate entries in one layer: last wins",
			Layers: [][]Entry{
				{Reg("f", "first"), Reg("f", "second"), Sym("s", "a"), Sym("s", "b")},
			},
			Want: []string{"f 0 =second", "s 2 -> b"},
		},
		{
			Name: "implied parents are synthesized",
			Layers: [][]Entry{
				{Reg("usr/local/bin/tool", "t")},
			},
			Want: []string{"usr 5", "usr/local 5", "usr/local/bin 5", "usr/local/bin/tool 0 =t"},
		},
		{
			Name: "absolute names and ./ prefixes are made relative",
			Layers: [][]Entry{
				{Dir("/etc/"), Reg("./etc//hosts", "h"), Reg("/./a", "a")},
			},
			Want: []string{"a 0 =a", "etc 5", "etc/hosts 0 =h"},
		},
		{
			Name: "absolute symlinks are stored verbatim, never followed",
			Layers: [][]Entry{
				{Dir("var"), Sym("var/run", "/run"), Sym("escape", "../../../../etc/shadow"), Dir("run")},
			},
			Want: []string{"escape 2 -> ../../../../etc/shadow", "run 5", "var 5", "var/run 2 -> /run"},
		},
		{
			Name: "hard link emitted after its target even when it sorts first",
			Layers: [][]Entry{
				{Reg("z", "content"), Hard("a", "z")},
			},
			Want: []string{"a 0 =content", "z 1 -> a"},
		},
		{
			Name: "hard link to a lower layer",
			Layers: [][]Entry{
				{Reg("bin/perl", "perl")},
				{Hard("/bin/perl5", "/bin/perl")},
			},
			Want: []string{"bin 5", "bin/perl 0 =perl", "bin/perl5 1 -> bin/perl"},
		},
		{
			Name: "hard link survives whiteout of its target (materialised)",
			Layers: [][]Entry{
				{Reg("a", "shared"), Hard("b", "a")},
				{Whiteout("", "a")},
			},
			Want: []string{"b 0 =shared"},
		},
		{
			Name: "replacing one name of a hard-linked file leaves the other",
			Layers: [][]Entry{
				{Reg("a", "old"), Hard("b", "a")},
				{Reg("a", "new")},
			},
			Want: []string{"a 0 =new", "b 0 =old"},
		},
		{
			Name: "hard link chain shares one inode",
			Layers: [][]Entry{
				{Reg("a", "x"), Hard("b", "a"), Hard("c", "b")},
			},
			Want: []string{"a 0 =x", "b 1 -> a", "c 1 -> a"},
		},
		{
			Name: "hard link to a name replaced earlier in the same layer",
			Layers: [][]Entry{
				{Reg("a", "v1"), Hard("b", "a"), Reg("a", "v2"), Hard("c", "a")},
			},
			Want: []string{"a 0 =v2", "b 0 =v1", "c 1 -> a"},
		},
		{
			Name: "special files",
			Layers: [][]Entry{
				{Dev("dev/null", tar.TypeChar, 1, 3), Dev("dev/sda", tar.TypeBlock, 8, 0), Fifo("run/fifo")},
			},
			Want: []string{"dev 5", "dev/null 3", "dev/sda 4", "run 5", "run/fifo 6"},
		},
		{
			Name: "non-UTF-8 and odd bytes kept verbatim",
			Layers: [][]Entry{
				{Reg("caf\xe9", "latin1"), Reg("new\nline", "n"), Reg(`back\slash`, "b"), Reg("with space", "s")},
			},
			Want: []string{`back\slash 0 =b`, "caf\xe9 0 =latin1", "new\nline 0 =n", "with space 0 =s"},
		},
		// Parents resolve through symlinks inside the root; the last
		// component is never followed.
		{
			Name: "write through an absolute symlink lands where it points",
			Layers: [][]Entry{
				{Dir("run"), Dir("var"), Sym("var/run", "/run")},
				{Reg("var/run/app.pid", "1")},
			},
			Want: []string{"run 5", "run/app.pid 0 =1", "var 5", "var/run 2 -> /run"},
		},
		{
			Name: "write through a dangling symlink creates its target directory",
			Layers: [][]Entry{
				{Dir("var"), Sym("var/run", "/run")},
				{Reg("var/run/lock/app.lock", "l")},
			},
			Want: []string{"run 5", "run/lock 5", "run/lock/app.lock 0 =l", "var 5", "var/run 2 -> /run"},
		},
		{
			Name: "merged /usr: writes through lib, bin and sbin",
			Layers: [][]Entry{
				{Dir("usr"), Dir("usr/bin"), Dir("usr/lib"), Dir("usr/sbin"), Sym("bin", "usr/bin"), Sym("lib", "usr/lib"), Sym("sbin", "usr/sbin")},
				{Reg("bin/tool", "t"), Dir("lib/x86_64-linux-gnu"), Reg("lib/x86_64-linux-gnu/libcube.so.1", "so"), Sym("lib/x86_64-linux-gnu/libcube.so", "libcube.so.1"), Reg("sbin/init", "i")},
			},
			Want: []string{"bin 2 -> usr/bin", "lib 2 -> usr/lib", "sbin 2 -> usr/sbin", "usr 5", "usr/bin 5", "usr/bin/tool 0 =t",
				"usr/lib 5", "usr/lib/x86_64-linux-gnu 5", "usr/lib/x86_64-linux-gnu/libcube.so 2 -> libcube.so.1",
				"usr/lib/x86_64-linux-gnu/libcube.so.1 0 =so", "usr/sbin 5", "usr/sbin/init 0 =i"},
		},
		{
			Name: "relative symlink resolves from its own directory",
			Layers: [][]Entry{
				{Dir("usr"), Dir("usr/lib"), Sym("usr/lib64", "lib"), Dir("opt"), Sym("opt/up", "../usr/lib")},
				{Reg("usr/lib64/ld.so", "ld"), Reg("opt/up/libc.so", "c")},
			},
			Want: []string{"opt 5", "opt/up 2 -> ../usr/lib", "usr 5", "usr/lib 5", "usr/lib/ld.so 0 =ld", "usr/lib/libc.so 0 =c", "usr/lib64 2 -> lib"},
		},
		{
			Name: "a symlink made earlier in the same layer is followed",
			Layers: [][]Entry{
				{Dir("real"), Sym("alias", "real"), Reg("alias/f", "f")},
			},
			Want: []string{"alias 2 -> real", "real 5", "real/f 0 =f"},
		},
		{
			Name: "an entry named like a symlink replaces it",
			Layers: [][]Entry{
				{Dir("usr"), Dir("usr/lib"), Reg("usr/lib/a", "a"), Sym("lib", "usr/lib")},
				{Dir("lib"), Reg("lib/b", "b")},
			},
			Want: []string{"lib 5", "lib/b 0 =b", "usr 5", "usr/lib 5", "usr/lib/a 0 =a"},
		},
		{
			Name: "a symlink that replaced a directory takes the later writes",
			Layers: [][]Entry{
				{Dir("data"), Reg("data/old", "o"), Dir("srv")},
				{Sym("data", "/srv")},
				{Reg("data/new", "n")},
			},
			Want: []string{"data 2 -> /srv", "srv 5", "srv/new 0 =n"},
		},
		{
			Name: "whiteout and opaque marker through a symlink act on the resolved directory",
			Layers: [][]Entry{
				{Dir("etc"), Reg("etc/a", "a"), Reg("etc/b", "b"), Dir("etc/d"), Reg("etc/d/x", "x"), Sym("le", "/etc")},
				{Whiteout("le", "a"), Opaque("le/d"), Reg("le/d/y", "y")},
			},
			Want: []string{"etc 5", "etc/b 0 =b", "etc/d 5", "etc/d/y 0 =y", "le 2 -> /etc"},
		},
		{
			Name: "hard link names and targets resolve through symlinks",
			Layers: [][]Entry{
				{Dir("usr"), Dir("usr/lib"), Reg("usr/lib/a", "shared"), Sym("lib", "usr/lib")},
				{Hard("lib/b", "lib/a"), Hard("c", "/lib/a")},
			},
			Want: []string{"c 0 =shared", "lib 2 -> usr/lib", "usr 5", "usr/lib 5", "usr/lib/a 1 -> c", "usr/lib/b 1 -> c"},
		},
		{
			Name: "dotdot in a target stops at the root",
			Layers: [][]Entry{
				{Sym("up", "../../../.."), Reg("up/top", "t")},
			},
			Want: []string{"top 0 =t", "up 2 -> ../../../.."},
		},
		{
			Name: "pax global headers are ignored",
			Layers: [][]Entry{
				{Entry{Header: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": "git"}}}, Reg("f", "f")},
			},
			Want: []string{"f 0 =f"},
		},
	}
}
