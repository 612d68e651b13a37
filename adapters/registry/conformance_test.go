package registry

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/go-digest"
	"github.com/regclient/regclient"
	"github.com/regclient/regclient/types/descriptor"
	"github.com/regclient/regclient/types/manifest"
	"github.com/regclient/regclient/types/ref"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/imagesourcetest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// faultProxy stands between the Source and a registry: it forwards every
// request and, on demand, demands basic auth, corrupts content fetched by
// digest or holds such a request until released.
type faultProxy struct {
	srv  *httptest.Server
	host string
	rp   *httputil.ReverseProxy

	mu         sync.Mutex
	corrupt    map[string]int // digest -> active Corrupt calls
	stalls     map[string]*stall
	user, pass string
}

type stall struct {
	arrived     chan struct{}
	arrivedOnce sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

func newFaultProxy(t *testing.T, backendHost string) *faultProxy {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: backendHost}
	p := &faultProxy{corrupt: map[string]int{}, stalls: map[string]*stall{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite:  func(r *httputil.ProxyRequest) { r.SetURL(target) },
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	p.host = strings.TrimPrefix(p.srv.URL, "http://")
	return p
}

// contentDigest returns the digest a blob or manifest GET asks for, or "".
func contentDigest(r *http.Request) string {
	if r.Method != http.MethodGet {
		return ""
	}
	parts := strings.Split(r.URL.Path, "/")
	if len(parts) < 4 || (parts[len(parts)-2] != "blobs" && parts[len(parts)-2] != "manifests") {
		return ""
	}
	if _, err := digest.Parse(parts[len(parts)-1]); err != nil {
		return "" // a tag
	}
	return parts[len(parts)-1]
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	user, pass := p.user, p.pass
	d := contentDigest(r)
	st, corrupt := p.stalls[d], p.corrupt[d] > 0
	p.mu.Unlock()
	if user != "" {
		if u, pw, ok := r.BasicAuth(); !ok || u != user || pw != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="imagesourcetest"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
	}
	if st != nil {
		st.arrivedOnce.Do(func() { close(st.arrived) })
		select {
		case <-st.release:
		case <-r.Context().Done():
			return
		}
	}
	if corrupt {
		w = &flipWriter{ResponseWriter: w}
	}
	p.rp.ServeHTTP(w, r)
}

// flipWriter inverts the first body byte: same length, same headers
// (Docker-Content-Digest included), wrong content.
type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (f *flipWriter) Write(b []byte) (int, error) {
	if !f.done && len(b) > 0 {
		f.done = true
		b = bytes.Clone(b)
		b[0] ^= 0xff
	}
	return f.ResponseWriter.Write(b)
}

func (f *flipWriter) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (p *faultProxy) Corrupt(d string) (restore func()) {
	p.mu.Lock()
	p.corrupt[d]++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.corrupt[d]--
			p.mu.Unlock()
		})
	}
}

func (p *faultProxy) Stall(d string) (<-chan struct{}, func()) {
	st := &stall{arrived: make(chan struct{}), release: make(chan struct{})}
	p.mu.Lock()
	p.stalls[d] = st
	p.mu.Unlock()
	return st.arrived, func() {
		st.releaseOnce.Do(func() {
			p.mu.Lock()
			delete(p.stalls, d)
			p.mu.Unlock()
			close(st.release)
		})
	}
}

func (p *faultProxy) RequireCredentials(user, pass string) {
	p.mu.Lock()
	p.user, p.pass = user, pass
	p.mu.Unlock()
}

// sourceHarness pushes straight to a registry and lets Sources read it
// through a faultProxy. Its sources share one layer cache.
type sourceHarness struct {
	*faultProxy
	backend string
	pusher  *regclient.RegClient
	cache   *layercache.Cache
}

var (
	_ imagesourcetest.ContentCorrupter  = (*sourceHarness)(nil)
	_ imagesourcetest.Staller           = (*sourceHarness)(nil)
	_ imagesourcetest.CredentialChecker = (*sourceHarness)(nil)
)

func newSourceHarness(t *testing.T, backend string) (imagesourcetest.Harness, error) {
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		return nil, err
	}
	return &sourceHarness{faultProxy: newFaultProxy(t, backend), backend: backend, pusher: pusher(backend), cache: cache}, nil
}

func (h *sourceHarness) MakeSource(context.Context) (ports.ImageSource, error) {
	return New(Options{
		Cache:         h.cache,
		InsecureHosts: []string{h.host},
		RetryDelay:    5 * time.Millisecond,
		RetryMaxDelay: 20 * time.Millisecond,
	})
}

func (h *sourceHarness) Repository(_ context.Context, name string) (string, error) {
	return h.host + "/" + uniqueRepo("cubetest/suite/"+name), nil
}

// backendRef turns a repository the suite holds (on the proxy) into a
// reference on the registry behind it.
func (h *sourceHarness) backendRef(repo, reference string) (ref.Ref, error) {
	s := h.backend + "/" + strings.TrimPrefix(repo, h.host+"/")
	switch {
	case reference == "":
	case strings.Contains(reference, ":"):
		s += "@" + reference
	default:
		s += ":" + reference
	}
	return ref.New(s)
}

func (h *sourceHarness) PushBlob(ctx context.Context, repo string, data []byte) error {
	r, err := h.backendRef(repo, "")
	if err != nil {
		return err
	}
	d := descriptor.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}
	_, err = h.pusher.BlobPut(ctx, r, d, bytes.NewReader(data))
	return err
}

func (h *sourceHarness) PushManifest(ctx context.Context, repo, reference, mediaType string, data []byte) error {
	r, err := h.backendRef(repo, reference)
	if err != nil {
		return err
	}
	m, err := manifest.New(manifest.WithRaw(data), manifest.WithDesc(descriptor.Descriptor{MediaType: mediaType}))
	if err != nil {
		return err
	}
	return h.pusher.ManifestPut(ctx, r, m)
}

func (h *sourceHarness) Close() {}

// TestConformance runs the suite against go-containerregistry's registry
// in process, so it runs without the test servers too.
func TestConformance(t *testing.T) {
	imagesourcetest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (imagesourcetest.Harness, error) {
		reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
		t.Cleanup(reg.Close)
		return newSourceHarness(t, strings.TrimPrefix(reg.URL, "http://"))
	})
}

// TestConformanceRealRegistry runs the suite against the docker registry
// of the test servers.
func TestConformanceRealRegistry(t *testing.T) {
	host := testenv.Get(t, testenv.Registry)
	imagesourcetest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (imagesourcetest.Harness, error) {
		return newSourceHarness(t, host)
	})
}
