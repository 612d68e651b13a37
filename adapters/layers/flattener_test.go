package layers

import (
	"context"
	"errors"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// harness runs the port's suite against Flattener (with gunzip as its
// gzip decoder); accepted trees are materialized with Extract, as the
// mkfs builder stages them.
type harness struct{ gunzip *GzipProgram }

func (h harness) MakeFlattener(context.Context) (ports.TreeFlattener, error) {
	return Flattener{Gunzip: h.gunzip}, nil
}

func (h harness) MakeLimitedFlattener(_ context.Context, lim flattenertest.Limits) (ports.TreeFlattener, error) {
	return Flattener{Limits: limitsOf(lim), Gunzip: h.gunzip}, nil
}

func (harness) Materialize(ctx context.Context, t testing.TB, tree ports.Tree, dest string) error {
	needRoot(t)
	_, err := ExtractEntries(ctx, tree, dest, ExtractOptions{SkipDevices: true})
	return err
}

func (harness) Close() {}

func limitsOf(l flattenertest.Limits) Limits {
	return Limits{MaxEntries: l.MaxEntries, MaxTotalBytes: l.MaxTotalBytes, MaxFileBytes: l.MaxFileBytes,
		MaxPathDepth: l.MaxPathDepth, MaxXattrBytes: l.MaxXattrBytes}
}

func TestConformance(t *testing.T) {
	flattenertest.RunConformanceTests(t, func(context.Context, *testing.T) (flattenertest.Harness, error) {
		return harness{}, nil
	})
}

// TestConformanceGzipProgram holds the igzip decoder to the same suite,
// the hostile corpus included.
func TestConformanceGzipProgram(t *testing.T) {
	p := &GzipProgram{Path: testenv.Tool(t, "igzip")}
	flattenertest.RunConformanceTests(t, func(context.Context, *testing.T) (flattenertest.Harness, error) {
		return harness{gunzip: p}, nil
	})
}

// TestExtractTreeCorpus holds ExtractEntries, the mkfs builder's staging, to the
// tree-level corpus.
func TestExtractTreeCorpus(t *testing.T) {
	needRoot(t)
	extract := func(lim Limits) flattenertest.TreeConsumer {
		return func(ctx context.Context, tree ports.Tree, dest string) error {
			_, err := ExtractEntries(ctx, tree, dest, ExtractOptions{SkipDevices: true, Limits: lim})
			return err
		}
	}
	flattenertest.RunTreeCorpus(t, extract(Limits{}), flattenertest.TreeOptions{
		WithLimits: func(l flattenertest.Limits) flattenertest.TreeConsumer { return extract(limitsOf(l)) },
	})
}

func TestFlattenerPort(t *testing.T) {
	ls := plainLayers(t, []ent{reg("a", "abc"), dir("d")}, []ent{reg("../x", "")})
	var got ports.TreeSlice
	use := func(tree ports.Tree) error {
		var err error
		got, err = ports.TreeEntries(tree)
		return err
	}
	st, err := Flattener{}.Flatten(context.Background(), []ports.FlattenLayer{{Path: ls[0].Path, MediaType: mtTar, Digest: "sha256:a"}}, use)
	if err != nil || st != (ports.TreeStats{Entries: 2, ContentBytes: 3}) || len(got) != 2 {
		t.Fatalf("%+v %v, %d entries", st, err, len(got))
	}
	_, err = Flattener{}.Flatten(context.Background(), []ports.FlattenLayer{{Path: ls[0].Path}, {Path: ls[1].Path, Digest: "sha256:b"}}, use)
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("got %v", err)
	}
}
