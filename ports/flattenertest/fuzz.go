package flattenertest

import (
	"archive/tar"
	"strings"
	"testing"
)

// Seeds returns fuzz seeds: a few ordinary layers and every case of the
// corpus whose layers are entry lists, each as one tar.
func Seeds(t testing.TB) [][]byte {
	t.Helper()
	v := &Victim{Root: "/fuzz/dest", Dir: "/fuzz/victim", Evil: "/fuzz/dest-evil", HostTmp: "cube-flattenertest-fuzz"}
	out := [][]byte{
		Tar(t, Dir("etc"), Reg("etc/passwd", "root"), Sym("var/run", "/run"), Hard("x", "etc/passwd"), Fifo("p")),
		Gzip(t, Tar(t, Opaque("a"), Whiteout("", "etc"), Reg("a/b", "b"))),
		Zstd(t, Tar(t, Dev("dev/null", 'c', 1, 3), Dir("tmp").With(Xattrs("user.x", "y")))),
		SparseBomb(),
		ZstdWindowFrame(Tar(t, Reg("f", "x")), 31),
	}
	for _, c := range Cases() {
		if c.Layers == nil || c.Name == "deep-nesting-5000" || c.Name == "long-path" {
			continue
		}
		var all []Entry
		for _, l := range c.Layers(v) {
			all = append(all, l...)
		}
		out = append(out, Tar(t, all...))
	}
	return out
}

// TreeOpsSeeds are seeds for TreeOps.
var TreeOpsSeeds = [][]byte{
	{0, 0, 1, 2, 2, 3, 0, 0, 7, 3, 0, 4},
	{2, 0, 9, 0, 7, 0, 0, 0, 0, 0, 1, 0},
	{1, 5, 0, 0, 6, 0, 0, 0, 3, 1, 1, 1, 4, 2, 0, 3},
	{2, 2, 0, 4, 7, 0, 0, 0, 0, 2, 4, 0},
}

// TreeOps is a structure-aware fuzz decoder: each 4 bytes of data become
// one tar entry built from a hostile alphabet (".." components, whiteouts,
// symlinks at the victim, hard links out of the root, ...), split into up
// to three layers by a separator op. It returns nil for inputs too long to
// be useful.
func TreeOps(data []byte, v *Victim) [][]Entry {
	if len(data) > 4*40 {
		return nil
	}
	comps := []string{"a", "b", "etc", "..", ".", ".wh.a", ".wh..wh..opq", ".wh..", "victim", "dest-evil", "hello", ""}
	targets := []string{"a", "a/b", "/etc", "..", "../victim", "../../victim/hello", v.Dir, v.Dir + "/hello", "/", "etc/hello", "b", "a/../..", "../../../a"}
	layers := [][]Entry{nil}
	for i := 0; i+4 <= len(data); i += 4 {
		op, c1, c2, c3 := data[i], data[i+1], data[i+2], data[i+3]
		name := comps[int(c1)%len(comps)]
		if c2%4 != 0 {
			name += "/" + comps[int(c2/4)%len(comps)]
		}
		if c3&0x80 != 0 {
			name = "/" + name
		}
		target := targets[int(c3&0x7f)%len(targets)]
		var e Entry
		switch op % 8 {
		case 0:
			e = Reg(name, "content")
		case 1:
			e = Dir(name)
		case 2:
			e = Sym(name, target)
		case 3:
			e = Hard(name, target)
		case 4:
			e = Fifo(name)
		case 5:
			e = Dev(name, tar.TypeChar, 1, 3)
		case 6:
			e = Reg(name, "x").With(func(h *tar.Header) { h.Mode = 0o4777; h.Uid = 1000 })
		case 7:
			if len(layers) < 3 {
				layers = append(layers, nil)
			}
			continue
		}
		if strings.HasSuffix(name, "/") && e.Header.Typeflag != tar.TypeDir {
			continue // archive/tar cannot write it
		}
		layers[len(layers)-1] = append(layers[len(layers)-1], e)
	}
	return layers
}
