package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/regclient/regclient"
	"github.com/regclient/regclient/config"
	"github.com/regclient/regclient/scheme/reg"
	"github.com/regclient/regclient/types/ref"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/ports"
)

// Options configure a Source. Zero values mean the documented defaults.
type Options struct {
	// Cache holds verified layer blobs. Required.
	Cache *layercache.Cache
	// InsecureHosts are registries spoken to over plain HTTP, as "host" or
	// "host:port" (CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES and
	// --insecure-registry; the app wires them). They are also trusted by
	// the egress policy, since the operator named them.
	InsecureHosts []string
	// Mirrors maps a registry name (docker.io, ghcr.io, host:port) to
	// mirrors tried before it. Mirror hosts are trusted by the egress
	// policy. Tags resolved through a mirror are only as fresh as the
	// mirror; everything after resolution is pulled by digest.
	Mirrors map[string][]string
	// DockerConfigPath is a docker config.json whose auths (and credential
	// helpers) are used for registries the request gives no credentials
	// for. Empty or missing: none is used; malformed: New fails.
	DockerConfigPath string
	// AllowLocalLayouts permits ocidir:// references. Off by default: such
	// a reference reads any OCI layout on the server's disk.
	AllowLocalLayouts bool
	// Concurrency is the number of layers downloaded at once (default 4).
	Concurrency int
	// Retries is the number of further attempts per blob after a transport
	// error, 5xx or 429, each resuming from the bytes already on disk
	// (default 3; negative: none). regclient retries single requests
	// underneath as well.
	Retries int
	// RetryDelay is the first backoff delay (default 500ms), doubled per
	// attempt up to RetryMaxDelay (default 30s). Both also tune regclient.
	RetryDelay    time.Duration
	RetryMaxDelay time.Duration
	// IdleTimeout fails a connection that moves no byte for this long
	// (default 2m). Bound the total time with the context.
	IdleTimeout time.Duration
	// Egress limits which addresses may be dialled; see EgressPolicy.
	Egress EgressPolicy
	// Limits reject absurd images before anything large is fetched.
	Limits Limits
	// Logger receives debug events and regclient's warnings, with
	// credentials masked. Default: discard.
	Logger *slog.Logger
	// Resolver resolves registry host names (default net.DefaultResolver).
	Resolver Resolver
	// UserAgent is sent to registries (default "cube-templatecenter").
	UserAgent string
	// Observer, when set, is told of every layer cache lookup and of the
	// layer bytes downloaded from registries (the apps count them as
	// metrics).
	Observer Observer
}

// Observer receives layer cache lookups and downloaded byte counts. It is
// called from the download goroutines, so it must be safe for concurrent
// use and quick.
type Observer interface {
	LayerCacheLookup(hit bool)
	LayerBytesPulled(n int64)
}

// Limits bound what an image may contain. Zero values mean the defaults.
type Limits struct {
	MaxManifestBytes int64 // default 4 MiB (the distribution spec's minimum)
	MaxConfigBytes   int64 // default 8 MiB
	MaxLayers        int   // default 256
	MaxLayerBytes    int64 // compressed, default 16 GiB
	MaxImageBytes    int64 // all layers compressed, default 64 GiB
	// MaxUncompressedLayerBytes caps one layer after decompression while
	// its DiffID is computed (0: no cap here; the layer applier budgets
	// sizes too).
	MaxUncompressedLayerBytes int64
}

func (l *Limits) defaults() {
	if l.MaxManifestBytes <= 0 {
		l.MaxManifestBytes = 4 << 20
	}
	if l.MaxConfigBytes <= 0 {
		l.MaxConfigBytes = 8 << 20
	}
	if l.MaxLayers <= 0 {
		l.MaxLayers = 256
	}
	if l.MaxLayerBytes <= 0 {
		l.MaxLayerBytes = 16 << 30
	}
	if l.MaxImageBytes <= 0 {
		l.MaxImageBytes = 64 << 30
	}
}

// Source resolves and fetches images from OCI registries with regclient.
// It implements ports.ImageSource and is safe for concurrent use.
type Source struct {
	opts       Options
	log        *slog.Logger
	egress     *egress
	httpClient *http.Client
	hosts      []config.Host
	insecure   map[string]bool

	mu      sync.Mutex
	clients map[string]*regclient.RegClient // per credential set
}

var _ ports.ImageSource = (*Source)(nil)

// regRetryLimit is regclient's per-request retry count (its default is 5).
const regRetryLimit = 3

// maxCredClients bounds the regclient instances kept for requests that
// carry their own credentials (each keeps its auth tokens).
const maxCredClients = 64

// New builds a Source.
func New(opts Options) (*Source, error) {
	if opts.Cache == nil {
		return nil, errors.New("registry: Options.Cache is required")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Retries == 0 {
		opts.Retries = 3
	} else if opts.Retries < 0 {
		opts.Retries = 0
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 500 * time.Millisecond
	}
	if opts.RetryMaxDelay < opts.RetryDelay {
		opts.RetryMaxDelay = max(30*time.Second, opts.RetryDelay)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "cube-templatecenter"
	}
	opts.Limits.defaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{opts: opts, log: log, insecure: map[string]bool{}, clients: map[string]*regclient.RegClient{}}

	var trusted []string
	for _, h := range opts.InsecureHosts {
		h = strings.TrimSpace(h)
		if err := checkHostEntry(h); err != nil {
			return nil, fmt.Errorf("registry: insecure registry %q: %w", h, err)
		}
		s.insecure[h] = true
		trusted = append(trusted, h)
	}
	for upstream, mirrors := range opts.Mirrors {
		if err := checkHostEntry(upstream); err != nil {
			return nil, fmt.Errorf("registry: mirrored registry %q: %w", upstream, err)
		}
		for _, m := range mirrors {
			if err := checkHostEntry(m); err != nil {
				return nil, fmt.Errorf("registry: mirror %q of %s: %w", m, upstream, err)
			}
			trusted = append(trusted, m)
		}
	}
	s.hosts = s.hostConfigs()

	if p := opts.DockerConfigPath; p != "" {
		// A missing file is a normal docker state (no login yet); an
		// unreadable or malformed one is a mistake regclient would only
		// warn about, so fail loudly.
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			log.Warn("docker config not found; using no stored registry credentials", "path", p)
			s.opts.DockerConfigPath = ""
		} else if _, err := config.DockerLoadFile(p); err != nil {
			return nil, fmt.Errorf("registry: docker config %s: %w", p, err)
		}
	}

	s.egress = newEgress(opts.Egress, trusted, opts.Resolver, opts.IdleTimeout)
	base := &http.Transport{
		// No proxy: the egress policy checks the addresses we dial, which
		// would be the proxy's.
		Proxy:                 nil,
		DialContext:           s.egress.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	s.httpClient = &http.Client{Transport: &resumeTransport{base: base}}
	return s, nil
}

// checkHostEntry accepts "host" or "host:port", nothing with a scheme,
// path, user info or whitespace.
func checkHostEntry(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if strings.ContainsAny(h, "/@ \t\r\n?#") {
		return errors.New(`want "host" or "host:port" without scheme or path`)
	}
	if _, err := ref.NewHost(h); err != nil {
		return errors.New("not a registry host name")
	}
	return nil
}

// hostConfigs turns InsecureHosts and Mirrors into regclient host entries.
func (s *Source) hostConfigs() []config.Host {
	byName := map[string]*config.Host{}
	get := func(name string) *config.Host {
		if h, ok := byName[name]; ok {
			return h
		}
		h := &config.Host{Name: name}
		if s.insecure[name] {
			h.TLS = config.TLSDisabled
		}
		byName[name] = h
		return h
	}
	for h := range s.insecure {
		get(h)
	}
	for upstream, mirrors := range s.opts.Mirrors {
		get(upstream).Mirrors = append([]string(nil), mirrors...)
		for _, m := range mirrors {
			get(m)
		}
	}
	out := make([]config.Host, 0, len(byName))
	for _, h := range byName {
		out = append(out, *h)
	}
	return out
}

// newRegClient builds a regclient that dials through the egress policy.
// cred, when set, adds the request's credentials for one registry.
func (s *Source) newRegClient(cred *config.Host, sec secrets) *regclient.RegClient {
	regLog := slog.New(&scrubHandler{inner: s.log.Handler(), secrets: sec, minLevel: slog.LevelWarn})
	ro := []reg.Opts{
		reg.WithHTTPClient(s.httpClient),
		reg.WithDelay(s.opts.RetryDelay, s.opts.RetryMaxDelay),
		// Our own per-blob retries (which resume) sit on top; keep the
		// product of both small.
		reg.WithRetryLimit(regRetryLimit),
		reg.WithManifestMax(s.opts.Limits.MaxManifestBytes, s.opts.Limits.MaxManifestBytes),
	}
	opts := []regclient.Opt{
		regclient.WithSlog(regLog),
		regclient.WithUserAgent(s.opts.UserAgent),
		regclient.WithRegOpts(ro...),
		regclient.WithConfigHostDefault(config.Host{ReqConcurrent: int64(max(3, s.opts.Concurrency+1))}),
	}
	if s.opts.DockerConfigPath != "" {
		opts = append(opts, regclient.WithDockerCredsFile(s.opts.DockerConfigPath))
	}
	opts = append(opts, regclient.WithConfigHost(s.hosts...))
	if cred != nil {
		opts = append(opts, regclient.WithConfigHost(*cred))
	}
	return regclient.New(opts...)
}

// client returns the regclient for r with the request's credentials.
func (s *Source) client(r ref.Ref, req ports.ImageRequest) *regclient.RegClient {
	if r.Scheme != "reg" || (req.Username == "" && req.Password == "") {
		// A client of its own for every call: regclient keeps a backoff per
		// host and client, and one shared by all builds would make every
		// build from a registry wait out (and, bounded by the registry
		// timeout, fail on) the backoff one broken image earned. Connections
		// are pooled by the shared HTTP client underneath.
		return s.newRegClient(nil, nil)
	}
	h := sha256.New()
	for _, p := range []string{r.Registry, req.Username, req.Password} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	key := hex.EncodeToString(h.Sum(nil))
	s.mu.Lock()
	defer s.mu.Unlock()
	if rc, ok := s.clients[key]; ok {
		return rc
	}
	if len(s.clients) >= maxCredClients {
		for k := range s.clients { // drop an arbitrary one
			delete(s.clients, k)
			break
		}
	}
	cred := &config.Host{Name: r.Registry, User: req.Username, Pass: req.Password}
	if s.insecure[r.Registry] {
		cred.TLS = config.TLSDisabled
	}
	rc := s.newRegClient(cred, newSecrets(req.Username, req.Password))
	s.clients[key] = rc
	return rc
}

// registryHost is the host:port regclient dials for a registry name.
func (s *Source) registryHost(registry string) (host, port string) {
	name := registry
	if name == config.DockerRegistry {
		name = config.DockerRegistryDNS
	}
	u, err := url.Parse("//" + name)
	if err != nil {
		return name, "443"
	}
	host, port = u.Hostname(), u.Port()
	if port == "" {
		port = "443"
		if s.insecure[registry] {
			port = "80"
		}
	}
	return host, port
}
