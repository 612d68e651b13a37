package layers

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// fuzzLimits keep each iteration small and fast.
var fuzzLimits = Limits{MaxEntries: 2000, MaxTotalBytes: 8 << 20, MaxFileBytes: 4 << 20, MaxZstdWindow: 8 << 20, MaxPathDepth: 32}

func fuzzSeeds(f *testing.F) {
	for _, s := range flattenertest.Seeds(f) {
		f.Add(s)
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
		out, _, err := flatten(t, []Layer{{Path: lp}, {Path: up}}, fuzzLimits)
		if err != nil {
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("non-rejection error: %v", err)
			}
			return
		}
		flattenertest.CheckTree(t, out)
		needRoot(t) // the extract half
		v := flattenertest.NewVictim(t)
		if _, err := extractTar(context.Background(), bytes.NewReader(out), v.Root, ExtractOptions{SkipDevices: true, Limits: fuzzLimits}); err != nil {
			t.Fatalf("Extract refused Flatten output: %v", err)
		}
		v.Check(t)
	})
}

// FuzzExtract hands whatever tree random bytes hold straight to
// ExtractEntries: no panic, and nothing outside the root may change
// whatever the outcome.
func FuzzExtract(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		needRoot(t)
		v := flattenertest.NewVictim(t)
		_, err := extractTar(context.Background(), bytes.NewReader(data), v.Root, ExtractOptions{SkipDevices: true, Limits: fuzzLimits})
		_ = err // any outcome is fine; only the outside matters
		v.Check(t)
	})
}

// FuzzTreeOps is structure-aware (flattenertest.TreeOps): the layers go
// through Flatten, whose output must meet the contract and extract
// cleanly; the concatenated entries go straight to Extract. Either way
// nothing outside the root may change.
func FuzzTreeOps(f *testing.F) {
	for _, s := range flattenertest.TreeOpsSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := flattenertest.NewVictim(t)
		layers := flattenertest.TreeOps(data, v)
		if layers == nil {
			return
		}
		out, _, err := flatten(t, plainLayers(t, layers...), fuzzLimits)
		if err != nil && !errors.Is(err, ErrRejected) {
			t.Fatalf("non-rejection error: %v", err)
		}
		if err == nil {
			flattenertest.CheckTree(t, out)
		}
		needRoot(t) // the extract half
		if err == nil {
			if _, err := extractTar(context.Background(), bytes.NewReader(out), v.Root, ExtractOptions{SkipDevices: true}); err != nil {
				t.Fatalf("Extract refused Flatten output: %v", err)
			}
			v.Check(t)
			v.Reset(t)
		}
		var all []ent
		for _, l := range layers {
			all = append(all, l...)
		}
		extractTar(context.Background(), bytes.NewReader(mkTar(t, all...)), v.Root, ExtractOptions{SkipDevices: true})
		v.Check(t)
	})
}
