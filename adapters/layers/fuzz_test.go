package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzLimits keep each iteration small and fast.
var fuzzLimits = Limits{MaxEntries: 2000, MaxTotalBytes: 8 << 20, MaxFileBytes: 4 << 20, MaxZstdWindow: 8 << 20, MaxPathDepth: 32}

func fuzzSeeds(f *testing.F) {
	v := &victim{root: "/fuzz/dest", dir: "/fuzz/victim", evil: "/fuzz/dest-evil", hostTmp: "cube-layers-fuzz"}
	f.Add(mkTar(f, dir("etc"), reg("etc/passwd", "root"), sym("var/run", "/run"), hard("x", "etc/passwd"), fifo("p")))
	f.Add(gz(f, mkTar(f, reg("a/.wh..wh..opq", ""), reg(".wh.etc", ""), reg("a/b", "b"))))
	f.Add(zst(f, mkTar(f, dev("dev/null", 'c', 1, 3), dir("tmp").with(xattrs("user.x", "y")))))
	f.Add(sparseBomb())
	f.Add(zstdWindowFrame(mkTar(f, reg("f", "x")), 31))
	for _, tc := range hostileCases() {
		if tc.layers == nil || tc.name == "deep-nesting-5000" || tc.name == "long-path" {
			continue
		}
		var all []ent
		for _, l := range tc.layers(v) {
			all = append(all, l...)
		}
		f.Add(mkTar(f, all...))
	}
}

// FuzzFlatten feeds random bytes as the upper layer over a fixed lower
// layer. Flatten must not panic, must fail only with a *RejectError, and
// whatever it accepts must satisfy the output contract and extract without
// touching anything outside the root.
func FuzzFlatten(f *testing.F) {
	fuzzSeeds(f)
	lower := mkTar(f, dir("etc"), reg("etc/passwd", "root"), sym("lnk", "/etc"), dir("usr/lib"), reg("usr/lib/a", "a"), hard("usr/lib/b", "usr/lib/a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := t.TempDir()
		lp, up := filepath.Join(d, "lower"), filepath.Join(d, "upper")
		os.WriteFile(lp, lower, 0o600)
		os.WriteFile(up, data, 0o600)
		var out bytes.Buffer
		_, err := Flatten(context.Background(), []Layer{{Path: lp}, {Path: up}}, &out, fuzzLimits)
		if err != nil {
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("non-rejection error: %v", err)
			}
			return
		}
		checkInvariants(t, out.Bytes())
		if !isRoot() {
			return
		}
		v := newVictim(t)
		if _, err := Extract(context.Background(), &out, v.root, ExtractOptions{SkipDevices: true, Limits: fuzzLimits}); err != nil {
			t.Fatalf("Extract refused Flatten output: %v", err)
		}
		v.check(t)
	})
}

// FuzzExtract hands random bytes straight to Extract: no panic, and nothing
// outside the root may change whatever the outcome.
func FuzzExtract(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if !isRoot() {
			t.Skip("needs root")
		}
		v := newVictim(t)
		_, err := Extract(context.Background(), bytes.NewReader(data), v.root, ExtractOptions{SkipDevices: true, Limits: fuzzLimits})
		_ = err // any outcome is fine; only the outside matters
		v.check(t)
	})
}

// FuzzTreeOps is structure-aware: each 4 bytes of input become one tar
// entry built from a hostile alphabet (".." components, whiteouts,
// symlinks at the victim, hard links out of the root, ...), split into up
// to three layers. The layers go through Flatten, whose output must meet
// the contract and extract cleanly; the concatenated entries go straight to
// Extract. Either way nothing outside the root may change.
func FuzzTreeOps(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 2, 3, 0, 0, 7, 3, 0, 4})
	f.Add([]byte{2, 0, 9, 0, 7, 0, 0, 0, 0, 0, 1, 0})
	f.Add([]byte{1, 5, 0, 0, 6, 0, 0, 0, 3, 1, 1, 1, 4, 2, 0, 3})
	comps := []string{"a", "b", "etc", "..", ".", ".wh.a", ".wh..wh..opq", ".wh..", "victim", "dest-evil", "hello", ""}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4*40 {
			return
		}
		v := newVictim(t)
		targets := []string{"a", "a/b", "/etc", "..", "../victim", "../../victim/hello", v.dir, filepath.Join(v.dir, "hello"), "/", "etc/hello", "b"}
		layers := [][]ent{nil}
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
			var e ent
			switch op % 8 {
			case 0:
				e = reg(name, "content")
			case 1:
				e = dir(name)
			case 2:
				e = sym(name, target)
			case 3:
				e = hard(name, target)
			case 4:
				e = fifo(name)
			case 5:
				e = dev(name, tar.TypeChar, 1, 3)
			case 6:
				e = reg(name, "x").with(func(h *tar.Header) { h.Mode = 0o4777; h.Uid = 1000 })
			case 7:
				if len(layers) < 3 {
					layers = append(layers, nil)
				}
				continue
			}
			if strings.HasSuffix(name, "/") && e.h.Typeflag != tar.TypeDir {
				continue // archive/tar cannot write it
			}
			layers[len(layers)-1] = append(layers[len(layers)-1], e)
		}
		var out bytes.Buffer
		_, err := Flatten(context.Background(), plainLayers(t, layers...), &out, fuzzLimits)
		if err != nil && !errors.Is(err, ErrRejected) {
			t.Fatalf("non-rejection error: %v", err)
		}
		if !isRoot() {
			return
		}
		if err == nil {
			checkInvariants(t, out.Bytes())
			if _, err := Extract(context.Background(), &out, v.root, ExtractOptions{SkipDevices: true}); err != nil {
				t.Fatalf("Extract refused Flatten output: %v", err)
			}
			v.check(t)
			os.RemoveAll(v.root)
			os.Mkdir(v.root, 0o755)
			v.before = v.snapshot(t) // the reset itself touched base
		}
		var all []ent
		for _, l := range layers {
			all = append(all, l...)
		}
		Extract(context.Background(), bytes.NewReader(mkTar(t, all...)), v.root, ExtractOptions{SkipDevices: true})
		v.check(t)
	})
}
