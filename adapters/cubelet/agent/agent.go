package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
)

// Config configures an Agent.
type Config struct {
	// DataDir is the root of everything the agent stores (required).
	DataDir string
	// NodeID names this node in logs and messages (required).
	NodeID string
	// Token is the node credential every call must carry in the
	// x-cube-node-token metadata (required, at least 16 characters; see
	// NewServer).
	Token string
	// MasterURLs are the base URLs (scheme, host, port and a path prefix)
	// of the masters artifacts may be downloaded from (at least one).
	// CreateImage refuses any other URL before connecting anywhere; a
	// redirect the master answers with (a presigned object store URL) is
	// followed.
	MasterURLs []string
	// FileMode is the mode of the files the agent writes (artifacts,
	// digests, run templates); directories get it plus a search bit for
	// every read bit. Default 0640 (directories 0750): nothing is
	// world-readable. A Cubelet that reads the artifacts as another user
	// needs a group both share, or 0644.
	FileMode os.FileMode
	// HTTPClient downloads artifacts. Default: a client whose redirects
	// send no Referer and drop the artifact token header when they leave
	// the original host.
	HTTPClient *http.Client
	// Logger receives structured logs (default slog.Default()). Tokens and
	// URL query strings are never logged.
	Logger *slog.Logger
	// Now and NewSandboxID are seams for tests.
	Now          func() time.Time
	NewSandboxID func() string
}

// Agent serves the Cubelet Images and CubeboxMgr services from a directory.
type Agent struct {
	cfg         Config
	log         *slog.Logger
	locks       keyedMutex
	tokenDigest []byte
	bases       []*url.URL
	dirMode     os.FileMode
}

// templatesDir is the directory under DataDir holding local run templates;
// it is therefore not a valid instance type.
const templatesDir = "templates"

// New checks cfg and prepares DataDir.
func New(cfg Config) (*Agent, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("node agent: data dir is required")
	}
	if cfg.NodeID == "" {
		return nil, errors.New("node agent: node id is required")
	}
	if cfg.Token == "" {
		return nil, errors.New("node agent: a node credential is required: every call must carry it")
	}
	if err := cubelet.CheckNodeToken(cfg.Token); err != nil {
		return nil, fmt.Errorf("node agent: the node credential %w", err)
	}
	bases, err := parseBases(cfg.MasterURLs)
	if err != nil {
		return nil, err
	}
	if cfg.FileMode == 0 {
		cfg.FileMode = DefaultFileMode
	}
	if cfg.FileMode&^0o777 != 0 || cfg.FileMode&0o600 != 0o600 {
		return nil, fmt.Errorf("node agent: file mode %#o must be permission bits that let the agent read and write its files (0600 at least)", cfg.FileMode)
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("node agent: data dir: %w", err)
	}
	cfg.DataDir = abs
	a := &Agent{cfg: cfg, tokenDigest: tokenDigest(cfg.Token), bases: bases, dirMode: dirModeOf(cfg.FileMode)}
	if err := a.mkdirs(abs, filepath.Join(abs, templatesDir)); err != nil {
		return nil, fmt.Errorf("node agent: create data dir: %w", err)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{CheckRedirect: dropTokenOffHost}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewSandboxID == nil {
		cfg.NewSandboxID = uuid.NewString
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	a.cfg, a.log = cfg, log.With("node_id", cfg.NodeID)
	return a, nil
}

// register adds the Images and CubeboxMgr services to s; NewServer puts
// the credential check in front of them.
func (a *Agent) register(s grpc.ServiceRegistrar) {
	cubeletpb.RegisterImagesServer(s, imagesServer{a: a})
	cubeletpb.RegisterCubeboxMgrServer(s, cubeboxServer{a: a})
}

// DataDir returns the absolute data directory.
func (a *Agent) DataDir() string { return a.cfg.DataDir }

// ArtifactFile is where the agent keeps the ext4 of an artifact.
func (a *Agent) ArtifactFile(instanceType, artifactID string) string {
	return filepath.Join(a.cfg.DataDir, instanceType, artifactID, artifactID+".ext4")
}

// TemplateDir is where the agent keeps a local run template.
func (a *Agent) TemplateDir(templateID string) string {
	return filepath.Join(a.cfg.DataDir, templatesDir, templateID)
}

// dropTokenOffHost stops the artifact token from following a redirect to
// another host (a presigned object-store URL needs no token, and must not
// learn it) or from https to plain http (it would cross the network in
// clear text). Referer goes on every redirect: Go's client fills it with
// the previous URL, whose query carries the token.
func dropTokenOffHost(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	req.Header.Del("Referer")
	downgrade := via[0].URL.Scheme == "https" && req.URL.Scheme != "https"
	if req.URL.Host != via[0].URL.Host || downgrade {
		req.Header.Del(core.DownloadTokenHeader)
	}
	return nil
}

// namePattern limits ids that become path components: no separators, no
// leading dot, bounded length.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkName(field, v string) error {
	if !namePattern.MatchString(v) {
		return fmt.Errorf("%s %q must be 1-128 letters, digits, '.', '_' or '-' and start with a letter or digit", field, v)
	}
	return nil
}

func checkInstanceType(v string) error {
	if err := checkName("instance type", v); err != nil {
		return err
	}
	if v == templatesDir {
		return fmt.Errorf("instance type %q is reserved", v)
	}
	return nil
}

// keyedMutex serialises work on one key (an artifact or a template) while
// letting different keys proceed in parallel.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	held chan struct{} // holds a value while the key is locked
	refs int
}

// lock waits for key, or for ctx to end: a call whose caller gave up
// while another held the key returns ctx's error and does nothing (the
// caller has recorded it as failed and moved on).
func (k *keyedMutex) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{held: make(chan struct{}, 1)}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	unlock = func() {
		<-e.held
		release()
	}
	select {
	case e.held <- struct{}{}:
		// Both may have been ready: a caller gone meanwhile still does
		// nothing.
		if ctx.Err() == nil {
			return unlock, nil
		}
		unlock()
	case <-ctx.Done():
		release()
	}
	return nil, fmt.Errorf("gave up waiting for another call on %s: %w", key, ctx.Err())
}

func ok() *cubeletpb.Ret {
	return &cubeletpb.Ret{RetCode: cubeletpb.ErrorCode_Success, RetMsg: "success"}
}

func fail(code cubeletpb.ErrorCode, format string, args ...any) *cubeletpb.Ret {
	return &cubeletpb.Ret{RetCode: code, RetMsg: fmt.Sprintf(format, args...)}
}
