package masterapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/samber/do/v2"
	"google.golang.org/grpc"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/adapters/joblog"
	"github.com/cubesandbox/templatecenter/adapters/nodedir"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// ShutdownTimeout bounds the graceful part of a shutdown: in-flight
// requests, the current sweep pass and background resumes. Resumes still
// running then are abandoned; their jobs stay in a post-build phase and the
// sweeper of the next start replays them.
const ShutdownTimeout = 30 * time.Second

// Options are what the control plane needs beyond its configuration.
type Options struct {
	Config config.Config
	Logger *slog.Logger
	// Parts opened elsewhere (dev mode); nil opens them from Config. A
	// store handed in is already migrated.
	Store    *entstore.Store
	Locker   ports.Locker
	Progress ports.ProgressSink
	// ServerTimeouts bound slow clients of the HTTP server (zero fields:
	// startup.DefaultServerTimeouts).
	ServerTimeouts startup.ServerTimeouts
}

// Check validates what serve needs before anything is opened or listened
// on: the tokens, the public API's credentials and the addresses.
func Check(cfg config.Config) error {
	// Fail closed: without a shared secret the callback route would be open.
	if err := auth.CheckConfig(cfg.CallbackToken, cfg.CallbackInsecureNoToken); err != nil {
		return err
	}
	if _, err := nodedir.Parse(cfg.Master.Nodes); err != nil {
		return fmt.Errorf("CUBE_MASTER_NODES: %w", err)
	}
	if _, err := wire.ParseBaseURL("CUBE_TEMPLATE_CENTER_ADDR", cfg.Master.TemplateCenterAddr); err != nil {
		return err
	}
	if _, _, err := nodeDialOptions(cfg); err != nil {
		return err
	}
	// Without a credential the public API would be refused to all, or
	// (what the operator more likely meant) open: they must say which.
	a := cfg.Master.Auth
	return auth.CheckPublicConfig(a.Enabled, a.SecretKeys, a.BearerTokens)
}

// nodeDialOptions are the options of every connection to a node (calls
// and health probes): the node credential and, when configured, TLS.
// Errors name the setting; none quotes the credential.
func nodeDialOptions(cfg config.Config) ([]grpc.DialOption, bool, error) {
	m := cfg.Master
	if err := cubelet.CheckNodeToken(m.NodeToken); err != nil {
		return nil, false, fmt.Errorf("CUBE_MASTER_NODE_TOKEN %w", err)
	}
	creds := cubelet.NodeCredentials{Token: strings.TrimSpace(m.NodeToken), CAFile: m.NodeTLS.CA, CertFile: m.NodeTLS.Cert, KeyFile: m.NodeTLS.Key}
	opts, secure, err := creds.DialOptions()
	if err != nil {
		return nil, false, fmt.Errorf("CUBE_MASTER_NODE_TLS_CA/_CERT/_KEY: %w", err)
	}
	return opts, secure, nil
}

// Run serves the control plane on ln until ctx ends, then shuts down
// gracefully.
func Run(ctx context.Context, o Options, ln net.Listener) error {
	cfg, log := o.Config, o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := Check(cfg); err != nil {
		return err
	}
	nodes, _ := nodedir.Parse(cfg.Master.Nodes)
	tcBase, _ := wire.ParseBaseURL("CUBE_TEMPLATE_CENTER_ADDR", cfg.Master.TemplateCenterAddr)
	base, err := downloadBaseURL(cfg.Master.DownloadBaseURL, cfg.Master.Listen, ln.Addr())
	if err != nil {
		return err
	}

	dial, secure, _ := nodeDialOptions(cfg)
	i := newInjector(wiring{cfg: cfg, log: log, nodes: nodes, tcBase: tcBase, downloadBase: base, nodeDial: dial, nodeSecure: secure,
		store: o.Store, locker: o.Locker, progress: o.Progress})
	defer i.Shutdown()

	st, err := do.Invoke[*entstore.Store](i)
	if err != nil {
		return err
	}
	if o.Store == nil {
		defer st.Close()
		if cfg.AutoMigrate {
			if err := startup.Migrate(ctx, st, cfg.Master.DBDSN, log); err != nil {
				return err
			}
		} else {
			log.Warn("CUBE_AUTO_MIGRATION=false: schema migrations not applied; run `cubemaster migrate` out of band")
		}
	}
	// Closed before the store: its last lines are written first.
	defer do.MustInvoke[*joblog.Recorder](i).Close()
	dir, err := do.Invoke[*nodedir.Directory](i)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.Start(ctx); err != nil {
		return err
	}
	agent, err := do.Invoke[*cubelet.Client](i)
	if err != nil {
		return err
	}
	defer agent.Close()
	svc, err := do.Invoke[*control.Service](i)
	if err != nil {
		return err
	}
	// Credentials sealed with an older key, or the old way (with the
	// callback token), are sealed again with the current key.
	switch n, stale, bad, err := svc.ResealCredentials(ctx); {
	case err != nil:
		log.Warn("sealing registry credentials again failed; the next start retries", "err", err)
	case stale > 0:
		log.Warn("registry credentials sealed with the callback token's key are kept that way until a sealing key is set (CUBE_MASTER_SEALING_KEYS or CUBE_MASTER_SEALING_KEY_FILE)", "jobs", stale)
	case n > 0 || bad > 0:
		log.Info("registry credentials sealed again with the current key", "jobs", n, "unreadable", bad)
	}
	router, err := do.Invoke[http.Handler](i)
	if err != nil {
		return err
	}

	healthy := 0
	for _, s := range dir.Statuses() {
		if s.Healthy {
			healthy++
		}
	}
	progress := "in-memory"
	switch {
	case o.Progress != nil:
		progress = "shared in-process"
	case cfg.RedisAddr != "":
		progress = "redis " + cfg.RedisAddr
	}
	timeouts := o.ServerTimeouts
	if timeouts.Idle <= 0 {
		timeouts.Idle = cfg.HTTP.IdleTimeout
	}
	srv := startup.HTTPServer(router, timeouts)
	if a := cfg.Master.Auth; a.Enabled {
		log.Info("public API authentication on", "bearer_tokens", len(a.BearerTokens), "signing_users", len(a.SecretKeys),
			"signature_expiry", a.Expiry.String())
	} else {
		log.Warn("public API authentication off (CUBE_MASTER_AUTH=false): anyone who reaches " + ln.Addr().String() +
			" may create and delete templates; download tokens and registry credentials are still redacted from answers")
	}
	if cfg.Master.NodeToken == "" {
		log.Warn("CUBE_MASTER_NODE_TOKEN is not set: calls to nodes carry no node credential, so node agents (nodeagent) refuse them; upstream Cubelets do not need it")
	}
	log.Info("cubemaster listening", "addr", ln.Addr().String(), "template_center", tcBase, "download_base_url", base,
		"database", config.RedactDSN(cfg.Master.DBDSN), "artifact_store_kind", startup.StoreKind(cfg), "progress", progress,
		"nodes", len(dir.Statuses()), "healthy_nodes", healthy, "sweep_interval", cfg.Master.SweepInterval.String())

	stopSweep, sweepDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(sweepDone); svc.RunSweeps(stopSweep, cfg.Master.SweepInterval) }()
	placementDone := make(chan struct{})
	if cfg.Master.PlacementInterval > 0 {
		go func() { defer close(placementDone); svc.RunPlacement(stopSweep, cfg.Master.PlacementInterval) }()
	} else {
		close(placementDone)
	}
	// Builds whose data plane died or hung are failed here too, so a
	// template whose only data plane is gone is freed all the same.
	liveCtx, stopLive := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLive()
	go svc.RunLiveness(liveCtx)
	go startup.PruneJobLog(liveCtx, st.JobLog(), log)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(startup.LimitConnections(srv, ln, cfg.HTTP.MaxConnections)) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}

	log.Info("cubemaster shutting down", "timeout", ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("HTTP server did not drain", "err", err)
	}
	close(stopSweep)
	select {
	case <-sweepDone:
	case <-sctx.Done():
		log.Warn("sweep pass still running at the shutdown deadline; its jobs are replayed after restart")
	}
	select {
	case <-placementDone:
	case <-sctx.Done():
		log.Warn("placement pass still running at the shutdown deadline")
	}
	if err := svc.Wait(sctx); err != nil {
		log.Warn("background resumes still running at the shutdown deadline; the sweeper replays them after restart", "err", err)
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	log.Info("cubemaster stopped")
	return serveErr
}

// downloadBaseURL is the base URL nodes download artifacts from: the
// configured one, else http://<listen host>:<bound port>, with 127.0.0.1
// for an empty or unspecified (0.0.0.0, ::) host. The master serves the
// download route itself (proxied to the template center), so its own
// address is what nodes need.
func downloadBaseURL(configured, listen string, bound net.Addr) (string, error) {
	if configured != "" {
		return wire.ParseBaseURL("CUBE_MASTER_DOWNLOAD_BASE_URL", configured)
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("CUBE_MASTER_LISTEN %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
