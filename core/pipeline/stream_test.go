package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// streamingSource is the fixture's source that also streams its layers.
type streamingSource struct {
	ports.ImageSource
	waitErr error
	// untilCanceled: the fetch is still running when the build ends and
	// stops only when its context is canceled (a large layer downloading).
	untilCanceled bool
	// onStream, when set, runs as StreamLayers starts.
	onStream func()
	closed   int
	mu       sync.Mutex
}

type closeCounter struct {
	io.Reader
	s *streamingSource
}

func (c closeCounter) Close() error {
	c.s.mu.Lock()
	c.s.closed++
	c.s.mu.Unlock()
	return nil
}

func (s *streamingSource) StreamLayers(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
	if s.onStream != nil {
		s.onStream()
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Size: 10}
	ls := []ports.StreamedLayer{{Descriptor: d, DiffID: "sha256:diff", Blob: closeCounter{strings.NewReader("blob"), s}}}
	return ls, func() ([]ports.LocalLayer, error) {
		if s.untilCanceled {
			<-ctx.Done()
			return nil, fmt.Errorf("blob %s: %w", d.Digest, ctx.Err())
		}
		progress(ports.PullProgress{TotalBytes: 10, DownloadedBytes: 10, TotalLayers: 1, CompletedLayers: 1})
		if s.waitErr != nil {
			return nil, s.waitErr
		}
		return []ports.LocalLayer{{Descriptor: d, Path: "/layers/1"}}, nil
	}, nil
}

func TestStreamingSourceFeedsTheFlattenerWhileFetching(t *testing.T) {
	f := newFixture(t)
	src := &streamingSource{ImageSource: f.source}
	f.pipeline.Source = src
	var phases []core.Phase
	res, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/x:1"}}, func(e Event) {
		if len(phases) == 0 || phases[len(phases)-1] != e.Phase {
			phases = append(phases, e.Phase)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.layers) != 1 || len(f.layers[0]) != 1 || f.layers[0][0].Blob == nil || f.layers[0][0].Path != "" || f.layers[0][0].DiffID != "sha256:diff" {
		t.Fatalf("flattener got %+v", f.layers)
	}
	if src.closed != 1 {
		t.Errorf("%d blobs closed, want 1", src.closed)
	}
	want := []core.Phase{core.PhasePulling, core.PhaseUnpacking, core.PhaseBuildingExt4, core.PhaseUploading, core.PhaseReady}
	if strings.Join(phaseNames(phases), ",") != strings.Join(phaseNames(want), ",") {
		t.Errorf("phases %v, want %v", phases, want)
	}
	if res.Layers != 1 || res.Phases[core.PhasePulling] < 0 {
		t.Errorf("result %+v", res)
	}
}

func phaseNames(ps []core.Phase) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p))
	}
	return out
}

// A failed fetch is the error reported, whatever the flattener made of the
// broken stream.
func TestStreamingFetchFailureWins(t *testing.T) {
	f := newFixture(t)
	boom := errors.New("registry said no")
	f.pipeline.Source = &streamingSource{ImageSource: f.source, waitErr: boom}
	f.flattener.FlattenFunc = func(context.Context, []ports.FlattenLayer, func(ports.Tree) error) (ports.TreeStats, error) {
		return ports.TreeStats{}, errors.New("corrupt-archive")
	}
	_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/x:1"}}, nil)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "fetch layers") {
		t.Fatalf("err = %v, want the fetch error", err)
	}
	if len(f.put) != 0 {
		t.Fatal("published after a failed fetch")
	}
}

// A build that fails while layers are still downloading reports its own
// error: the fetch it stopped fails with context.Canceled, which is not the
// cause (a full scratch disk was reported as "context canceled").
func TestStreamingBuildFailureWinsOverTheFetchItStopped(t *testing.T) {
	f := newFixture(t)
	f.pipeline.Source = &streamingSource{ImageSource: f.source, untilCanceled: true}
	full := errors.New("write rootfs.ext4: no space left on device")
	f.flattener.FlattenFunc = func(context.Context, []ports.FlattenLayer, func(ports.Tree) error) (ports.TreeStats, error) {
		return ports.TreeStats{}, full
	}
	_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/x:1"}}, nil)
	if !errors.Is(err, full) || errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the build's error", err)
	}
}

// A build whose injected layer cannot be written stops the downloads it
// started instead of waiting for them to finish.
func TestStreamingInjectionFailureStopsTheFetch(t *testing.T) {
	f := newFixture(t)
	scratch := f.pipeline.ScratchDir
	f.pipeline.Source = &streamingSource{ImageSource: f.source, untilCanceled: true, onStream: func() {
		// A directory where the injected layer goes: writing it fails.
		builds, _ := filepath.Glob(filepath.Join(scratch, "build-*"))
		for _, b := range builds {
			if err := os.Mkdir(filepath.Join(b, "inject.tar"), 0o700); err != nil {
				t.Error(err)
			}
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/x:1"}, Request: request(),
			Inject: Injection{Envd: []byte("\x7fELF envd")}}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "inject.tar") {
			t.Fatalf("err = %v, want the failed write of the injected layer", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("Run still waiting for the downloads after the injected layer failed")
	}
	if len(f.put) != 0 {
		t.Fatal("published after a failed injection")
	}
}

// The builder's own hash of the image is the artifact's sha256; the
// image is not read again to hash it.
func TestBuilderHashIsUsed(t *testing.T) {
	f := newFixture(t)
	var sum string
	f.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
		img := []byte("image hashed by its builder")
		s := sha256.Sum256(img)
		sum = hex.EncodeToString(s[:])
		return ports.BuildResult{SizeBytes: int64(len(img)), SHA256: sum}, os.WriteFile(spec.OutPath, img, 0o644)
	}
	res, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/x:1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != sum || string(f.put[res.ObjectKey]) != "image hashed by its builder" {
		t.Fatalf("sha %s (builder %s), published %q", res.SHA256, sum, f.put[res.ObjectKey])
	}
}

// A flattener that returns without handing a tree over (a broken
// adapter) fails the build instead of publishing whatever is on disk.
func TestFlattenerThatHandsNoTreeFails(t *testing.T) {
	f := newFixture(t)
	f.flattener.FlattenFunc = func(context.Context, []ports.FlattenLayer, func(ports.Tree) error) (ports.TreeStats, error) {
		return ports.TreeStats{}, nil
	}
	_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "r/x:1"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no tree") {
		t.Fatalf("err = %v, want a flattener that handed over no tree", err)
	}
	if len(f.put) != 0 || len(f.builder.BuildCalls()) != 0 {
		t.Fatal("built or published without a tree")
	}
}
