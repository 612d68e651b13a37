package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/samber/do/v2"
	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/hostfiles"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/masterclient"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/progress/memprogress"
	"github.com/cubesandbox/templatecenter/adapters/progress/redisprogress"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

func serveCommand() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the data plane: build API, artifact downloads, reconciler",
		Long: `Serves the internal build API under /tc/api/v1 (shared-token auth), artifact
downloads, /health and /metrics, runs builds with the configured builder, reports
status to the master (CUBE_MASTER_ADDR) and reconciles stale jobs. Applies the
metadata store's migrations at start-up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, listen) },
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default CUBE_TEMPLATE_CENTER_LISTEN or :8090)")
	return cmd
}

func runServe(cmd *cobra.Command, listen string) error {
	ctx := cmd.Context()
	cfg, err := config.Load(nil)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	if listen != "" {
		cfg.Listen = listen
	}
	// Fail closed: without a shared secret the internal API would be open.
	if err := auth.CheckConfig(cfg.CallbackToken, cfg.CallbackInsecureNoToken); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		return fmt.Errorf("work dir %s: %w", cfg.WorkDir, err)
	}

	i := newBuildInjector(buildWiring{cfg: cfg, ctx: ctx, longLived: true})
	defer i.Shutdown()
	provideServe(i, cfg, log)

	st, err := do.Invoke[*entstore.Store](i)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := startup.Migrate(ctx, st, log); err != nil {
		return err
	}

	exec, err := do.Invoke[*data.Executor](i)
	if err != nil {
		return err
	}
	rec, err := do.Invoke[*data.Reconciler](i)
	if err != nil {
		return err
	}
	router, err := do.Invoke[http.Handler](i)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 360 * time.Second}
	log.Info("templatecenter listening", "addr", ln.Addr().String(), "builder", cfg.Builder)

	recCtx, stopRec := context.WithCancel(ctx)
	defer stopRec()
	go func() {
		if err := rec.Run(recCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("reconciler stopped", "err", err)
		}
	}()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	stopRec()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return exec.Shutdown(sctx)
}

// provideServe adds the long-running service's parts to the injector built
// for the pipeline.
func provideServe(i do.Injector, cfg config.Config, log *slog.Logger) {
	do.ProvideValue(i, log)
	do.Provide(i, func(do.Injector) (*entstore.Store, error) {
		st, err := entstore.Open(context.Background(), cfg.DBDSN)
		if err != nil {
			return nil, err
		}
		return st, nil
	})
	do.Provide(i, func(i do.Injector) (ports.Locker, error) {
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		return startup.Locker(st), nil
	})
	do.Provide(i, func(do.Injector) (*artifactstore.Store, error) {
		return openArtifactStore(context.Background(), cfg)
	})
	do.Provide(i, func(do.Injector) (ports.ProgressSink, error) {
		if cfg.RedisAddr == "" {
			return memprogress.New(), nil
		}
		c, err := redisprogress.Dial(cfg.RedisAddr)
		if err != nil {
			return nil, err
		}
		return redisprogress.New(c, redisprogress.Options{}), nil
	})
	do.Provide(i, func(do.Injector) (*prometheus.Registry, error) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		return reg, nil
	})
	do.Provide(i, func(i do.Injector) (*metrics.Metrics, error) {
		return metrics.New(do.MustInvoke[*prometheus.Registry](i))
	})
	do.Provide(i, func(i do.Injector) (ports.StatusReporter, error) {
		return masterclient.New(masterclient.Config{
			BaseURL: cfg.MasterAddr, Token: cfg.CallbackToken, Logger: log, Metrics: do.MustInvoke[*metrics.Metrics](i),
		})
	})
	do.Provide(i, func(i do.Injector) (*data.Executor, error) {
		st := do.MustInvoke[*entstore.Store](i)
		blobs, err := do.Invoke[*artifactstore.Store](i)
		if err != nil {
			return nil, err
		}
		p, err := do.Invoke[*pipeline.Pipeline](i)
		if err != nil {
			return nil, err
		}
		p.Store = blobs
		locker, err := do.Invoke[ports.Locker](i)
		if err != nil {
			return nil, err
		}
		rep, err := do.Invoke[ports.StatusReporter](i)
		if err != nil {
			return nil, err
		}
		prog, err := do.Invoke[ports.ProgressSink](i)
		if err != nil {
			return nil, err
		}
		m := do.MustInvoke[*metrics.Metrics](i)
		return &data.Executor{
			Store: st, Locker: locker, Pipeline: p, Artifacts: blobs, Reporter: rep, Progress: prog,
			Clock: system.Clock{}, IDs: system.IDs{},
			Config: data.ExecutorConfig{MaxConcurrent: cfg.MaxConcurrentBuilds, Logger: log, OnDone: func(o data.Outcome) {
				if o.Result != nil {
					for ph, d := range o.Result.Phases {
						m.ObservePhase(string(ph), d)
					}
				}
			}},
		}, nil
	})
	do.Provide(i, func(i do.Injector) (*data.Deleter, error) {
		blobs, err := do.Invoke[*artifactstore.Store](i)
		if err != nil {
			return nil, err
		}
		return &data.Deleter{Store: do.MustInvoke[*entstore.Store](i), Artifacts: blobs}, nil
	})
	do.Provide(i, func(i do.Injector) (*data.Reconciler, error) {
		d := do.MustInvoke[*data.Deleter](i)
		locker, err := do.Invoke[ports.Locker](i)
		if err != nil {
			return nil, err
		}
		rc := cfg.Reconcile
		running := rc.RunningStaleAfter
		if rc.StaleAfter > 0 {
			running = rc.StaleAfter
		}
		return &data.Reconciler{Store: do.MustInvoke[*entstore.Store](i), Locker: locker, Clock: system.Clock{},
			Config: data.ReconcilerConfig{
				Disabled: rc.Disabled, Interval: rc.Interval, PendingStaleAfter: rc.PendingStaleAfter,
				PullingStaleAfter: rc.PullingStaleAfter, RunningStaleAfter: running,
				DeleteArtifact: d.Delete, ScratchDir: cfg.WorkDir, Logger: log,
			}}, nil
	})
	do.Provide(i, func(i do.Injector) (http.Handler, error) {
		st := do.MustInvoke[*entstore.Store](i)
		blobs := do.MustInvoke[*artifactstore.Store](i)
		return tcapi.New(tcapi.Config{
			Token: cfg.CallbackToken, InsecureNoToken: cfg.CallbackInsecureNoToken,
			Builds:    do.MustInvoke[*data.Executor](i),
			Deleter:   deleterFunc(do.MustInvoke[*data.Deleter](i).Delete),
			Artifacts: st.Artifacts(),
			Store:     blobs,
			Uploads:   data.UploadRecorder{Artifacts: st.Artifacts()},
			Compat: &data.CompatScanner{Templates: st.Templates(), Manifests: hostfiles.ManifestFile{Path: cfg.ReleaseManifest},
				Clock: system.Clock{}, ManifestSource: cfg.ReleaseManifest},
			Readiness: func(ctx context.Context) error { return st.DB().PingContext(ctx) },
			Metrics:   do.MustInvoke[*metrics.Metrics](i),
			Gatherer:  do.MustInvoke[*prometheus.Registry](i),
			Logger:    log,
		}), nil
	})
}

type deleterFunc func(ctx context.Context, artifactID string) error

func (f deleterFunc) DeleteArtifact(ctx context.Context, id string) error { return f(ctx, id) }

// openArtifactStore picks the artifact store: an explicit URL, else S3 when
// fully configured, else the local directory.
func openArtifactStore(ctx context.Context, cfg config.Config) (*artifactstore.Store, error) {
	switch {
	case cfg.ArtifactStoreURL != "":
		return artifactstore.Open(ctx, cfg.ArtifactStoreURL)
	case cfg.S3.Enabled():
		return artifactstore.OpenS3(ctx, artifactstore.S3Config{
			Endpoint: cfg.S3.Endpoint, Bucket: cfg.S3.Bucket, Region: cfg.S3.Region, AccessKey: cfg.S3.AccessKey,
			SecretKey: cfg.S3.SecretKey, UsePathStyle: cfg.S3.UsePathStyle, UseSSL: cfg.S3.UseSSL, Prefix: cfg.S3.Prefix,
		})
	}
	dir, err := filepath.Abs(cfg.ArtifactStoreDir)
	if err != nil {
		return nil, err
	}
	return artifactstore.Open(ctx, "file://"+dir+"?create_dir=1")
}
