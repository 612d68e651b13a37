package imagesourcetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// testTimeout bounds each subtest so a hung registry fails the test.
const testTimeout = 2 * time.Minute

type env struct {
	ctx context.Context
	h   Harness
	run string
}

// repo returns a fresh repository.
func (e *env) repo(t *testing.T, name string) string {
	t.Helper()
	r, err := e.h.Repository(e.ctx, name+"-"+e.run)
	if err != nil {
		t.Fatalf("Repository(%s): %v", name, err)
	}
	return r
}

func (e *env) source(t *testing.T) ports.ImageSource {
	t.Helper()
	s, err := e.h.MakeSource(e.ctx)
	if err != nil {
		t.Fatalf("MakeSource: %v", err)
	}
	return s
}

// RunConformanceTests runs the suite against the adapter newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"ResolveTag", testResolveTag},
		{"ResolveByDigest", testResolveByDigest},
		{"PlatformFromIndex", testPlatformFromIndex},
		{"ImageForAnotherPlatform", testOtherPlatform},
		{"MovedTagGivesNewDigest", testMovedTag},
		{"StreamLayersInManifestOrder", testFetchOrder},
		{"ProgressGrowsAndCompletes", testProgress},
		{"SizeMismatchRefused", testSizeMismatch},
		{"CorruptedContentRefused", testCorrupted},
		{"DiffIDMismatchRefused", testDiffIDMismatch},
		{"MissingImage", testMissing},
		{"RefusedRequests", testRefused},
		{"CredentialsNeverInErrors", testCredentials},
		{"Cancellation", testCancellation},
		{"ConcurrentFetches", testConcurrentFetches},
	}
	run := randomHex(4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			tc.fn(t, &env{ctx: ctx, h: h, run: run})
		})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// --- checks ----------------------------------------------------------------

func (e *env) resolve(t *testing.T, s ports.ImageSource, req ports.ImageRequest) *ports.ResolvedImage {
	t.Helper()
	img, err := s.Resolve(e.ctx, req)
	if err != nil {
		t.Fatalf("Resolve(%s, platform %q): %v", req.Ref, req.Platform, err)
	}
	return img
}

// wantResolved checks img against what was pushed.
func wantResolved(t *testing.T, img *ports.ResolvedImage, p pushed, platform string) {
	t.Helper()
	if img.Digest != p.digest.String() {
		t.Fatalf("Digest = %s, want the pushed platform manifest's %s", img.Digest, p.digest)
	}
	if img.Platform != platform {
		t.Errorf("Platform = %q, want %q", img.Platform, platform)
	}
	if img.Ref == "" {
		t.Error("Ref is empty")
	}
	if d := img.ConfigDescriptor; d.Digest != p.configDesc.Digest || d.Size != p.configDesc.Size || d.MediaType != p.configDesc.MediaType {
		t.Errorf("ConfigDescriptor = %+v, want %+v", d, p.configDesc)
	}
	c := img.Config
	if c.OS != p.config.OS || c.Architecture != p.config.Architecture || c.Variant != p.config.Variant ||
		!slices.Equal(c.Config.Env, p.config.Config.Env) || !slices.Equal(c.Config.Cmd, p.config.Config.Cmd) ||
		!slices.Equal(c.RootFS.DiffIDs, p.config.RootFS.DiffIDs) || c.Created == nil || !c.Created.Equal(created) {
		t.Errorf("Config = %+v, want the pushed %+v", c, p.config)
	}
	if len(img.Layers) != len(p.manifest.Layers) {
		t.Fatalf("%d layers, want %d", len(img.Layers), len(p.manifest.Layers))
	}
	for i, want := range p.manifest.Layers {
		if got := img.Layers[i]; got.Digest != want.Digest || got.Size != want.Size || got.MediaType != want.MediaType {
			t.Errorf("layer %d = %+v, want %+v", i, got, want)
		}
	}
}

// wantFetched checks fetched layers against what was pushed: manifest
// order, descriptors, DiffIDs and the bytes on disk.
func wantFetched(t *testing.T, got []ports.LocalLayer, img *ports.ResolvedImage, p pushed) {
	t.Helper()
	if len(got) != len(p.layers) {
		t.Fatalf("StreamLayers' wait returned %d layers, want %d", len(got), len(p.layers))
	}
	for i, want := range p.layers {
		l := got[i]
		if l.Descriptor.Digest != want.desc().Digest || l.Descriptor.Size != want.desc().Size {
			t.Fatalf("layer %d: descriptor %s (%d bytes), want %s (%d bytes): not in manifest order?",
				i, l.Descriptor.Digest, l.Descriptor.Size, want.desc().Digest, want.desc().Size)
		}
		if img != nil && l.Descriptor.Digest != img.Layers[i].Digest {
			t.Fatalf("layer %d: descriptor %s, resolved image lists %s", i, l.Descriptor.Digest, img.Layers[i].Digest)
		}
		if l.DiffID != want.diffID.String() {
			t.Fatalf("layer %d: DiffID %s, want %s", i, l.DiffID, want.diffID)
		}
		b, err := os.ReadFile(l.Path)
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		if !bytes.Equal(b, want.blob) {
			t.Fatalf("layer %d: %s holds %d bytes (%s), want the pushed %d bytes (%s)",
				i, l.Path, len(b), digest.FromBytes(b), len(want.blob), want.desc().Digest)
		}
	}
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want one wrapping %v", what, err, target)
	}
}

// fetchLayers streams every layer of img (StreamLayers), reads each blob
// to its end in manifest order, checks the bytes against the descriptor,
// and returns what wait returns: the verified local layers or the first
// error. A blob whose read fails is abandoned (closed); wait then says why.
func fetchLayers(s ports.ImageSource, ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.LocalLayer, error) {
	streams, wait, err := s.StreamLayers(ctx, req, img, progress)
	if err != nil {
		return nil, err
	}
	var streamErr error
	for i, l := range streams {
		h := digest.Canonical.Digester()
		n, rerr := io.Copy(h.Hash(), l.Blob)
		l.Blob.Close()
		if rerr != nil || streamErr != nil {
			continue
		}
		if n != l.Descriptor.Size || h.Digest() != l.Descriptor.Digest {
			streamErr = fmt.Errorf("layer %d streamed %d bytes (%s), its descriptor says %d bytes (%s)",
				i, n, h.Digest(), l.Descriptor.Size, l.Descriptor.Digest)
		}
	}
	local, err := wait()
	if err == nil && streamErr != nil {
		return nil, streamErr
	}
	if err == nil {
		for i, l := range streams {
			if i < len(local) && l.DiffID != local[i].DiffID {
				return nil, fmt.Errorf("layer %d streamed with DiffID %s, wait returned %s", i, l.DiffID, local[i].DiffID)
			}
		}
	}
	return local, err
}

// resolveAndFetch runs both steps and returns the first error.
func (e *env) resolveAndFetch(ctx context.Context, s ports.ImageSource, req ports.ImageRequest) ([]ports.LocalLayer, error) {
	img, err := s.Resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	return fetchLayers(s, ctx, req, img, nil)
}

// --- resolution ----------------------------------------------------------

func testResolveTag(t *testing.T, e *env) {
	s := e.source(t)
	for _, tc := range []struct {
		name   string
		docker bool
	}{{"oci", false}, {"docker", true}} {
		t.Run(tc.name, func(t *testing.T) {
			repo := e.repo(t, "resolve-"+tc.name)
			p := e.push(t, repo, "v1", image{docker: tc.docker, layers: []layer{
				makeLayer(t, 20_000, true, tc.docker), makeLayer(t, 5_000, false, tc.docker)}})
			img := e.resolve(t, s, ports.ImageRequest{Ref: repo + ":v1"})
			wantResolved(t, img, p, "linux/amd64")
			// The default platform is linux/amd64, asked for or not.
			img = e.resolve(t, s, ports.ImageRequest{Ref: repo + ":v1", Platform: "linux/amd64"})
			wantResolved(t, img, p, "linux/amd64")
		})
	}
}

func testResolveByDigest(t *testing.T, e *env) {
	s := e.source(t)
	repo := e.repo(t, "by-digest")
	p := e.push(t, repo, "", image{layers: []layer{makeLayer(t, 8_000, true, false)}})
	img := e.resolve(t, s, ports.ImageRequest{Ref: repo + "@" + p.digest.String()})
	wantResolved(t, img, p, "linux/amd64")
	layers, err := fetchLayers(s, e.ctx, ports.ImageRequest{Ref: repo + "@" + p.digest.String()}, img, nil)
	if err != nil {
		t.Fatalf("StreamLayers: %v", err)
	}
	wantFetched(t, layers, img, p)
}

func testPlatformFromIndex(t *testing.T, e *env) {
	s := e.source(t)
	for _, docker := range []bool{false, true} {
		kind := map[bool]string{false: "oci-index", true: "docker-list"}[docker]
		t.Run(kind, func(t *testing.T) {
			repo := e.repo(t, kind)
			one := func(os, arch, variant string) pushed {
				return e.push(t, repo, "", image{os: os, arch: arch, variant: variant, docker: docker,
					layers: []layer{makeLayer(t, 2_000, true, docker)}})
			}
			amd, arm64, armv7 := one("linux", "amd64", ""), one("linux", "arm64", "v8"), one("linux", "arm", "v7")
			// Attestations are listed with platform unknown/unknown.
			att := one("unknown", "unknown", "")
			idx := e.pushIndex(t, repo, "multi", docker, []indexEntry{
				{"unknown/unknown", att}, {"linux/arm64/v8", arm64}, {"linux/amd64", amd}, {"linux/arm/v7", armv7}})
			for _, tc := range []struct {
				platform, want string
				image          pushed
			}{
				{"", "linux/amd64", amd},
				{"linux/amd64", "linux/amd64", amd},
				{"linux/arm64", "linux/arm64", arm64},
				{"linux/arm64/v8", "linux/arm64/v8", arm64},
				{"linux/arm/v7", "linux/arm/v7", armv7},
			} {
				t.Run("platform="+tc.platform, func(t *testing.T) {
					for _, ref := range []string{repo + ":multi", repo + "@" + idx.String()} {
						img := e.resolve(t, s, ports.ImageRequest{Ref: ref, Platform: tc.platform})
						if img.Digest != tc.image.digest.String() {
							t.Fatalf("Resolve(%s, %q) = %s, want %s", ref, tc.platform, img.Digest, tc.image.digest)
						}
						// linux/arm64 and linux/arm64/v8 name the same platform.
						if img.Platform != tc.want && strings.TrimSuffix(img.Platform, "/v8") != strings.TrimSuffix(tc.want, "/v8") {
							t.Errorf("Platform = %q, want %q", img.Platform, tc.want)
						}
					}
				})
			}
			for _, p := range []string{"linux/s390x", "windows/amd64", "unknown/unknown"} {
				_, err := s.Resolve(e.ctx, ports.ImageRequest{Ref: repo + ":multi", Platform: p})
				if p == "unknown/unknown" && err == nil {
					t.Fatalf("Resolve picked the attestation entry for platform %s", p)
				}
				if p != "unknown/unknown" {
					wantErrIs(t, "Resolve for "+p, err, core.ErrNotFound)
				}
			}
			// The chosen child's layers are the ones fetched.
			img := e.resolve(t, s, ports.ImageRequest{Ref: repo + ":multi", Platform: "linux/arm/v7"})
			layers, err := fetchLayers(s, e.ctx, ports.ImageRequest{Ref: repo + ":multi"}, img, nil)
			if err != nil {
				t.Fatalf("StreamLayers: %v", err)
			}
			wantFetched(t, layers, img, armv7)
		})
	}
}

func testOtherPlatform(t *testing.T, e *env) {
	s := e.source(t)
	repo := e.repo(t, "arm-only")
	p := e.push(t, repo, "v1", image{os: "linux", arch: "arm64", layers: []layer{makeLayer(t, 1_000, true, false)}})
	_, err := s.Resolve(e.ctx, ports.ImageRequest{Ref: repo + ":v1"})
	wantErrIs(t, "Resolve of an arm64-only image for linux/amd64", err, core.ErrNotFound)
	img := e.resolve(t, s, ports.ImageRequest{Ref: repo + ":v1", Platform: "linux/arm64"})
	wantResolved(t, img, p, "linux/arm64")
}

func testMovedTag(t *testing.T, e *env) {
	s := e.source(t)
	repo := e.repo(t, "moved")
	req := ports.ImageRequest{Ref: repo + ":stable"}
	first := e.push(t, repo, "stable", image{layers: []layer{makeLayer(t, 10_000, true, false)}})
	img1 := e.resolve(t, s, req)
	wantResolved(t, img1, first, "linux/amd64")

	second := e.push(t, repo, "stable", image{layers: []layer{makeLayer(t, 12_000, true, false), makeLayer(t, 3_000, false, false)}})
	img2 := e.resolve(t, s, req)
	wantResolved(t, img2, second, "linux/amd64")
	if img1.Digest == img2.Digest {
		t.Fatalf("the moved tag resolved to the old digest %s", img1.Digest)
	}
	// The first image stays reachable by digest, and fetching the image
	// resolved before the move gives its layers, not the tag's new ones.
	pinned := e.resolve(t, s, ports.ImageRequest{Ref: repo + "@" + first.digest.String()})
	wantResolved(t, pinned, first, "linux/amd64")
	layers, err := fetchLayers(s, e.ctx, req, img1, nil)
	if err != nil {
		t.Fatalf("StreamLayers of the image resolved before the tag moved: %v", err)
	}
	wantFetched(t, layers, img1, first)
	layers, err = fetchLayers(s, e.ctx, req, img2, nil)
	if err != nil {
		t.Fatalf("StreamLayers: %v", err)
	}
	wantFetched(t, layers, img2, second)
}

// --- fetching ---------------------------------------------------------------

func testFetchOrder(t *testing.T, e *env) {
	repo := e.repo(t, "order")
	a, b, c := makeLayer(t, 30_000, true, false), makeLayer(t, 7_000, false, false), makeLayer(t, 50_000, true, false)
	// The same blob twice: both positions come back.
	p := e.push(t, repo, "v1", image{layers: []layer{a, b, c, a}})
	req := ports.ImageRequest{Ref: repo + ":v1"}
	for _, name := range []string{"first fetch", "again from the same source", "from another source"} {
		t.Run(name, func(t *testing.T) {
			s := e.source(t)
			img := e.resolve(t, s, req)
			layers, err := fetchLayers(s, e.ctx, req, img, nil)
			if err != nil {
				t.Fatalf("StreamLayers: %v", err)
			}
			wantFetched(t, layers, img, p)
		})
	}
}

// progressLog records reports and checks them.
type progressLog struct {
	mu      sync.Mutex
	reports []ports.PullProgress
	inside  bool
	overlap bool
}

func (l *progressLog) record(p ports.PullProgress) {
	l.mu.Lock()
	if l.inside {
		l.overlap = true
	}
	l.inside = true
	l.reports = append(l.reports, p)
	l.inside = false
	l.mu.Unlock()
}

// check: reports arrive one at a time, totals never change, counts only
// grow and stay within the totals, and the last report is complete.
func (l *progressLog) check(t *testing.T, img *ports.ResolvedImage) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reports) == 0 {
		t.Fatal("no progress reported")
	}
	var all, distinct int64
	seen := map[digest.Digest]bool{}
	for _, d := range img.Layers {
		all += d.Size
		if !seen[d.Digest] {
			seen[d.Digest] = true
			distinct += d.Size
		}
	}
	first := l.reports[0]
	if first.TotalLayers != len(img.Layers) || first.TotalBytes < distinct || first.TotalBytes > all {
		t.Fatalf("totals %+v; want %d layers and between %d and %d bytes", first, len(img.Layers), distinct, all)
	}
	for i, r := range l.reports {
		if r.TotalBytes != first.TotalBytes || r.TotalLayers != first.TotalLayers {
			t.Fatalf("report %d changed the totals: %+v after %+v", i, r, first)
		}
		if r.DownloadedBytes < 0 || r.DownloadedBytes > r.TotalBytes || r.CompletedLayers < 0 || r.CompletedLayers > r.TotalLayers || r.SpeedBPS < 0 {
			t.Fatalf("report %d out of range: %+v", i, r)
		}
		if i > 0 {
			prev := l.reports[i-1]
			if r.DownloadedBytes < prev.DownloadedBytes || r.CompletedLayers < prev.CompletedLayers {
				t.Fatalf("report %d went backwards: %+v after %+v", i, r, prev)
			}
		}
	}
	if last := l.reports[len(l.reports)-1]; last.DownloadedBytes != last.TotalBytes || last.CompletedLayers != last.TotalLayers {
		t.Fatalf("last report %+v is not complete", last)
	}
	if l.overlap {
		t.Fatal("progress reports overlapped; they must arrive one at a time")
	}
}

func testProgress(t *testing.T, e *env) {
	repo := e.repo(t, "progress")
	p := e.push(t, repo, "v1", image{layers: []layer{
		makeLayer(t, 600_000, true, false), makeLayer(t, 300_000, false, false), makeLayer(t, 1_000, true, false)}})
	req := ports.ImageRequest{Ref: repo + ":v1"}
	s := e.source(t)
	img := e.resolve(t, s, req)
	for _, name := range []string{"download", "cache hit"} {
		t.Run(name, func(t *testing.T) {
			var log progressLog
			layers, err := fetchLayers(s, e.ctx, req, img, log.record)
			if err != nil {
				t.Fatalf("StreamLayers: %v", err)
			}
			wantFetched(t, layers, img, p)
			log.check(t, img)
		})
	}
}

// --- verification ----------------------------------------------------------

func testSizeMismatch(t *testing.T, e *env) {
	s := e.source(t)
	for _, tc := range []struct {
		name  string
		delta int64
	}{{"descriptor one byte short", -1}, {"descriptor one byte long", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			repo := e.repo(t, "size")
			l := makeLayer(t, 20_000, true, false)
			e.push(t, repo, "v1", image{layers: []layer{l}, mutateManifest: func(m *ocispec.Manifest) { m.Layers[0].Size += tc.delta }})
			layers, err := e.resolveAndFetch(e.ctx, s, ports.ImageRequest{Ref: repo + ":v1"})
			if err == nil {
				t.Fatalf("a layer of %d bytes was accepted for a descriptor of %d bytes (%d layers returned)",
					len(l.blob), int64(len(l.blob))+tc.delta, len(layers))
			}
			t.Logf("refused: %v", err)
		})
	}
	t.Run("config size", func(t *testing.T) {
		repo := e.repo(t, "cfgsize")
		e.push(t, repo, "v1", image{layers: []layer{makeLayer(t, 1_000, true, false)},
			mutateManifest: func(m *ocispec.Manifest) { m.Config.Size-- }})
		if _, err := s.Resolve(e.ctx, ports.ImageRequest{Ref: repo + ":v1"}); err == nil {
			t.Fatal("a config shorter than its descriptor was accepted")
		}
	})
}

func testCorrupted(t *testing.T, e *env) {
	cc, ok := e.h.(ContentCorrupter)
	if !ok {
		t.Skip("the harness cannot corrupt registry content")
	}
	s := e.source(t)
	t.Run("layer", func(t *testing.T) {
		repo := e.repo(t, "corrupt-layer")
		good := makeLayer(t, 10_000, true, false)
		bad := makeLayer(t, 40_000, false, false)
		p := e.push(t, repo, "v1", image{layers: []layer{good, bad}})
		req := ports.ImageRequest{Ref: repo + ":v1"}
		img := e.resolve(t, s, req)
		restore := cc.Corrupt(bad.desc().Digest.String())
		layers, err := fetchLayers(s, e.ctx, req, img, nil)
		restore()
		if err == nil {
			t.Fatalf("corrupted layer accepted (%d layers returned)", len(layers))
		}
		if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("corrupted layer reported as %v: it is neither missing nor a bad request", err)
		}
		// Nothing of the bad bytes stayed behind: with the registry healthy
		// again the same source fetches the right ones.
		layers, err = fetchLayers(s, e.ctx, req, img, nil)
		if err != nil {
			t.Fatalf("StreamLayers after the registry recovered: %v", err)
		}
		wantFetched(t, layers, img, p)
	})
	t.Run("config", func(t *testing.T) {
		repo := e.repo(t, "corrupt-config")
		p := e.push(t, repo, "v1", image{layers: []layer{makeLayer(t, 1_000, true, false)}})
		restore := cc.Corrupt(p.configDesc.Digest.String())
		_, err := s.Resolve(e.ctx, ports.ImageRequest{Ref: repo + ":v1"})
		restore()
		if err == nil {
			t.Fatal("corrupted config accepted")
		}
		wantResolved(t, e.resolve(t, s, ports.ImageRequest{Ref: repo + ":v1"}), p, "linux/amd64")
	})
	t.Run("platform manifest", func(t *testing.T) {
		repo := e.repo(t, "corrupt-manifest")
		amd := e.push(t, repo, "", image{layers: []layer{makeLayer(t, 1_000, true, false)}})
		e.pushIndex(t, repo, "v1", false, []indexEntry{{"linux/amd64", amd}})
		restore := cc.Corrupt(amd.digest.String())
		_, err := s.Resolve(e.ctx, ports.ImageRequest{Ref: repo + ":v1"})
		restore()
		if err == nil {
			t.Fatal("corrupted platform manifest accepted")
		}
		wantResolved(t, e.resolve(t, s, ports.ImageRequest{Ref: repo + ":v1"}), amd, "linux/amd64")
	})
}

// testDiffIDMismatch: a config whose diff_ids do not match the layers in
// number is refused; one that names other values is passed on as it is
// (StreamedLayer.DiffID), for the decoder to verify (the source need not
// decompress the layers).
func testDiffIDMismatch(t *testing.T, e *env) {
	s := e.source(t)
	for _, tc := range []struct {
		name    string
		mutate  func(*ocispec.Image, []layer)
		refused bool
	}{
		{"another layer's diff_id", func(c *ocispec.Image, ls []layer) { c.RootFS.DiffIDs[1] = ls[0].diffID }, false},
		{"compressed digest as diff_id", func(c *ocispec.Image, ls []layer) { c.RootFS.DiffIDs[0] = ls[0].desc().Digest }, false},
		{"one diff_id missing", func(c *ocispec.Image, _ []layer) { c.RootFS.DiffIDs = c.RootFS.DiffIDs[:1] }, true},
		{"one diff_id too many", func(c *ocispec.Image, ls []layer) { c.RootFS.DiffIDs = append(c.RootFS.DiffIDs, ls[0].diffID) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := e.repo(t, "diffid")
			ls := []layer{makeLayer(t, 5_000, true, false), makeLayer(t, 6_000, true, false)}
			var cfg ocispec.Image
			e.push(t, repo, "v1", image{layers: ls, mutateConfig: func(c *ocispec.Image) { tc.mutate(c, ls); cfg = *c }})
			req := ports.ImageRequest{Ref: repo + ":v1"}
			img, err := s.Resolve(e.ctx, req)
			if err == nil {
				var streams []ports.StreamedLayer
				var wait func() ([]ports.LocalLayer, error)
				if streams, wait, err = s.StreamLayers(e.ctx, req, img, nil); err == nil {
					for i, l := range streams {
						l.Blob.Close()
						if !tc.refused && l.DiffID != cfg.RootFS.DiffIDs[i].String() {
							t.Errorf("layer %d streamed with DiffID %s, the config says %s", i, l.DiffID, cfg.RootFS.DiffIDs[i])
						}
					}
					_, err = wait()
				}
			}
			if tc.refused && err == nil {
				t.Fatal("a config whose diff_ids do not match the layers in number was accepted")
			}
		})
	}
}

// --- errors -----------------------------------------------------------------

func testMissing(t *testing.T, e *env) {
	s := e.source(t)
	repo := e.repo(t, "present")
	p := e.push(t, repo, "v1", image{layers: []layer{makeLayer(t, 1_000, true, false)}})
	e.pushIndex(t, repo, "multi", false, []indexEntry{{"linux/amd64", p}})
	absent := digest.FromString("no such manifest " + e.run)
	for _, tc := range []struct{ name, ref, platform string }{
		{"repository", e.repo(t, "absent") + ":v1", ""},
		{"tag", repo + ":v2", ""},
		{"digest", repo + "@" + absent.String(), ""},
		{"platform in an index", repo + ":multi", "linux/riscv64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Resolve(e.ctx, ports.ImageRequest{Ref: tc.ref, Platform: tc.platform})
			wantErrIs(t, "Resolve("+tc.name+")", err, core.ErrNotFound)
		})
	}
}

func testRefused(t *testing.T, e *env) {
	s := e.source(t)
	repo := e.repo(t, "refused")
	e.push(t, repo, "v1", image{layers: []layer{makeLayer(t, 1_000, true, false)}})
	host := repo[:strings.IndexByte(repo, '/')]
	for _, tc := range []struct{ name, ref, platform string }{
		{"empty reference", "", ""},
		{"spaces", repo + ":v 1", ""},
		{"local layout", "ocidir:///etc", ""},
		{"file URL", "file:///etc/passwd", ""},
		{"http URL", "http://" + repo + ":v1", ""},
		{"path traversal", "../../etc/passwd", ""},
		{"short digest", repo + "@sha256:abc", ""},
		{"md5 digest", repo + "@md5:d41d8cd98f00b204e9800998ecf8427e", ""},
		{"digest with a path", repo + "@sha256:../../" + strings.Repeat("a", 58), ""},
		{"overlong reference", host + "/" + strings.Repeat("a/", 600) + "x:v1", ""},
		{"platform without arch", repo + ":v1", "linux"},
		{"platform with too many parts", repo + ":v1", "linux/amd64/v2/extra"},
		{"platform path traversal", repo + ":v1", "../.."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Resolve(e.ctx, ports.ImageRequest{Ref: tc.ref, Platform: tc.platform})
			wantErrIs(t, fmt.Sprintf("Resolve(%.40q, platform %q)", tc.ref, tc.platform), err, core.ErrInvalidArgument)
		})
	}
	t.Run("StreamLayers without a resolved image", func(t *testing.T) {
		_, err := fetchLayers(s, e.ctx, ports.ImageRequest{Ref: repo + ":v1"}, nil, nil)
		wantErrIs(t, "StreamLayers(nil)", err, core.ErrInvalidArgument)
	})
}

func testCredentials(t *testing.T, e *env) {
	user, pass := "suite-user-"+randomHex(4), "Pw-"+randomHex(8)+"/x@y:z"
	secrets := []string{pass, base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))}
	leaks := func(t *testing.T, what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s succeeded; the case needs an error", what)
		}
		for _, s := range append(secrets, user) {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("%s: error %q contains the credential %q", what, err, s)
			}
		}
	}
	s := e.source(t)
	repo := e.repo(t, "creds")
	p := e.push(t, repo, "v1", image{layers: []layer{makeLayer(t, 2_000, true, false)}})
	host, path, _ := strings.Cut(repo, "/")
	with := func(ref string) ports.ImageRequest {
		return ports.ImageRequest{Ref: ref, Username: user, Password: pass}
	}

	_, err := s.Resolve(e.ctx, with(repo+":missing"))
	leaks(t, "missing tag", err)
	_, err = s.Resolve(e.ctx, ports.ImageRequest{Ref: user + ":" + pass + "@" + host + "/" + path + ":v1"})
	leaks(t, "credentials pasted into the reference", err)
	_, err = s.Resolve(e.ctx, ports.ImageRequest{Ref: "https://" + user + ":" + pass + "@" + repo + ":v1"})
	leaks(t, "credentials in a URL", err)

	if cc, ok := e.h.(ContentCorrupter); ok {
		img, err := s.Resolve(e.ctx, with(repo+":v1"))
		if err != nil {
			t.Fatalf("Resolve with credentials the registry does not ask for: %v", err)
		}
		restore := cc.Corrupt(p.layers[0].desc().Digest.String())
		_, err = fetchLayers(s, e.ctx, with(repo+":v1"), img, nil)
		restore()
		leaks(t, "corrupted layer", err)
	}

	ch, ok := e.h.(CredentialChecker)
	if !ok {
		return
	}
	ch.RequireCredentials(user, pass)
	for _, tc := range []struct {
		name string
		req  ports.ImageRequest
	}{
		{"wrong password", ports.ImageRequest{Ref: repo + ":v1", Username: user, Password: pass + "-wrong"}},
		{"no credentials", ports.ImageRequest{Ref: repo + ":v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Resolve(e.ctx, tc.req)
			leaks(t, tc.name, err) // the wrong password starts with the right one
		})
	}
	img := e.resolve(t, s, with(repo+":v1"))
	wantResolved(t, img, p, "linux/amd64")
	layers, err := fetchLayers(s, e.ctx, with(repo+":v1"), img, nil)
	if err != nil {
		t.Fatalf("StreamLayers with the right credentials: %v", err)
	}
	wantFetched(t, layers, img, p)
}

// --- cancellation and concurrency ---------------------------------------------

func testCancellation(t *testing.T, e *env) {
	repo := e.repo(t, "cancel")
	p := e.push(t, repo, "v1", image{layers: []layer{makeLayer(t, 200_000, false, false), makeLayer(t, 3_000, true, false)}})
	req := ports.ImageRequest{Ref: repo + ":v1"}
	s := e.source(t)
	img := e.resolve(t, s, req)

	dead, cancel := context.WithCancel(e.ctx)
	cancel()
	_, err := s.Resolve(dead, req)
	wantErrIs(t, "Resolve with a cancelled context", err, context.Canceled)
	_, err = fetchLayers(s, dead, req, img, nil)
	wantErrIs(t, "StreamLayers with a cancelled context", err, context.Canceled)
	// Layers the source already holds are no reason to hand them over.
	heldRepo := e.repo(t, "cancel-held")
	e.push(t, heldRepo, "v1", image{layers: []layer{makeLayer(t, 5_000, false, false), makeLayer(t, 3_000, true, false)}})
	heldReq := ports.ImageRequest{Ref: heldRepo + ":v1"}
	held := e.resolve(t, s, heldReq)
	if _, err := fetchLayers(s, e.ctx, heldReq, held, nil); err != nil {
		t.Fatalf("StreamLayers: %v", err)
	}
	_, err = fetchLayers(s, dead, heldReq, held, nil)
	wantErrIs(t, "StreamLayers of held layers with a cancelled context", err, context.Canceled)

	st, ok := e.h.(Staller)
	if !ok {
		return
	}
	t.Run("mid-download", func(t *testing.T) {
		arrived, release := st.Stall(p.layers[0].desc().Digest.String())
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan error, 1)
		go func() {
			_, err := fetchLayers(s, ctx, req, img, nil)
			done <- err
		}()
		select {
		case <-arrived:
		case err := <-done:
			release()
			cancel()
			t.Fatalf("StreamLayers returned before the stalled layer was requested: %v", err)
		}
		cancel()
		err := <-done
		release()
		wantErrIs(t, "StreamLayers cancelled mid-download", err, context.Canceled)
		layers, err := fetchLayers(s, e.ctx, req, img, nil)
		if err != nil {
			t.Fatalf("StreamLayers after a cancelled one: %v", err)
		}
		wantFetched(t, layers, img, p)
	})
	t.Run("mid-resolve", func(t *testing.T) {
		arrived, release := st.Stall(p.configDesc.Digest.String())
		defer release()
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan error, 1)
		go func() {
			_, err := e.source(t).Resolve(ctx, req)
			done <- err
		}()
		select {
		case <-arrived:
		case err := <-done:
			cancel()
			t.Fatalf("Resolve returned before the stalled config was requested: %v", err)
		}
		cancel()
		wantErrIs(t, "Resolve cancelled while fetching the config", <-done, context.Canceled)
	})
}

func testConcurrentFetches(t *testing.T, e *env) {
	repo := e.repo(t, "concurrent")
	p := e.push(t, repo, "v1", image{layers: []layer{
		makeLayer(t, 300_000, true, false), makeLayer(t, 100_000, false, false), makeLayer(t, 50_000, true, false)}})
	req := ports.ImageRequest{Ref: repo + ":v1"}
	sources := []ports.ImageSource{e.source(t), e.source(t)}
	img := e.resolve(t, sources[0], req)
	const fetchers = 4
	results := make([][]ports.LocalLayer, fetchers)
	errs := make([]error, fetchers)
	var wg sync.WaitGroup
	for i := range fetchers {
		wg.Go(func() { results[i], errs[i] = fetchLayers(sources[i%len(sources)], e.ctx, req, img, nil) })
	}
	wg.Wait()
	for i := range fetchers {
		if errs[i] != nil {
			t.Fatalf("fetcher %d: %v", i, errs[i])
		}
		wantFetched(t, results[i], img, p)
	}
}
