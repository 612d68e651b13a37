package cubeapi

import (
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

var errNoTemplateCenter = errors.New("template center address (CUBE_TEMPLATE_CENTER_ADDR) is not configured")

// initProxies builds the two forwarding handlers. Compat answers its own
// failures with the envelope (it is a public JSON route); the download
// answers with a real 502/503, which cubelet understands.
func (s *server) initProxies() error {
	if s.cfg.TemplateCenterURL == "" {
		s.compat = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			envelope.WriteError(w, r, s.log, "", errNoTemplateCenter)
		})
		s.download = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "template center is not configured", http.StatusServiceUnavailable)
		})
		return nil
	}
	base, err := wire.ParseBaseURL("CUBE_TEMPLATE_CENTER_ADDR", s.cfg.TemplateCenterURL)
	if err != nil {
		return err
	}
	target, err := url.Parse(base)
	if err != nil {
		return err
	}
	rewrite := func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.SetXForwarded()
		// The internal token never travels on public routes, nor do the
		// caller's public API credentials.
		pr.Out.Header.Del(auth.Header)
		for _, h := range auth.CredentialHeaders {
			pr.Out.Header.Del(h)
		}
	}
	// The data plane's compat routes need the internal token: the caller
	// passed this route's public authentication, and the master vouches
	// for it.
	compatRewrite := func(pr *httputil.ProxyRequest) {
		rewrite(pr)
		if t := strings.TrimSpace(s.cfg.Token); t != "" {
			pr.Out.Header.Set(auth.Header, t)
		}
	}
	s.compat = &httputil.ReverseProxy{Rewrite: compatRewrite, ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
		s.log.WarnContext(r.Context(), "compat proxy to template center failed", "err", err)
		envelope.Write(w, envelope.Response{Ret: envelope.Ret{Code: envelope.CodeInternal, Msg: "template center unavailable"}})
	}}
	proxy := &httputil.ReverseProxy{Rewrite: rewrite, BufferPool: downloadBuffers{}, ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
		s.log.WarnContext(r.Context(), "download proxy to template center failed", "err", err)
		http.Error(w, "template center unavailable", http.StatusBadGateway)
	}}
	s.download = proxy
	if target.Scheme == "http" {
		s.download = &spliceProxy{target: target, rewrite: rewrite, fallback: proxy, log: s.log}
	}
	return nil
}

// downloadBuffers lends the artifact proxy 256 KiB copy buffers instead
// of ReverseProxy's 32 KiB: a gigabyte image is then 4,000 reads and
// writes, not 32,000 of each.
type downloadBuffers struct{}

var downloadPool = sync.Pool{New: func() any { return new([256 << 10]byte) }}

func (downloadBuffers) Get() []byte  { return downloadPool.Get().(*[256 << 10]byte)[:] }
func (downloadBuffers) Put(b []byte) { downloadPool.Put((*[256 << 10]byte)(b)) }
