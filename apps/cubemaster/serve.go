package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/samber/do/v2"
	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/adapters/nodedir"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/core/control"
)

// shutdownTimeout bounds the graceful part of a shutdown: in-flight
// requests, the current sweep pass and background resumes. Resumes still
// running then are abandoned; their jobs stay in a post-build phase and the
// sweeper of the next start replays them.
const shutdownTimeout = 30 * time.Second

func serveCommand() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane: template API, status callback, distribution, sweeper",
		Long: `Serves the public /cube/* template API, the data plane's status callback
(/internal/template/jobs/{job_id}/status, shared-token auth), /notify/health and
/metrics; proxies compat and artifact downloads to the template center
(CUBE_TEMPLATE_CENTER_ADDR); distributes built artifacts to the nodes in
CUBE_MASTER_NODES, probing their gRPC health; replays stuck BUILT jobs and
collects unreferenced artifacts every CUBE_MASTER_SWEEP_INTERVAL. Applies the
metadata store's migrations at start-up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), listen) },
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default CUBE_MASTER_LISTEN or :8089)")
	return cmd
}

func runServe(ctx context.Context, listen string) error {
	cfg, err := config.Load(nil)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	if listen != "" {
		cfg.Master.Listen = listen
	}
	// Fail closed: without a shared secret the callback route would be open.
	if err := auth.CheckConfig(cfg.CallbackToken, cfg.CallbackInsecureNoToken); err != nil {
		return err
	}
	nodes, err := nodedir.Parse(cfg.Master.Nodes)
	if err != nil {
		return fmt.Errorf("CUBE_MASTER_NODES: %w", err)
	}
	tcBase, err := wire.ParseBaseURL("CUBE_TEMPLATE_CENTER_ADDR", cfg.Master.TemplateCenterAddr)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Master.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Master.Listen, err)
	}
	defer ln.Close()
	base, err := downloadBaseURL(cfg.Master.DownloadBaseURL, cfg.Master.Listen, ln.Addr())
	if err != nil {
		return err
	}

	i := newInjector(wiring{cfg: cfg, log: log, nodes: nodes, tcBase: tcBase, downloadBase: base})
	defer i.Shutdown()

	st, err := do.Invoke[*entstore.Store](i)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.AutoMigrate {
		if err := startup.Migrate(ctx, st, log); err != nil {
			return err
		}
	} else {
		log.Warn("CUBE_AUTO_MIGRATION=false: schema migrations not applied; run `cubemaster migrate` out of band")
	}

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
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 360 * time.Second}
	log.Info("cubemaster listening", "addr", ln.Addr().String(), "template_center", tcBase, "download_base_url", base,
		"nodes", len(dir.Statuses()), "healthy_nodes", healthy, "sweep_interval", cfg.Master.SweepInterval.String())

	stopSweep, sweepDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(sweepDone); svc.RunSweeps(stopSweep, cfg.Master.SweepInterval) }()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}

	log.Info("shutting down", "timeout", shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
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
	if err := svc.Wait(sctx); err != nil {
		log.Warn("background resumes still running at the shutdown deadline; the sweeper replays them after restart", "err", err)
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	log.Info("stopped")
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
