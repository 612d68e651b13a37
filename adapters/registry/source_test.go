package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/regclient/regclient/types/ref"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func TestFetchMediaTypes(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	tests := []struct {
		name   string
		docker bool
		comps  []compression
	}{
		{"oci gzip zstd plain", false, []compression{compGzip, compZstd, compNone}},
		{"docker gzip zstd plain", true, []compression{compGzip, compZstd, compNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var layers []testLayer
			for _, c := range tt.comps {
				layers = append(layers, makeLayer(t, 50_000, c, tt.docker))
			}
			refStr := reg.host + "/" + uniqueRepo("media") + ":v1"
			p := pushImage(t, rc, refStr, testImage{layers: layers, docker: tt.docker})
			s := newTestSource(t, nil, nil, reg.host)
			var last ports.PullProgress
			ctx := context.Background()
			req := ports.ImageRequest{Ref: refStr}
			img, err := s.Resolve(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if img.Digest != p.digest.String() {
				t.Fatalf("digest %s, want %s", img.Digest, p.digest)
			}
			if img.Platform != "linux/amd64" || img.Config.Architecture != "amd64" {
				t.Fatalf("platform %s, config arch %s", img.Platform, img.Config.Architecture)
			}
			if img.ConfigDescriptor.Digest != digest.FromBytes(p.config) {
				t.Fatalf("config descriptor %s", img.ConfigDescriptor.Digest)
			}
			got, err := s.FetchLayers(ctx, req, img, func(pp ports.PullProgress) { last = pp })
			if err != nil {
				t.Fatal(err)
			}
			checkFetched(t, got, layers)
			if last.CompletedLayers != len(layers) || last.TotalLayers != len(layers) || last.DownloadedBytes != last.TotalBytes || last.TotalBytes == 0 {
				t.Fatalf("final progress %+v", last)
			}
		})
	}
}

func TestMultiPlatformIndex(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	repo := reg.host + "/" + uniqueRepo("multi")
	amd := pushImage(t, rc, repo, testImage{layers: []testLayer{makeLayer(t, 1000, compGzip, false)}, os: "linux", arch: "amd64", untagged: true})
	arm := pushImage(t, rc, repo, testImage{layers: []testLayer{makeLayer(t, 1000, compGzip, false)}, os: "linux", arch: "arm64", variant: "v8", untagged: true})
	armv7 := pushImage(t, rc, repo, testImage{layers: []testLayer{makeLayer(t, 1000, compGzip, false)}, os: "linux", arch: "arm", variant: "v7", untagged: true})
	// Attestation manifests carry platform unknown/unknown and must never match.
	att := pushImage(t, rc, repo, testImage{layers: []testLayer{makeLayer(t, 10, compNone, false)}, os: "unknown", arch: "unknown", untagged: true})
	pushIndex(t, rc, repo+":multi", map[string]pushed{"linux/amd64": amd, "linux/arm64/v8": arm, "linux/arm/v7": armv7, "unknown/unknown": att})
	s := newTestSource(t, nil, nil, reg.host)

	tests := []struct {
		platform string
		want     digest.Digest
		arch     string
	}{
		{"", amd.digest, "amd64"},
		{"linux/amd64", amd.digest, "amd64"},
		{"linux/arm64", arm.digest, "arm64"},
		{"linux/arm64/v8", arm.digest, "arm64"},
		{"linux/arm/v7", armv7.digest, "arm"},
	}
	for _, tt := range tests {
		t.Run("platform="+tt.platform, func(t *testing.T) {
			img, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: repo + ":multi", Platform: tt.platform})
			if err != nil {
				t.Fatal(err)
			}
			if img.Digest != tt.want.String() || img.Config.Architecture != tt.arch {
				t.Fatalf("got %s (%s), want %s (%s)", img.Digest, img.Config.Architecture, tt.want, tt.arch)
			}
		})
	}
	_, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: repo + ":multi", Platform: "linux/s390x"})
	if !errors.Is(err, core.ErrNotFound) || !strings.Contains(err.Error(), "linux/s390x") {
		t.Fatalf("missing platform: err %v, want ErrNotFound naming linux/s390x", err)
	}
	// A single-platform image for another architecture is refused too.
	single := repo + ":arm-only"
	pushImage(t, rc, single, testImage{layers: []testLayer{makeLayer(t, 100, compGzip, false)}, os: "linux", arch: "arm64"})
	if _, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: single}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("arm64-only image resolved for linux/amd64: %v", err)
	}
}

func TestBadReferences(t *testing.T) {
	reg := newFakeRegistry(t)
	s := newTestSource(t, nil, func(o *Options) {
		o.Resolver = fakeResolver{
			"evil.test":     {netip.MustParseAddr("169.254.169.254")},
			"private.test":  {netip.MustParseAddr("10.1.2.3")},
			"rebind.test":   {netip.MustParseAddr("fd00:ec2::254")},
			"loopback.test": {netip.MustParseAddr("127.0.0.1")},
			"localhost":     {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
		}
	}, reg.host)
	tests := []struct {
		name, ref, platform string
		field               string
		egress              bool
	}{
		{"ocidir", "ocidir:///etc/secret-layout:latest", "", "source_image_ref", false},
		{"ocifile", "ocifile:///tmp/x.tar", "", "source_image_ref", false},
		{"http scheme", "http://evil.example/x", "", "source_image_ref", false},
		{"empty", "", "", "source_image_ref", false},
		{"uppercase", "ALPINE", "", "source_image_ref", false},
		{"newline", "alpine:latest\n", "", "source_image_ref", false},
		{"space", "alp ine", "", "source_image_ref", false},
		{"non-ascii host", "regіstry.example/x", "", "source_image_ref", false},
		{"short sha256", "alpine@sha256:0123456789abcdef0123456789abcdef", "", "source_image_ref", false},
		{"md5 digest", "alpine@md5:0123456789abcdef0123456789abcdef", "", "source_image_ref", false},
		{"userinfo", "user:hunter2@registry.example/x", "", "source_image_ref", false},
		{"long repo", reg.host + "/" + strings.Repeat("a", 300), "", "source_image_ref", false},
		{"bad platform", reg.host + "/x:1", "linux", "platform", false},
		{"metadata ip", "169.254.169.254/latest/meta-data:x", "", "source_image_ref", true},
		{"metadata ip with port", "169.254.169.254:80/latest/meta-data", "", "source_image_ref", true},
		{"name resolving to metadata", "evil.test/x:1", "", "source_image_ref", true},
		{"metadata name", "metadata.google.internal/computemetadata/v1:x", "", "source_image_ref", true},
		{"ipv6 metadata", "rebind.test/x:1", "", "source_image_ref", true},
		{"private not trusted", "private.test/x:1", "", "source_image_ref", true},
		{"loopback not trusted", "loopback.test:5000/x:1", "", "source_image_ref", true},
		{"localhost", "localhost:1/x:1", "", "source_image_ref", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: tt.ref, Platform: tt.platform})
			var fe *core.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("err = %v, want FieldError on %s", err, tt.field)
			}
			if tt.egress != errors.Is(err, ErrEgressDenied) {
				t.Fatalf("err = %v, egress denial %v", err, tt.egress)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error echoes credentials from the reference: %v", err)
			}
		})
	}
}

func TestLocalLayoutsOnlyWhenAllowed(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 2000, compGzip, false)}
	src := reg.host + "/" + uniqueRepo("layout") + ":v1"
	pushImage(t, rc, src, testImage{layers: layers})
	dir := t.TempDir()
	layoutRef := "ocidir://" + filepath.Join(dir, "layout") + ":v1"
	copyToLayout(t, rc, src, layoutRef)

	s := newTestSource(t, nil, nil)
	if _, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: layoutRef}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("ocidir accepted by default: %v", err)
	}
	s = newTestSource(t, nil, func(o *Options) { o.AllowLocalLayouts = true })
	_, got, err := fetch(t, s, ports.ImageRequest{Ref: layoutRef})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
}

// egressCase is an address host:port resolves to, and whether the default
// policy (deny) and one allowing loopback and private addresses (denyLoose)
// refuse it.
type egressCase struct {
	host, port, addr string
	deny, denyLoose  bool
}

func TestEgressPolicyTable(t *testing.T) {
	e := newEgress(EgressPolicy{TrustedHosts: []string{"trusted.test:5000"}}, nil, nil, 0)
	withPrivate := newEgress(EgressPolicy{AllowPrivate: true, AllowLoopback: true}, nil, nil, 0)
	tests := []egressCase{
		{"x", "443", "169.254.169.254", true, true},
		{"x", "443", "::ffff:169.254.169.254", true, true},
		{"x", "443", "169.254.1.1", true, true},
		{"x", "443", "fe80::1", true, true},
		{"x", "443", "fd00:ec2::254", true, true},
		{"x", "443", "100.100.100.200", true, true},
		{"x", "443", "0.0.0.0", true, true},
		{"x", "443", "::", true, true},
		{"x", "443", "224.0.0.1", true, true},
		{"x", "443", "255.255.255.255", true, true},
		{"x", "443", "127.0.0.1", true, false},
		{"x", "443", "::1", true, false},
		{"x", "443", "10.0.0.1", true, false},
		{"x", "443", "192.168.1.1", true, false},
		{"x", "443", "fd12::1", true, false},
		{"trusted.test", "5000", "127.0.0.1", false, false},
		{"trusted.test", "5000", "169.254.169.254", true, true},
		{"trusted.test", "6000", "127.0.0.1", true, false},
		{"x", "443", "8.8.8.8", false, false},
		{"x", "443", "2001:4860:4860::8888", false, false},
		{"x", "443", "0.1.2.3", true, true},
	}
	// Every IPv6 form that embeds an IPv4 address is judged by it: the
	// metadata address, loopback, a private and a public address in each.
	for _, form := range []struct {
		name                                string
		metadata, loopback, private, public string
	}{
		{"NAT64", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::808:808"},
		{"6to4", "2002:a9fe:a9fe::1", "2002:7f00:1::", "2002:c0a8:101::", "2002:808:808::"},
		{"Teredo client", "2001:0:4136:e378:8000:63bf:5601:5601", "2001:0:4136:e378:8000:63bf:80ff:fffe",
			"2001:0:4136:e378:8000:63bf:f5ff:fffe", "2001:0:4136:e378:8000:63bf:f7f7:f7f7"},
		{"Teredo server", "2001:0:a9fe:a9fe:8000:63bf:f7f7:f7f7", "2001:0:7f00:1:8000:63bf:f7f7:f7f7",
			"2001:0:a00:1:8000:63bf:f7f7:f7f7", "2001:0:808:808:8000:63bf:f7f7:f7f7"},
		{"IPv4-compatible", "::a9fe:a9fe", "::7f00:1", "::a00:1", "::808:808"},
		{"IPv4-mapped", "::ffff:a9fe:a9fe", "::ffff:7f00:1", "::ffff:a00:1", "::ffff:808:808"},
		{"IPv4-translated", "::ffff:0:a9fe:a9fe", "::ffff:0:7f00:1", "::ffff:0:a00:1", "::ffff:0:808:808"},
	} {
		tests = append(tests,
			egressCase{"x", "443", form.metadata, true, true},
			egressCase{"x", "443", form.loopback, true, false},
			egressCase{"x", "443", form.private, true, false},
			egressCase{"x", "443", form.public, false, false},
			egressCase{"trusted.test", "5000", form.loopback, false, false},
		)
	}
	// The local-use NAT64 prefix translates to non-global addresses: it is
	// private whatever it embeds, and refused outright when it embeds a
	// metadata or link-local address in any layout it fits.
	for _, tt := range []struct {
		addr            string
		deny, denyLoose bool
	}{
		{"64:ff9b:1::808:808", true, false},
		{"64:ff9b:1::a00:1", true, false},
		{"64:ff9b:1::7f00:1", true, false},
		{"64:ff9b:1::a9fe:a9fe", true, true},
		{"64:ff9b:1:a9fe:a9:fe00::", true, true},
	} {
		tests = append(tests, egressCase{"x", "443", tt.addr, tt.deny, tt.denyLoose})
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if err := e.checkAddr(tt.host, tt.port, a); (err != nil) != tt.deny {
			t.Errorf("default policy %s:%s -> %s: err %v, want deny=%v", tt.host, tt.port, tt.addr, err, tt.deny)
		}
		if err := withPrivate.checkAddr(tt.host, tt.port, a); (err != nil) != tt.denyLoose {
			t.Errorf("permissive policy %s:%s -> %s: err %v, want deny=%v", tt.host, tt.port, tt.addr, err, tt.denyLoose)
		}
	}
}

// TestDialJudgesEmbeddedAddresses: the dialer, which every registry
// connection goes through (redirects and token realms included), refuses
// a name whose DNS answer, or a literal address, embeds a refused IPv4
// address, before any socket is made: the error is ErrEgressDenied, and it
// names the embedded address.
func TestDialJudgesEmbeddedAddresses(t *testing.T) {
	addr := netip.MustParseAddr
	e := newEgress(EgressPolicy{}, nil, fakeResolver{
		"dns64.test":  {addr("64:ff9b::a9fe:a9fe")},
		"mixed.test":  {addr("2002:7f00:1::"), addr("::a00:1")},
		"teredo.test": {addr("2001:0:4136:e378:8000:63bf:80ff:fffe")},
	}, 0)
	for _, tc := range []struct{ target, says string }{
		{"dns64.test:443", "embedding 169.254.169.254 (NAT64)"},
		{"mixed.test:443", "which embeds 127.0.0.1 (6to4)"},
		{"teredo.test:443", "which embeds 127.0.0.1 (Teredo client)"},
		{"[64:ff9b::7f00:1]:443", "which embeds 127.0.0.1 (NAT64)"},
		{"[64:ff9b:1::808:808]:443", "private 64:ff9b:1::808:808"},
		{"[::a00:1]:443", "which embeds 10.0.0.1 (IPv4-compatible)"},
		{"[2001:0:a9fe:a9fe:8000:63bf:f7f7:f7f7]:443", "embedding 169.254.169.254 (Teredo server)"},
	} {
		_, err := e.DialContext(t.Context(), "tcp", tc.target)
		if !errors.Is(err, ErrEgressDenied) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("dial %s: %v, want an egress refusal saying %q", tc.target, err, tc.says)
		}
	}
}

// A trusted registry that redirects a blob to the metadata address must
// not get us to connect there: the dial-time check refuses it.
func TestRedirectToMetadataRefused(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 1000, compGzip, false)}
	refStr := reg.host + "/" + uniqueRepo("redirect") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	bad := layers[0].desc().Digest
	reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if isBlobGet(r, bad) {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam", http.StatusTemporaryRedirect)
			return true
		}
		return false
	})
	s := newTestSource(t, nil, func(o *Options) { o.Retries = -1 }, reg.host)
	_, _, err := fetch(t, s, ports.ImageRequest{Ref: refStr})
	if !errors.Is(err, ErrEgressDenied) {
		t.Fatalf("err = %v, want ErrEgressDenied", err)
	}
}

func TestMovedTagGivesNewDigest(t *testing.T) {
	host := testenv.Get(t, testenv.Registry)
	rc := pusher(host)
	refStr := host + "/" + uniqueRepo("cubetest/moved") + ":stable"
	first := pushImage(t, rc, refStr, testImage{layers: []testLayer{makeLayer(t, 1000, compGzip, false)}})
	s := newTestSource(t, nil, nil, host)
	img1, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	second := pushImage(t, rc, refStr, testImage{layers: []testLayer{makeLayer(t, 1000, compGzip, false)}})
	img2, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	if img1.Digest != first.digest.String() || img2.Digest != second.digest.String() || img1.Digest == img2.Digest {
		t.Fatalf("digests %s then %s; pushed %s then %s", img1.Digest, img2.Digest, first.digest, second.digest)
	}
	// Pinning by digest still reaches the old image.
	img, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: refStr + "@" + first.digest.String()})
	if err != nil || img.Digest != first.digest.String() {
		t.Fatalf("pinned resolve = %v, %v", img, err)
	}
}

// The Debian docker-registry 2.8 on loopback: push, resolve (tag and
// index), fetch, fetch again from cache.
func TestRealRegistry(t *testing.T) {
	host := testenv.Get(t, testenv.Registry)
	rc := pusher(host)
	repo := host + "/" + uniqueRepo("cubetest/real")
	layers := []testLayer{makeLayer(t, 200_000, compGzip, false), makeLayer(t, 100_000, compZstd, false), makeLayer(t, 10_000, compNone, false)}
	amd := pushImage(t, rc, repo, testImage{layers: layers, untagged: true})
	arm := pushImage(t, rc, repo, testImage{layers: []testLayer{makeLayer(t, 1000, compGzip, false)}, arch: "arm64", os: "linux", untagged: true})
	pushIndex(t, rc, repo+":v1", map[string]pushed{"linux/amd64": amd, "linux/arm64": arm})

	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSource(t, cache, nil, host)
	img, got, err := fetch(t, s, ports.ImageRequest{Ref: repo + ":v1"})
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != amd.digest.String() {
		t.Fatalf("digest %s, want %s", img.Digest, amd.digest)
	}
	checkFetched(t, got, layers)
	armImg, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: repo + ":v1", Platform: "linux/arm64"})
	if err != nil || armImg.Digest != arm.digest.String() {
		t.Fatalf("arm64 resolve = %v, %v", armImg, err)
	}
	// Second fetch with a fresh source: served from the cache.
	_, got2, err := fetch(t, newTestSource(t, cache, nil, host), ports.ImageRequest{Ref: repo + ":v1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Path != got2[i].Path {
			t.Fatalf("layer %d fetched to a new path on the second run", i)
		}
	}
}

func TestCacheHitNeedsNoBlobRequests(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 30_000, compGzip, false), makeLayer(t, 30_000, compZstd, false)}
	refStr := reg.host + "/" + uniqueRepo("hit") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := fetch(t, newTestSource(t, cache, nil, reg.host), ports.ImageRequest{Ref: refStr}); err != nil {
		t.Fatal(err)
	}
	reg.resetRequests()
	_, got, err := fetch(t, newTestSource(t, cache, nil, reg.host), ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	for _, l := range layers {
		if n := len(reg.blobGets(l.desc().Digest)); n != 0 {
			t.Fatalf("layer %s requested %d times on a cache hit", l.desc().Digest, n)
		}
	}
}

func TestCorruptCacheEntryIsRefetched(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 40_000, compGzip, false)}
	refStr := reg.host + "/" + uniqueRepo("corrupt") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSource(t, cache, nil, reg.host)
	_, got, err := fetch(t, s, ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the cached blob (disk corruption, a stray writer).
	p := got[0].Path
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	b[100] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second)
	os.Chtimes(p, later, later)
	reg.resetRequests()

	_, got, err = fetch(t, s, ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	if n := len(reg.blobGets(layers[0].desc().Digest)); n != 1 {
		t.Fatalf("corrupt layer fetched %d times, want 1", n)
	}
}

func TestConcurrentFetchDownloadsEachBlobOnce(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 300_000, compGzip, false), makeLayer(t, 300_000, compGzip, false), makeLayer(t, 300_000, compZstd, false)}
	refStr := reg.host + "/" + uniqueRepo("conc") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	results := make([][]ports.LocalLayer, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newTestSource(t, cache, nil, reg.host)
			_, got, err := fetch(t, s, ports.ImageRequest{Ref: refStr})
			if err != nil {
				errs <- err
				return
			}
			results[i] = got
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, r := range results {
		checkFetched(t, r, layers)
	}
	for _, l := range layers {
		if n := len(reg.blobGets(l.desc().Digest)); n != 1 {
			t.Fatalf("layer %s downloaded %d times by two concurrent fetches, want 1", l.desc().Digest, n)
		}
	}
}

func TestEvictionUnderSmallCap(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 100_000, compNone, false), makeLayer(t, 100_000, compNone, false), makeLayer(t, 100_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("evict") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	const capBytes = 150_000
	cache, err := layercache.Open(t.TempDir(), capBytes)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSource(t, cache, nil, reg.host)
	ctx := context.Background()
	req := ports.ImageRequest{Ref: refStr}
	img, err := s.Resolve(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, release, err := s.FetchLayersLeased(ctx, req, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	// While the build holds them, every layer survives although the image
	// is twice the cap.
	checkFetched(t, got, layers)
	release()
	if n, _ := cache.Usage(); n > capBytes {
		t.Fatalf("usage %d above cap %d after release", n, capBytes)
	}
	// With FetchLayers the pin ends with the context.
	cctx, cancel := context.WithCancel(ctx)
	got, err = s.FetchLayers(cctx, req, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	cancel()
	waitFor(t, func() bool { n, _ := cache.Usage(); return n <= capBytes })
}

// waitFor polls cond (for effects of context.AfterFunc); it never asserts
// on timing, it only bounds the wait.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDiffIDMismatch(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 1000, compGzip, false), makeLayer(t, 1000, compGzip, false)}
	wrong := digest.FromString("not the layer")
	refStr := reg.host + "/" + uniqueRepo("diffid") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers, mutateConfig: func(c *ocispec.Image) { c.RootFS.DiffIDs[1] = wrong }})
	s := newTestSource(t, nil, nil, reg.host)
	_, _, err := fetch(t, s, ports.ImageRequest{Ref: refStr})
	if !errors.Is(err, ErrDiffIDMismatch) {
		t.Fatalf("err = %v, want ErrDiffIDMismatch", err)
	}
	for _, want := range []string{"layer 2 of 2", wrong.String(), layers[1].diffID.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
}

func TestRejectedImages(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	// A server that must never be contacted for foreign layers.
	var foreignHits int
	var mu sync.Mutex
	foreign := newFakeRegistry(t)
	foreign.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		mu.Lock()
		foreignHits++
		mu.Unlock()
		return false
	})
	three := []testLayer{makeLayer(t, 100, compGzip, false), makeLayer(t, 100, compGzip, false), makeLayer(t, 100, compGzip, false)}
	tests := []struct {
		name   string
		img    testImage
		limits Limits
		want   error
	}{
		{"too many layers", testImage{layers: three}, Limits{MaxLayers: 2}, ErrImageRejected},
		{"layer too large", testImage{layers: three}, Limits{MaxLayerBytes: 50}, ErrImageRejected},
		{"image too large", testImage{layers: three}, Limits{MaxImageBytes: 200}, ErrImageRejected},
		{"config too large", testImage{layers: three}, Limits{MaxConfigBytes: 10}, ErrImageRejected},
		{"foreign urls", testImage{layers: three, mutateManifest: func(m *ocispec.Manifest) {
			m.Layers[0].MediaType = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
			m.Layers[0].URLs = []string{"http://" + foreign.host + "/blob"}
		}}, Limits{}, ErrImageRejected},
		{"unknown layer type", testImage{layers: three, mutateManifest: func(m *ocispec.Manifest) {
			m.Layers[0].MediaType = "application/x-unknown"
		}}, Limits{}, core.ErrUnsupported},
		{"diff_ids count", testImage{layers: three, mutateConfig: func(c *ocispec.Image) {
			c.RootFS.DiffIDs = c.RootFS.DiffIDs[:1]
		}}, Limits{}, ErrImageRejected},
		{"bad layer digest", testImage{layers: three, mutateManifest: func(m *ocispec.Manifest) {
			m.Layers[0].Digest = "sha256:../../../etc/passwd"
		}}, Limits{}, ErrImageRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refStr := reg.host + "/" + uniqueRepo("reject") + ":v1"
			pushImage(t, rc, refStr, tt.img)
			s := newTestSource(t, nil, func(o *Options) { o.Limits = tt.limits }, reg.host)
			_, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: refStr})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if foreignHits != 0 {
		t.Fatalf("foreign URL server contacted %d times", foreignHits)
	}
}

// A registry that drops the connection halfway through a blob once: the
// next request asks for the rest with Range and the layer is intact.
func TestMidBlobFailureResumesWithRange(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 400_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("resume") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	var failed atomic.Bool
	reg.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if !isBlobGet(r, d) || r.Header.Get("Range") != "" || !failed.CompareAndSwap(false, true) {
			return false
		}
		b := blobBytes(next, r)
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b[:len(b)/2])
		// Returning with bytes missing makes the server drop the
		// connection: the client sees an unexpected EOF.
		return true
	})
	s := newTestSource(t, nil, nil, reg.host)
	_, got, err := fetch(t, s, ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	gets := reg.blobGets(d)
	t.Logf("blob requests: %+v", gets)
	if len(gets) < 2 || gets[0].rng != "" || !strings.HasPrefix(gets[len(gets)-1].rng, "bytes=") || strings.HasPrefix(gets[len(gets)-1].rng, "bytes=0-") {
		t.Fatalf("blob requests %+v: want a full GET then a Range GET for the rest", gets)
	}
}

// A download cut off mid-blob (the job was cancelled) leaves a partial
// file; the next fetch resumes from it with Range instead of starting over.
func TestResumeFromPartialFileAfterCancel(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 600_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("partial") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	size := len(layers[0].blob)
	half := size / 2
	release := make(chan struct{})
	var cut atomic.Bool
	reg.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if !isBlobGet(r, d) || r.Header.Get("Range") != "" || !cut.CompareAndSwap(false, true) {
			return false
		}
		b := blobBytes(next, r)
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b[:half])
		w.(http.Flusher).Flush()
		<-release // hold the connection open until the client gives up
		return true
	})
	defer close(release)

	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSource(t, cache, nil, reg.host)
	req := ports.ImageRequest{Ref: refStr}
	img, err := s.Resolve(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.FetchLayers(ctx, req, img, nil)
		done <- err
	}()
	partial := filepath.Join(cache.Dir(), "tmp", "sha256-"+d.Encoded()+".partial")
	waitFor(t, func() bool { st, err := os.Stat(partial); return err == nil && st.Size() >= int64(half) })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	if st, err := os.Stat(partial); err != nil || st.Size() != int64(half) {
		t.Fatalf("partial file after cancel: %v %v, want %d bytes", st, err, half)
	}

	got, err := s.FetchLayers(context.Background(), req, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, []testLayer{layers[0]})
	gets := reg.blobGets(d)
	want := fmt.Sprintf("bytes=%d-%d", half, size-1)
	if len(gets) != 2 || gets[1].rng != want {
		t.Fatalf("resume request Range %q, want %q (requests %+v)", gets[len(gets)-1].rng, want, gets)
	}
}

// A connection reset mid-blob is not an EOF, so regclient gives up on the
// request; our retry resumes from the partial file in the same call.
func TestConnectionResetResumesFromPartialFile(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 500_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("reset") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	size := len(layers[0].blob)
	half := size / 2
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(cache.Dir(), "tmp", "sha256-"+d.Encoded()+".partial")
	var reset atomic.Bool
	reg.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if !isBlobGet(r, d) || r.Header.Get("Range") != "" || !reset.CompareAndSwap(false, true) {
			return false
		}
		b := blobBytes(next, r)
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return true
		}
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n", len(b))
		bw.Write(b[:half])
		bw.Flush()
		// Wait until the client has stored what it got, then reset.
		waitFor(t, func() bool { st, err := os.Stat(partial); return err == nil && st.Size() >= int64(half) })
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
		return true
	})
	_, got, err := fetch(t, newTestSource(t, cache, nil, reg.host), ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	gets := reg.blobGets(d)
	want := fmt.Sprintf("bytes=%d-%d", half, size-1)
	if len(gets) != 2 || gets[0].rng != "" || gets[1].rng != want {
		t.Fatalf("blob requests %+v, want a full GET then Range %s", gets, want)
	}
}

// A partial file with bad bytes (a crash mid-write) makes the resumed blob
// fail verification; the fetch discards it and downloads from byte 0.
func TestCorruptPartialFileIsDiscarded(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 100_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("badpartial") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := cache.Begin(context.Background(), d, int64(len(layers[0].blob)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 40_000)) // zeros, not the blob's bytes
	w.Close()
	_, got, err := fetch(t, newTestSource(t, cache, nil, reg.host), ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	gets := reg.blobGets(d)
	if len(gets) != 2 || gets[0].rng == "" || gets[1].rng != "" {
		t.Fatalf("blob requests %+v, want a Range GET then a full GET", gets)
	}
}

// A server that ignores Range and sends the whole blob again still yields
// an intact layer.
func TestResumeWhenServerIgnoresRange(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 100_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("norange") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Leave a partial behind as a crashed earlier attempt would.
	w, _, err := cache.Begin(context.Background(), d, int64(len(layers[0].blob)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(layers[0].blob[:30_000])
	w.Close()
	reg.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if isBlobGet(r, d) {
			b := blobBytes(next, r)
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
			return true
		}
		return false
	})
	_, got, err := fetch(t, newTestSource(t, cache, nil, reg.host), ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	if gets := reg.blobGets(d); len(gets) != 1 || gets[0].rng != fmt.Sprintf("bytes=30000-%d", len(layers[0].blob)-1) {
		t.Fatalf("requests %+v", gets)
	}
}

// Bad bytes from the registry are caught against the manifest's
// descriptor whatever the response headers claim, and nothing is cached.
func TestBlobContentVerifiedAgainstDescriptor(t *testing.T) {
	layers := []testLayer{makeLayer(t, 20_000, compNone, false)}
	good := layers[0].blob
	flipped := append([]byte(nil), good...)
	flipped[500] ^= 0xff
	tests := []struct {
		name    string
		content bool // detected as wrong content (rather than a refused response)
		serve   func(w http.ResponseWriter)
	}{
		{"flipped byte", true, func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", strconv.Itoa(len(flipped)))
			w.Write(flipped)
		}},
		{"flipped byte with matching Docker-Content-Digest", true, func(w http.ResponseWriter) {
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(flipped).String())
			w.Header().Set("Content-Length", strconv.Itoa(len(flipped)))
			w.Write(flipped)
		}},
		{"truncated with matching Content-Length", false, func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", strconv.Itoa(len(good)-100))
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(good[:len(good)-100]).String())
			w.Write(good[:len(good)-100])
		}},
		{"extra bytes with matching Content-Length", false, func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", strconv.Itoa(len(good)+100))
			w.Write(append(append([]byte(nil), good...), make([]byte, 100)...))
		}},
		{"extra bytes without Content-Length", true, func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush() // chunked: no length announced
			w.Write(append(append([]byte(nil), good...), make([]byte, 100)...))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newFakeRegistry(t)
			rc := pusher(reg.host)
			refStr := reg.host + "/" + uniqueRepo("lie") + ":v1"
			pushImage(t, rc, refStr, testImage{layers: layers})
			d := layers[0].desc().Digest
			reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
				if isBlobGet(r, d) {
					tt.serve(w)
					return true
				}
				return false
			})
			cache, err := layercache.Open(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = fetch(t, newTestSource(t, cache, func(o *Options) { o.Retries = 1 }, reg.host), ports.ImageRequest{Ref: refStr})
			if err == nil {
				t.Fatal("bad blob accepted")
			}
			t.Logf("error: %v (%d blob requests)", err, len(reg.blobGets(d)))
			if tt.content && !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("err = %v, want ErrDigestMismatch", err)
			}
			if _, ok, _ := cache.Get(d); ok {
				t.Fatal("bad blob cached")
			}
			if n, _ := cache.Usage(); n != 0 {
				t.Fatalf("cache holds %d bytes", n)
			}
		})
	}
}

// The config blob is checked against the manifest descriptor too.
func TestConfigVerifiedAgainstDescriptor(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	refStr := reg.host + "/" + uniqueRepo("cfg") + ":v1"
	p := pushImage(t, rc, refStr, testImage{layers: []testLayer{makeLayer(t, 100, compGzip, false)}})
	cfgDigest := digest.FromBytes(p.config)
	evil := []byte(strings.Replace(string(p.config), "PATH=/usr/bin", "PATH=/bad/bin", 1)) // same length
	reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if isBlobGet(r, cfgDigest) {
			w.Header().Set("Docker-Content-Digest", cfgDigest.String())
			w.Header().Set("Content-Length", strconv.Itoa(len(evil)))
			w.Write(evil)
			return true
		}
		return false
	})
	_, err := newTestSource(t, nil, nil, reg.host).Resolve(context.Background(), ports.ImageRequest{Ref: refStr})
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err = %v, want ErrDigestMismatch", err)
	}
}

func TestRetriesServerErrors(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 10_000, compGzip, false)}
	refStr := reg.host + "/" + uniqueRepo("retry") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	var mu sync.Mutex
	failures := 0
	reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if !isBlobGet(r, d) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if failures < 2 {
			failures++
			if failures == 1 {
				w.Header().Set("Retry-After", "0")
				http.Error(w, "slow down", http.StatusTooManyRequests)
			} else {
				http.Error(w, "unavailable", http.StatusServiceUnavailable)
			}
			return true
		}
		return false
	})
	_, got, err := fetch(t, newTestSource(t, nil, nil, reg.host), ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
}

// Resolving retries what blob downloads retry: a registry answering 503
// (or another retryable error) to the manifest or config requests
// recovers without failing the build; a refusal (404) is not retried.
func TestResolveRetriesServerErrors(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 1000, compGzip, false)}
	refStr := reg.host + "/" + uniqueRepo("resolve-retry") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError} {
		var mu sync.Mutex
		failures := 0
		reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
			if !strings.Contains(r.URL.Path, "/manifests/") && !strings.Contains(r.URL.Path, "/blobs/sha256:") {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			if failures < 2 && !isBlobGet(r, layers[0].desc().Digest) {
				failures++
				http.Error(w, "unavailable", status)
				return true
			}
			return false
		})
		if _, got, err := fetch(t, newTestSource(t, nil, nil, reg.host), ports.ImageRequest{Ref: refStr}); err != nil {
			t.Errorf("%d twice on resolve: %v", status, err)
		} else {
			checkFetched(t, got, layers)
		}
	}
	reg.setFault(nil)
	reg.resetRequests()
	missing := reg.host + "/" + uniqueRepo("resolve-missing") + ":v1"
	if _, err := newTestSource(t, nil, nil, reg.host).Resolve(context.Background(), ports.ImageRequest{Ref: missing}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("missing image: %v, want not found", err)
	}
	manifestGets := 0
	reg.mu.Lock()
	for _, r := range reg.reqs {
		if strings.Contains(r.path, "/manifests/") {
			manifestGets++
		}
	}
	reg.mu.Unlock()
	if manifestGets > 2 {
		t.Errorf("a missing image was asked for %d times, want no retries", manifestGets)
	}
}

// One image's failures do not slow down another's pulls from the same
// registry: regclient keeps a backoff per host and client, and a client
// shared by every build would make an unrelated build wait out (and, under
// the registry timeout, fail on) the backoff a broken blob earned.
func TestFailuresOfOneImageDoNotDelayAnother(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	bad := []testLayer{makeLayer(t, 1000, compGzip, false)}
	good := []testLayer{makeLayer(t, 1000, compGzip, false)}
	badRef := reg.host + "/" + uniqueRepo("broken") + ":v1"
	goodRef := reg.host + "/" + uniqueRepo("healthy") + ":v1"
	pushImage(t, rc, badRef, testImage{layers: bad})
	pushImage(t, rc, goodRef, testImage{layers: good})
	reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if isBlobGet(r, bad[0].desc().Digest) {
			http.Error(w, "broken", http.StatusInternalServerError)
			return true
		}
		return false
	})
	// Production backoff (500ms doubling), one retry of our own.
	src := newTestSource(t, nil, func(o *Options) { o.RetryDelay, o.RetryMaxDelay, o.Retries = 500*time.Millisecond, 30*time.Second, 1 }, reg.host)
	if _, _, err := fetch(t, src, ports.ImageRequest{Ref: badRef}); err == nil {
		t.Fatal("the broken image was fetched")
	}
	// The data plane bounds a resolve by its registry timeout; the healthy
	// image must resolve well within one, not after the broken image's
	// backoff (16 s here when clients were shared).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	img, err := src.Resolve(ctx, ports.ImageRequest{Ref: goodRef})
	if err != nil {
		t.Fatalf("healthy image after the broken one: %v", err)
	}
	got, err := src.FetchLayers(ctx, ports.ImageRequest{Ref: goodRef}, img, nil)
	if err != nil {
		t.Fatalf("healthy image's layers after the broken one: %v", err)
	}
	checkFetched(t, got, good)
}

func TestBasicAuth(t *testing.T) {
	const user, pass = "builder", "s3cr3t-Passw0rd"
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 5000, compGzip, false)}
	refStr := reg.host + "/" + uniqueRepo("auth") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		u, p, ok := r.BasicAuth()
		if ok && u == user && p == pass {
			return false
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="cube-test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
		return true
	})
	logger, logs := logBuffer()
	s := newTestSource(t, nil, func(o *Options) { o.Logger = logger }, reg.host)

	_, got, err := fetch(t, s, ports.ImageRequest{Ref: refStr, Username: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)

	for _, bad := range []ports.ImageRequest{
		{Ref: refStr, Username: user, Password: pass + "-wrong"},
		{Ref: refStr},
	} {
		_, err := s.Resolve(context.Background(), bad)
		if err == nil {
			t.Fatal("bad credentials accepted")
		}
		if !errors.Is(err, ErrUnauthorized) || !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("err = %v, want ErrUnauthorized", err)
		}
		if bad.Password != "" && strings.Contains(err.Error(), bad.Password) {
			t.Fatalf("error leaks the password: %v", err)
		}
	}
	if _, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: refStr, Username: user}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("username without password: %v", err)
	}
	if strings.Contains(logs.String(), pass) {
		t.Fatalf("logs contain the password:\n%s", logs)
	}
}

func TestSecretsAreScrubbed(t *testing.T) {
	sec := newSecrets("u", "hunter22")
	err := fmt.Errorf("dial http://u:hunter22@x/: %w", ErrUnauthorized)
	got := sec.clean(err)
	if strings.Contains(got.Error(), "hunter22") || !errors.Is(got, ErrUnauthorized) {
		t.Fatalf("clean = %v", got)
	}
	if errors.Unwrap(got) != nil {
		t.Fatal("scrubbed error unwraps to the original")
	}
	plain := errors.New("nothing secret")
	if sec.clean(plain) != plain {
		t.Fatal("an error without secrets was replaced")
	}
}

func TestMirrors(t *testing.T) {
	upstream := newFakeRegistry(t)
	mirror := newFakeRegistry(t)
	layers := []testLayer{makeLayer(t, 3000, compGzip, false)}
	repo := uniqueRepo("mirrored")
	// Only the mirror holds the image.
	pushImage(t, pusher(mirror.host), mirror.host+"/"+repo+":v1", testImage{layers: layers})
	s := newTestSource(t, nil, func(o *Options) {
		o.Mirrors = map[string][]string{upstream.host: {mirror.host}}
	}, upstream.host, mirror.host)
	_, got, err := fetch(t, s, ports.ImageRequest{Ref: upstream.host + "/" + repo + ":v1"})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
	if len(mirror.blobGets(layers[0].desc().Digest)) != 1 {
		t.Fatal("layer not fetched from the mirror")
	}
}

func TestNewValidatesOptions(t *testing.T) {
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	badJSON := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(badJSON, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{
		{},
		{Cache: cache, InsecureHosts: []string{"http://x"}},
		{Cache: cache, InsecureHosts: []string{"x/y"}},
		{Cache: cache, Mirrors: map[string][]string{"docker.io": {"user@mirror"}}},
		{Cache: cache, DockerConfigPath: badJSON},
	} {
		if _, err := New(o); err == nil {
			t.Fatalf("New(%+v) succeeded", o)
		}
	}
	if _, err := New(Options{Cache: cache, DockerConfigPath: filepath.Join(t.TempDir(), "missing.json")}); err != nil {
		t.Fatalf("a missing docker config must be tolerated: %v", err)
	}
}

func TestDockerConfigAuth(t *testing.T) {
	const user, pass = "cfguser", "cfg-Secret-123"
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 1000, compGzip, false)}
	refStr := reg.host + "/" + uniqueRepo("dockercfg") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if u, p, ok := r.BasicAuth(); ok && u == user && p == pass {
			return false
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="cube-test"`)
		w.WriteHeader(http.StatusUnauthorized)
		return true
	})
	cfg := filepath.Join(t.TempDir(), "config.json")
	auth := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.host, basic(user, pass))
	if err := os.WriteFile(cfg, []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newTestSource(t, nil, func(o *Options) { o.DockerConfigPath = cfg }, reg.host)
	_, got, err := fetch(t, s, ports.ImageRequest{Ref: refStr})
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, got, layers)
}

func TestParseRefDefaults(t *testing.T) {
	s := newTestSource(t, nil, nil)
	const dgst = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		in, registry, repo, tag, digest, common string
	}{
		{"alpine", "docker.io", "library/alpine", "latest", "", "docker.io/library/alpine:latest"},
		{"nginx:1.27", "docker.io", "library/nginx", "1.27", "", "docker.io/library/nginx:1.27"},
		{"index.docker.io/user/app:v2", "docker.io", "user/app", "v2", "", "docker.io/user/app:v2"},
		{"ghcr.io/org/app@" + dgst, "ghcr.io", "org/app", "", dgst, "ghcr.io/org/app@" + dgst},
		{"registry.example:5000/a/b:t@" + dgst, "registry.example:5000", "a/b", "t", dgst, "registry.example:5000/a/b:t@" + dgst},
	}
	for _, tt := range tests {
		r, err := s.parseRef(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if r.Registry != tt.registry || r.Repository != tt.repo || r.Tag != tt.tag || r.Digest != tt.digest || r.CommonName() != tt.common {
			t.Errorf("%s parsed as %+v (%s)", tt.in, r, r.CommonName())
		}
	}
}

// TestTokenFetchIsBounded: regclient fetches bearer tokens with requests
// no context can cancel; a token endpoint that trickles bytes forever must
// not hold the build (and every build sharing its credentials) for ever.
func TestTokenFetchIsBounded(t *testing.T) {
	defer func(d time.Duration) { contextlessTimeout = d }(contextlessTimeout)
	contextlessTimeout = time.Second
	done := make(chan struct{})
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"token":"`)
			for {
				select {
				case <-done:
					return
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
				io.WriteString(w, strings.Repeat("A", 1024))
				w.(http.Flusher).Flush()
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="x"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	defer close(done)
	host := strings.TrimPrefix(srv.URL, "http://")
	s := newTestSource(t, nil, func(o *Options) { o.IdleTimeout = 300 * time.Millisecond; o.Retries = -1 }, host)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := s.Resolve(ctx, ports.ImageRequest{Ref: host + "/repo:tag"})
		res <- err
	}()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("Resolve succeeded against a token endpoint that never ends")
		}
	case <-time.After(time.Minute):
		t.Fatal("Resolve still blocked a minute after its context ended: the token fetch is unbounded")
	}
}

// TestPinnedManifestMeansOneImage: a pinned digest names bytes, and the
// bytes alone must say what they are. One body with both an image's
// layers and an index's manifests, pushed once as an image manifest and
// once as an index, resolved to two different images by the same digest.
func TestPinnedManifestMeansOneImage(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	repo := reg.host + "/" + uniqueRepo("pinned")
	x := pushImage(t, rc, repo+":x", testImage{layers: []testLayer{makeLayer(t, 100, compGzip, false)}})
	y := pushImage(t, rc, repo+":y", testImage{layers: []testLayer{makeLayer(t, 100, compGzip, false)}})
	xr, err := ref.New(repo + ":x")
	if err != nil {
		t.Fatal(err)
	}
	m, err := rc.ManifestGet(context.Background(), xr)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := m.RawBody()
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	child := []map[string]any{{"mediaType": y.mt, "digest": y.digest.String(), "size": y.size, "platform": map[string]string{"os": "linux", "architecture": "amd64"}}}
	both := map[string]any{"schemaVersion": 2, "config": body["config"], "layers": body["layers"], "manifests": child}
	for _, tc := range []struct {
		name string
		body map[string]any
		as   string // Content-Type
	}{
		{"layers and manifests, as a manifest", both, mtOCIManifest},
		{"layers and manifests, as an index", both, mtOCIIndex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			pinned := repo + "@" + digest.FromBytes(b).String()
			r, err := ref.New(pinned)
			if err != nil {
				t.Fatal(err)
			}
			pushManifest(t, rc, r, b, tc.as)
			s := newTestSource(t, nil, nil, reg.host)
			img, err := s.Resolve(context.Background(), ports.ImageRequest{Ref: pinned})
			if !errors.Is(err, ErrImageRejected) {
				t.Fatalf("Resolve = %v (layers %v; x %s, y %s), want the manifest rejected", err, layerDigests(img), x.digest, y.digest)
			}
		})
	}
}

func layerDigests(img *ports.ResolvedImage) []string {
	if img == nil {
		return nil
	}
	var out []string
	for _, l := range img.Layers {
		out = append(out, l.Digest.String())
	}
	return out
}

// TestRegistryKilledMidPullGivesOneShortError: a registry that dies in the
// middle of a blob (the connection reset, then nothing listening) fails the
// fetch with one short error that names the layer once and the cause, not
// every wrapper's copy of the digest and URL.
func TestRegistryKilledMidPullGivesOneShortError(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 500_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("killed") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	half := len(layers[0].blob) / 2
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(cache.Dir(), "tmp", "sha256-"+d.Encoded()+".partial")
	var killed atomic.Bool
	reg.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if !isBlobGet(r, d) || !killed.CompareAndSwap(false, true) {
			return false
		}
		b := blobBytes(next, r)
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return true
		}
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n", len(b))
		bw.Write(b[:half])
		bw.Flush()
		waitFor(t, func() bool { st, err := os.Stat(partial); return err == nil && st.Size() >= int64(half) })
		// The process dies: nothing listens any more, the connection resets.
		reg.srv.Listener.Close()
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
		return true
	})
	_, _, err = fetch(t, newTestSource(t, cache, nil, reg.host), ports.ImageRequest{Ref: refStr})
	if err == nil {
		t.Fatal("the fetch succeeded from a dead registry")
	}
	msg := err.Error()
	if n := strings.Count(msg, d.Encoded()[:12]); n != 1 || len(msg) > 300 || !strings.Contains(msg, "layer 1 of 1") ||
		!strings.Contains(msg, "connection refused") {
		t.Fatalf("error of %d characters naming the digest %d times:\n%s\nwant one short error naming layer 1 of 1 once and the cause", len(msg), n, msg)
	}
}
