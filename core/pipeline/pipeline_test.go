package pipeline

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
	"github.com/cubesandbox/templatecenter/testkit/testca"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

const testDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

type fixture struct {
	source    *portsmock.ImageSourceMock
	flattener *portsmock.TreeFlattenerMock
	builder   *portsmock.RootfsBuilderMock
	store     *portsmock.ArtifactStoreMock
	pipeline  *Pipeline
	put       map[string][]byte
	layers    [][]ports.FlattenLayer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{put: map[string][]byte{}}
	f.source = &portsmock.ImageSourceMock{
		ResolveFunc: func(ctx context.Context, req ports.ImageRequest) (*ports.ResolvedImage, error) {
			return &ports.ResolvedImage{Ref: req.Ref, Digest: testDigest, Platform: req.Platform}, nil
		},
		StreamLayersFunc: portsmock.Streamed(func(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
			progress(ports.PullProgress{TotalBytes: 10, DownloadedBytes: 10, TotalLayers: 1, CompletedLayers: 1})
			return []ports.LocalLayer{{Descriptor: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip}, Path: "/layers/1"}}, nil
		}),
	}
	f.flattener = &portsmock.TreeFlattenerMock{
		FlattenFunc: func(ctx context.Context, layers []ports.FlattenLayer, use func(ports.Tree) error) (ports.TreeStats, error) {
			f.layers = append(f.layers, layers)
			return ports.TreeStats{Entries: 1, ContentBytes: 4}, use(ports.TreeSlice{{Header: &tar.Header{Name: "tree", Typeflag: tar.TypeDir}}})
		},
	}
	f.builder = &portsmock.RootfsBuilderMock{
		NameFunc:   func() string { return "fake" },
		FormatFunc: func() string { return "fake/1" },
		BuildFunc: func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
			img := append([]byte("ext4:"+spec.UUID+":"), treeNames(tree)...)
			return ports.BuildResult{SizeBytes: int64(len(img))}, os.WriteFile(spec.OutPath, img, 0o644)
		},
	}
	f.store = &portsmock.ArtifactStoreMock{
		BackendFunc: func() string { return "mem" },
		PutFunc: func(ctx context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != want.SHA256 || int64(len(b)) != want.Size {
				return errors.New("verification failed")
			}
			f.put[key] = b
			return nil
		},
	}
	f.pipeline = &Pipeline{Source: f.source, Flattener: f.flattener, Builder: f.builder, Store: f.store, ScratchDir: t.TempDir()}
	return f
}

func request() core.NormalizedRequest {
	n, err := core.NormalizeFromImageRequest(&core.FromImageRequest{SourceImageRef: "reg.example/app:v1", WritableLayerSize: "20Gi", TemplateID: "tpl-a"}, nil)
	if err != nil {
		panic(err)
	}
	return n
}

func TestRunPublishesVerifiedArtifact(t *testing.T) {
	f := newFixture(t)
	var events []Event
	res, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request()}, func(e Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	wantFP, _ := core.Fingerprint(core.SpecInputFor(request(), testDigest, "", "", "fake/1"))
	if res.Fingerprint != wantFP || res.ArtifactID != "rfs-"+wantFP[:24] {
		t.Fatalf("fingerprint %s / %s, want %s", res.Fingerprint, res.ArtifactID, wantFP)
	}
	body, ok := f.put[core.ArtifactObjectKey(res.ArtifactID)]
	if !ok {
		t.Fatalf("nothing published under %s (have %v)", core.ArtifactObjectKey(res.ArtifactID), keys(f.put))
	}
	sum := sha256.Sum256(body)
	if res.SHA256 != hex.EncodeToString(sum[:]) || res.SizeBytes != int64(len(body)) {
		t.Fatalf("result sha/size %s/%d do not match published bytes", res.SHA256, res.SizeBytes)
	}
	if !bytes.Contains(body, []byte(uuidFrom(wantFP))) {
		t.Fatalf("builder did not get the fingerprint-derived UUID")
	}
	if res.Path != "" {
		t.Fatalf("Path = %q, want empty without OutPath", res.Path)
	}
	var resolved *Resolved
	last := -1
	for _, e := range events {
		if e.Resolved != nil {
			resolved = e.Resolved
		}
		if e.Progress < last {
			t.Fatalf("progress went backwards: %+v", events)
		}
		last = e.Progress
	}
	if resolved == nil || resolved.ImageDigest != testDigest || resolved.ArtifactID != res.ArtifactID {
		t.Fatalf("no Resolved event with digest and artifact id: %+v", events)
	}
	if events[len(events)-1].Phase != core.PhaseReady {
		t.Fatalf("last event %+v, want READY", events[len(events)-1])
	}
	assertEmptyDir(t, f.pipeline.ScratchDir)
}

func TestRunFailuresLeaveNothingBehind(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name  string
		setup func(f *fixture)
		want  error
	}{
		{"resolve", func(f *fixture) {
			f.source.ResolveFunc = func(context.Context, ports.ImageRequest) (*ports.ResolvedImage, error) { return nil, boom }
		}, boom},
		{"fetch", func(f *fixture) {
			f.source.StreamLayersFunc = portsmock.Streamed(func(context.Context, ports.ImageRequest, *ports.ResolvedImage, func(ports.PullProgress)) ([]ports.LocalLayer, error) {
				return nil, boom
			})
		}, boom},
		{"flatten rejects a layer", func(f *fixture) {
			f.flattener.FlattenFunc = func(ctx context.Context, l []ports.FlattenLayer, use func(ports.Tree) error) (ports.TreeStats, error) {
				return ports.TreeStats{}, &core.FieldError{Field: "layer 0 entry ../x", Reason: "path escapes the root"}
			}
		}, core.ErrInvalidArgument},
		{"builder", func(f *fixture) {
			f.builder.BuildFunc = func(ctx context.Context, s ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
				os.WriteFile(s.OutPath, []byte("half"), 0o644) // a misbehaving builder
				return ports.BuildResult{}, boom
			}
		}, boom},
		{"store", func(f *fixture) {
			f.store.PutFunc = func(context.Context, string, io.Reader, ports.ObjectInfo) error { return boom }
		}, boom},
		// A builder whose result does not describe the file it wrote (a
		// plugin that lost bytes, or lies) publishes nothing.
		{"builder misreports the image size", func(f *fixture) {
			build := f.builder.BuildFunc
			f.builder.BuildFunc = func(ctx context.Context, s ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
				res, err := build(ctx, s, tree)
				res.SizeBytes++
				return res, err
			}
		}, errBuilderSize},
	}
	for _, tc := range cases {
		// A failed build leaves OutPath as it found it: absent, or the
		// image of an earlier build (which it must not delete).
		for _, earlier := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/earlier image %v", tc.name, earlier), func(t *testing.T) {
				f := newFixture(t)
				tc.setup(f)
				out := filepath.Join(t.TempDir(), "out.ext4")
				if earlier {
					if err := os.WriteFile(out, []byte("earlier image"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request(), OutPath: out}, nil)
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if len(f.put) != 0 {
					t.Fatalf("published %v after a failure", keys(f.put))
				}
				got, rerr := os.ReadFile(out)
				switch {
				case earlier && string(got) != "earlier image":
					t.Fatalf("%s after failure: %q, %v; want the earlier image kept", out, got, rerr)
				case !earlier && !os.IsNotExist(rerr):
					t.Fatalf("%s left behind after failure", out)
				}
				assertEmptyDir(t, f.pipeline.ScratchDir)
				assertNoStage(t, filepath.Dir(out))
			})
		}
	}
}

// assertNoStage fails when a stage directory is left in dir.
func assertNoStage(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), OutStagePrefix) {
			t.Errorf("stage directory %s left in %s", e.Name(), dir)
		}
	}
}

func TestInjectionIsFingerprintedAndAppendedLast(t *testing.T) {
	f := newFixture(t)
	envd := []byte("#!/bin/sh\necho envd\n")
	sum := sha256.Sum256(envd)
	ca := testca.PEM(1)
	plain, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var injectedTar []byte
	plainFlatten := f.flattener.FlattenFunc
	f.flattener.FlattenFunc = func(ctx context.Context, layers []ports.FlattenLayer, use func(ports.Tree) error) (ports.TreeStats, error) {
		last := layers[len(layers)-1]
		b, err := os.ReadFile(last.Path)
		injectedTar = b
		if err != nil {
			return ports.TreeStats{}, err
		}
		return ports.TreeStats{}, use(ports.TreeSlice(nil))
	}
	withEnvd, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request(),
		Inject: Injection{Envd: envd, EnvdClaimedSHA256: hex.EncodeToString(sum[:]), CA: ca}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if withEnvd.Fingerprint == plain.Fingerprint {
		t.Fatal("injected content did not change the fingerprint")
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(injectedTar))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	if h := got[strings.TrimPrefix(EnvdInImagePath, "/")]; h == nil || h.Mode != 0o755 || h.Size != int64(len(envd)) {
		t.Fatalf("envd entry = %+v", h)
	}
	if len(got) != 1 {
		t.Fatalf("the injected layer holds %d entries, want envd only (the CA is baked into the tree)", len(got))
	}
	// A rotated CA is another artifact; the same CA re-encoded is not.
	f.flattener.FlattenFunc = plainFlatten
	rotated, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request(),
		Inject: Injection{Envd: envd, CA: testca.PEM(2)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Fingerprint == withEnvd.Fingerprint {
		t.Fatal("a rotated CA kept the fingerprint")
	}
	reencoded := append([]byte("\n\n"), bytes.ReplaceAll(ca, []byte("\n"), []byte("\r\n"))...)
	same, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request(),
		Inject: Injection{Envd: envd, CA: reencoded}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if same.Fingerprint != withEnvd.Fingerprint {
		t.Fatal("the same CA with other line endings changed the fingerprint")
	}
}

func TestInjectionRejectsBadInput(t *testing.T) {
	cases := []struct {
		name  string
		inj   Injection
		field string
	}{
		{"claimed sha differs", Injection{Envd: []byte("x"), EnvdClaimedSHA256: strings.Repeat("0", 64)}, "envd_sha256"},
		{"sha without data", Injection{EnvdClaimedSHA256: strings.Repeat("0", 64)}, "envd_data"},
		{"too large", Injection{Envd: make([]byte, MaxEnvdBytes+1)}, "envd_data"},
		{"ca not pem", Injection{CA: []byte("hello")}, "cube_egress_ca"},
		{"ca of two certificates", Injection{CA: append(testca.PEM(1), testca.PEM(2)...)}, "cube_egress_ca"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request(), Inject: tc.inj}, nil)
			var fe *core.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want field error on %s", err, tc.field)
			}
			if len(f.source.ResolveCalls()) != 0 {
				t.Fatal("bad injection input must be refused before contacting the registry")
			}
		})
	}
}

func TestRunHonoursCancellation(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	f.builder.BuildFunc = func(c context.Context, s ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
		cancel()
		<-c.Done()
		return ports.BuildResult{}, c.Err()
	}
	_, err := f.pipeline.Run(ctx, Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request()}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	assertEmptyDir(t, f.pipeline.ScratchDir)
}

// treeNames is what the fixture's builder writes of a tree.
func treeNames(tree ports.Tree) []byte {
	var b []byte
	for i := range tree.Len() {
		e, err := tree.Entry(i)
		if err != nil {
			panic(err)
		}
		b = append(b, e.Header.Name...)
	}
	return b
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("scratch not cleaned: %v", ents)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestAfterResolveRunsBeforeFetchAndCanStopTheBuild(t *testing.T) {
	stop := errors.New("artifact already built elsewhere")
	f := newFixture(t)
	var got Resolved
	_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request(),
		AfterResolve: func(ctx context.Context, r Resolved) error {
			got = r
			if n := len(f.source.StreamLayersCalls()); n != 0 {
				t.Errorf("AfterResolve ran after %d layer fetches", n)
			}
			return stop
		}}, nil)
	if err != stop {
		t.Fatalf("err = %v, want the hook's error unchanged", err)
	}
	if got.ImageDigest != testDigest || got.Fingerprint == "" || got.ArtifactID != "rfs-"+got.Fingerprint[:24] {
		t.Fatalf("hook got %+v", got)
	}
	if len(f.source.StreamLayersCalls()) != 0 || len(f.builder.BuildCalls()) != 0 || len(f.put) != 0 {
		t.Fatal("a stopped build fetched, built or published")
	}
	assertEmptyDir(t, f.pipeline.ScratchDir)

	// A nil error lets the build go on.
	res, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/a:1"}, Request: request(),
		AfterResolve: func(context.Context, Resolved) error { return nil }}, nil)
	if err != nil || res.SHA256 == "" {
		t.Fatalf("res=%+v err=%v", res, err)
	}
}

// TestArtifactIDNamesTheBuilder: the same image and spec built by two
// builders (or one builder before and after an output change) must not
// share an artifact id, or two replicas configured differently would
// publish different bytes under one id (before, the id ignored the builder).
func TestArtifactIDNamesTheBuilder(t *testing.T) {
	ids := map[string]string{}
	for _, format := range []string{"mkfs/1/e2fsprogs-1.47.0", "ext4stream/1", "mkfs/1/e2fsprogs-1.47.2"} {
		f := newFixture(t)
		f.builder.FormatFunc = func() string { return format }
		res, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for other, id := range ids {
			if id == res.ArtifactID {
				t.Fatalf("builders %s and %s share artifact id %s", other, format, id)
			}
		}
		ids[format] = res.ArtifactID
	}
}

// The builder's progress becomes BUILDING_EXT4 progress from 40 to 78, so
// a long write is seen moving; it never goes back. (The end of the
// download says 40 too, from the fetch's goroutine, at any point of it.)
func TestBuilderProgressIsReported(t *testing.T) {
	f := newFixture(t)
	build := f.builder.BuildFunc
	f.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
		if spec.Progress == nil {
			t.Error("the builder got no progress callback")
		} else {
			for _, done := range []int64{0, 1, 2, 4} {
				spec.Progress(done, 4)
			}
		}
		return build(ctx, spec, tree)
	}
	var got []int
	_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request()}, func(e Event) {
		if e.Phase == core.PhaseBuildingExt4 {
			got = append(got, e.Progress)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	fromBuilder := slices.DeleteFunc(slices.Clone(got), func(p int) bool { return p == 40 })
	if want := []int{49, 59, 78}; !slices.Equal(fromBuilder, want) || len(got)-len(fromBuilder) != 2 {
		t.Fatalf("BUILDING_EXT4 progress %v, want 40 twice and %v in order", got, want)
	}
}
