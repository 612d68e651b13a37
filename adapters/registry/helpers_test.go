package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/regclient/regclient"
	"github.com/regclient/regclient/config"
	"github.com/regclient/regclient/types/descriptor"
	"github.com/regclient/regclient/types/manifest"
	"github.com/regclient/regclient/types/ref"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/ports"
)

// testLayer is a layer blob with the facts a manifest and config need.
type testLayer struct {
	blob      []byte
	diffID    digest.Digest
	mediaType string
}

func (l testLayer) desc() ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: l.mediaType, Digest: digest.FromBytes(l.blob), Size: int64(len(l.blob))}
}

// makeLayer builds a tar with one file of n random bytes (random, so that
// compression does not shrink it and sizes stay predictable).
func makeLayer(t testing.TB, n int, comp compression, docker bool) testLayer {
	t.Helper()
	data := make([]byte, n)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	name := "file-" + hex.EncodeToString(data[:4])
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(n), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := tb.Bytes()
	l := testLayer{diffID: digest.FromBytes(raw)}
	var out bytes.Buffer
	switch comp {
	case compNone:
		out.Write(raw)
		l.mediaType = ocispec.MediaTypeImageLayer
		if docker {
			l.mediaType = "application/vnd.docker.image.rootfs.diff.tar"
		}
	case compGzip:
		zw := gzip.NewWriter(&out)
		zw.Write(raw)
		zw.Close()
		l.mediaType = ocispec.MediaTypeImageLayerGzip
		if docker {
			l.mediaType = "application/vnd.docker.image.rootfs.diff.tar.gzip"
		}
	case compZstd:
		zw, err := zstd.NewWriter(&out)
		if err != nil {
			t.Fatal(err)
		}
		zw.Write(raw)
		zw.Close()
		l.mediaType = ocispec.MediaTypeImageLayerZstd
		if docker {
			l.mediaType = "application/vnd.docker.image.rootfs.diff.tar.zstd"
		}
	}
	l.blob = out.Bytes()
	return l
}

// testImage describes an image to push.
type testImage struct {
	layers   []testLayer
	os, arch string
	variant  string
	docker   bool // Docker schema 2 media types instead of OCI
	untagged bool // push by digest only (index children)
	// mutate edits the manifest and config before they are serialised.
	mutateConfig   func(*ocispec.Image)
	mutateManifest func(*ocispec.Manifest)
}

// pushed is what pushImage wrote.
type pushed struct {
	digest digest.Digest
	size   int64
	mt     string
	config []byte
}

func pusher(host string) *regclient.RegClient {
	return regclient.New(regclient.WithConfigHost(config.Host{Name: host, TLS: config.TLSDisabled}))
}

func pushBlob(t testing.TB, rc *regclient.RegClient, r ref.Ref, b []byte, mt string) {
	t.Helper()
	d := descriptor.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if _, err := rc.BlobPut(context.Background(), r, d, bytes.NewReader(b)); err != nil {
		t.Fatalf("push blob: %v", err)
	}
}

func pushManifest(t testing.TB, rc *regclient.RegClient, r ref.Ref, raw []byte, mt string) {
	t.Helper()
	m, err := manifest.New(manifest.WithRaw(raw), manifest.WithDesc(descriptor.Descriptor{MediaType: mt}))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.ManifestPut(context.Background(), r, m); err != nil {
		t.Fatalf("push manifest %s: %v", r.CommonName(), err)
	}
}

// pushImage pushes img to refStr and returns the manifest's descriptor
// facts.
func pushImage(t testing.TB, rc *regclient.RegClient, refStr string, img testImage) pushed {
	t.Helper()
	r, err := ref.New(refStr)
	if err != nil {
		t.Fatal(err)
	}
	if img.os == "" {
		img.os, img.arch = "linux", "amd64"
	}
	cfg := ocispec.Image{
		Platform: ocispec.Platform{OS: img.os, Architecture: img.arch, Variant: img.variant},
		RootFS:   ocispec.RootFS{Type: "layers"},
		Config:   ocispec.ImageConfig{Env: []string{"PATH=/usr/bin"}},
	}
	man := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
	cfgMT := ocispec.MediaTypeImageConfig
	if img.docker {
		man.MediaType = mtDockerV2
		cfgMT = mtDockerConfig
	}
	for _, l := range img.layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.diffID)
		man.Layers = append(man.Layers, l.desc())
		pushBlob(t, rc, r, l.blob, l.mediaType)
	}
	if img.mutateConfig != nil {
		img.mutateConfig(&cfg)
	}
	cfgRaw, _ := json.Marshal(cfg)
	pushBlob(t, rc, r, cfgRaw, cfgMT)
	man.Config = ocispec.Descriptor{MediaType: cfgMT, Digest: digest.FromBytes(cfgRaw), Size: int64(len(cfgRaw))}
	if img.mutateManifest != nil {
		img.mutateManifest(&man)
	}
	raw, _ := json.Marshal(man)
	d := digest.FromBytes(raw)
	target := r
	if img.untagged {
		target = r.SetDigest(d.String())
	}
	pushManifest(t, rc, target, raw, man.MediaType)
	return pushed{digest: d, size: int64(len(raw)), mt: man.MediaType, config: cfgRaw}
}

// pushIndex pushes an index over already pushed manifests.
func pushIndex(t testing.TB, rc *regclient.RegClient, refStr string, children map[string]pushed) digest.Digest {
	t.Helper()
	r, err := ref.New(refStr)
	if err != nil {
		t.Fatal(err)
	}
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	for plat, c := range children {
		parts := strings.Split(plat, "/")
		p := &ocispec.Platform{OS: parts[0], Architecture: parts[1]}
		if len(parts) > 2 {
			p.Variant = parts[2]
		}
		idx.Manifests = append(idx.Manifests, ocispec.Descriptor{MediaType: c.mt, Digest: c.digest, Size: c.size, Platform: p})
	}
	raw, _ := json.Marshal(idx)
	pushManifest(t, rc, r, raw, idx.MediaType)
	return digest.FromBytes(raw)
}

// request is one request seen by a fakeRegistry.
type request struct {
	method, path, rng string
}

// fakeRegistry is go-containerregistry's in-process registry behind a
// handler that records requests and can inject faults.
type fakeRegistry struct {
	srv  *httptest.Server
	host string
	next http.Handler

	mu    sync.Mutex
	reqs  []request
	fault func(w http.ResponseWriter, r *http.Request, next http.Handler) bool
}

func newFakeRegistry(t testing.TB) *fakeRegistry {
	t.Helper()
	f := &fakeRegistry{next: ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	f.host = strings.TrimPrefix(f.srv.URL, "http://")
	return f
}

func (f *fakeRegistry) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, request{method: r.Method, path: r.URL.Path, rng: r.Header.Get("Range")})
	fault := f.fault
	f.mu.Unlock()
	if fault != nil && fault(w, r, f.next) {
		return
	}
	f.next.ServeHTTP(w, r)
}

func (f *fakeRegistry) setFault(fn func(w http.ResponseWriter, r *http.Request, next http.Handler) bool) {
	f.mu.Lock()
	f.fault = fn
	f.mu.Unlock()
}

// blobGets returns the GET requests for blob d.
func (f *fakeRegistry) blobGets(d digest.Digest) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []request
	for _, r := range f.reqs {
		if r.method == http.MethodGet && strings.HasSuffix(r.path, "/blobs/"+d.String()) {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeRegistry) resetRequests() {
	f.mu.Lock()
	f.reqs = nil
	f.mu.Unlock()
}

// blobBytes fetches what the inner registry would serve for r.
func blobBytes(next http.Handler, r *http.Request) []byte {
	rec := httptest.NewRecorder()
	r2 := r.Clone(r.Context())
	r2.Header.Del("Range")
	next.ServeHTTP(rec, r2)
	return rec.Body.Bytes()
}

func isBlobGet(r *http.Request, d digest.Digest) bool {
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+d.String())
}

// newTestSource builds a Source over a fresh cache that trusts hosts as
// plain-HTTP registries, with short retry delays.
func newTestSource(t testing.TB, cache *layercache.Cache, mod func(*Options), hosts ...string) *Source {
	t.Helper()
	if cache == nil {
		var err error
		if cache, err = layercache.Open(t.TempDir(), 0); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{
		Cache:         cache,
		InsecureHosts: hosts,
		RetryDelay:    5 * time.Millisecond,
		RetryMaxDelay: 20 * time.Millisecond,
	}
	if mod != nil {
		mod(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fetch resolves and fetches ref and checks every file against its layer.
func fetch(t testing.TB, s *Source, req ports.ImageRequest) (*ports.ResolvedImage, []ports.LocalLayer, error) {
	t.Helper()
	ctx := context.Background()
	img, err := s.Resolve(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	layers, err := s.FetchLayers(ctx, req, img, nil)
	return img, layers, err
}

// checkLayers compares fetched files with the pushed layers.
func checkFetched(t testing.TB, got []ports.LocalLayer, want []testLayer) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d layers, want %d", len(got), len(want))
	}
	for i := range want {
		b, err := os.ReadFile(got[i].Path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want[i].blob) {
			t.Fatalf("layer %d: file differs from the pushed blob", i)
		}
		if got[i].DiffID != want[i].diffID.String() {
			t.Fatalf("layer %d: diff_id %s, want %s", i, got[i].DiffID, want[i].diffID)
		}
		if got[i].Descriptor.Digest != want[i].desc().Digest {
			t.Fatalf("layer %d: descriptor %s, want %s", i, got[i].Descriptor.Digest, want[i].desc().Digest)
		}
	}
}

// fakeResolver maps names to fixed addresses.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// logBuffer captures everything logged, at every level.
func logBuffer() (*slog.Logger, *testenv.Buffer) {
	b := &testenv.Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

func uniqueRepo(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// copyToLayout copies an image from a registry into an OCI layout.
func copyToLayout(t testing.TB, rc *regclient.RegClient, src, dst string) {
	t.Helper()
	rs, err := ref.New(src)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := ref.New(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.ImageCopy(context.Background(), rs, rd); err != nil {
		t.Fatal(err)
	}
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
