package tcapp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/samber/do/v2"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/chunkstore"
	"github.com/cubesandbox/templatecenter/adapters/hostfiles"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/masterclient"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/adapters/progress/memprogress"
	"github.com/cubesandbox/templatecenter/adapters/progress/redisprogress"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/core/liveness"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

// NewInstanceID names one run of a data-plane process: its host and a
// random part, new at every start, so a restarted process never passes for
// the one that died (core/liveness).
func NewInstanceID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return -1
	}, host)
	if len(host) > 48 {
		host = host[:48]
	}
	if host == "" {
		host = "host"
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "tc-" + host + "-" + hex.EncodeToString(b)
}

// instanceFile, in the work directory, names the data plane that last
// ran on it.
const instanceFile = "instance"

// RecordInstance writes id into dir's instance file and returns the id it
// held: the previous run of this data plane, whose builds a new run fails
// at once ("" when there was none).
func RecordInstance(dir, id string) (previous string, err error) {
	path := filepath.Join(dir, instanceFile)
	if b, err := os.ReadFile(path); err == nil {
		previous = strings.TrimSpace(string(b))
	}
	tmp, err := os.CreateTemp(dir, instanceFile+".*")
	if err != nil {
		return previous, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		tmp.Close()
		return previous, err
	}
	if err := tmp.Close(); err != nil {
		return previous, err
	}
	return previous, os.Rename(tmp.Name(), path)
}

// ShutdownTimeout bounds the graceful part of a shutdown.
const ShutdownTimeout = 30 * time.Second

// Check validates what serve needs before anything is opened.
func Check(cfg config.Config) error {
	// Fail closed: without a shared secret the internal API would be open.
	if err := auth.CheckConfig(cfg.CallbackToken, cfg.CallbackInsecureNoToken); err != nil {
		return err
	}
	return cfg.CheckSharedDatabase(config.DataPlane)
}

// Run serves the data plane on ln until ctx ends, then shuts down
// gracefully. It migrates the schema unless o.Store was handed in (its
// owner did).
func Run(ctx context.Context, o Options, ln net.Listener) error {
	cfg, log := o.Config, o.log()
	if err := Check(cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		return fmt.Errorf("work dir %s (CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR): %w", cfg.WorkDir, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, metrics.DataPlane)
	if err != nil {
		return err
	}
	if o.RegistryObserver == nil {
		o.RegistryObserver = m
	}
	o.LongLived = true
	if o.Instance == "" {
		o.Instance = NewInstanceID()
	}
	// Records naming a job are kept in the job log too (the console's
	// build page), on the store's database.
	var i *do.RootScope
	jobRec, jobLogger := startup.JobLogRecorder(o.log(), "templatecenter "+o.Instance, func() (ports.JobLog, error) {
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		return st.JobLog(), nil
	})
	o.Logger = jobLogger
	i = NewBuildInjector(ctx, o)
	defer i.Shutdown()
	do.ProvideValue(i, reg)
	do.ProvideValue(i, m)
	provideServe(i, o)

	st, err := do.Invoke[*entstore.Store](i)
	if err != nil {
		return err
	}
	if o.Store == nil {
		defer st.Close()
		if cfg.AutoMigrate {
			if err := startup.Migrate(ctx, st, cfg.DBDSN, log); err != nil {
				return err
			}
		} else {
			log.Warn("CUBE_AUTO_MIGRATION=false: schema migrations not applied; run `templatecenter migrate` out of band")
		}
	}
	// Closed before the store: its last lines are written first.
	defer jobRec.Close()
	if core.NewDownloadTokens(cfg.CallbackToken).Keyed() {
		// Rows whose column holds a token in the clear (adopted from
		// upstream) get a seed: the old value, in any copy of the
		// database, then opens nothing.
		n, err := data.SeedDownloadTokens(ctx, st, system.IDs{})
		if err != nil {
			return err
		}
		if n > 0 {
			log.Info("download tokens kept in the clear replaced by seeds", "artifacts", n)
		}
	}
	// The owner lock says this process is alive to the replicas and the
	// master that judge its builds; it is held before a build is taken.
	locker, err := do.Invoke[ports.Locker](i)
	if err != nil {
		return err
	}
	owner, err := liveness.HoldOwner(ctx, locker, o.Instance, log)
	if err != nil {
		return err
	}
	defer owner.Release()
	exec, err := do.Invoke[*data.Executor](i)
	if err != nil {
		return err
	}
	rec, err := do.Invoke[*data.Reconciler](i)
	if err != nil {
		return err
	}
	scrub, err := do.Invoke[*data.Scrubber](i)
	if err != nil {
		return err
	}
	chunkGC, err := do.Invoke[*data.ChunkCollector](i)
	if err != nil {
		return err
	}
	router, err := do.Invoke[http.Handler](i)
	if err != nil {
		return err
	}
	b := do.MustInvoke[ports.RootfsBuilder](i)
	fl, err := do.Invoke[ports.TreeFlattener](i)
	if err != nil {
		return err
	}
	log.Info("templatecenter listening", "addr", ln.Addr().String(), "instance", o.Instance, "builder", b.Name(), "builder_format", b.Format(),
		"database", config.RedactDSN(cfg.DBDSN), "artifact_store", storeDescription(cfg), "store_kind", startup.StoreKind(cfg),
		"work_dir", cfg.WorkDir, "progress", progressDescription(o), "master", cfg.MasterAddr,
		"insecure_registries", o.insecure(), "trusted_registries", o.trusted(),
		"registry_allow_loopback", cfg.RegistryAllowLoopback, "registry_allow_private", cfg.RegistryAllowPrivate,
		"registry_timeout", cfg.RegistryTimeout.String(), "max_concurrent_builds", cfg.MaxConcurrentBuilds,
		"gzip_decoder", gzipDescription(fl))

	timeouts := o.ServerTimeouts
	if timeouts.Idle <= 0 {
		timeouts.Idle = cfg.HTTP.IdleTimeout
	}
	srv := startup.HTTPServer(router, timeouts)
	recCtx, stopRec := context.WithCancel(ctx)
	defer stopRec()
	go func() {
		if err := rec.Run(recCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("reconciler stopped", "err", err)
		}
	}()
	if !cfg.Reconcile.Disabled {
		// Fails the builds of data planes that died or hung
		// (core/liveness), those of this data plane's previous run (its
		// work directory names it) at once.
		judge := livenessJudge(st, m, locker, cfg, o.Instance, log)
		prev, err := RecordInstance(cfg.WorkDir, o.Instance)
		if err != nil {
			log.Warn("instance id not recorded in the work directory; a restart fails this run's builds only after the liveness timeout", "err", err)
		}
		if failed, err := judge.FailRestarted(ctx, prev); err != nil {
			log.Warn("builds of the previous run not failed", "previous", prev, "err", err)
		} else if len(failed) > 0 {
			log.Warn("failed the builds this data plane's previous run left", "previous", prev, "jobs", failed)
		}
		go judge.Run(recCtx)
	}
	go func() {
		if err := scrub.Run(recCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("scrubber stopped", "err", err)
		}
	}()
	go func() {
		if err := chunkGC.Run(recCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("chunk collector stopped", "err", err)
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(startup.LimitConnections(srv, ln, cfg.HTTP.MaxConnections)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("templatecenter shutting down", "timeout", ShutdownTimeout.String())
	stopRec()
	// The HTTP drain and the build shutdown run side by side, each with its
	// own budget: a slow download must not use up the time the cancelled
	// builds need to mark their rows and jobs FAILED.
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		hctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(hctx); err != nil {
			log.Warn("http drain cut short", "err", err)
		}
	}()
	// Shutdown adds up to its grace for the terminal writes; the whole
	// stays within ShutdownTimeout.
	bctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout-data.DefaultShutdownGrace)
	defer cancel()
	err = exec.Shutdown(bctx)
	<-httpDone
	log.Info("templatecenter stopped")
	return err
}

// livenessJudge is the data plane's judge of abandoned builds
// (core/liveness). The jobs it fails are counted in jobs_finished_total
// like those every other path finishes.
func livenessJudge(st ports.Store, m *metrics.Metrics, locker ports.Locker, cfg config.Config, instance string, log *slog.Logger) *liveness.Judge {
	return &liveness.Judge{Store: startup.CountJobOutcomes(st, m), Locker: locker, Clock: system.Clock{}, Timeout: cfg.BuildLiveness,
		Self: instance, Who: "templatecenter " + instance, Logger: log}
}

// HeartbeatFor is how often a running build heartbeats: a sixth of the
// liveness timeout (core/liveness), and at most a quarter of the shortest
// reconciler window that judges running builds by their row's age, so a
// live build is never failed as abandoned between two heartbeats, whatever
// the windows are set to. Replicas share their settings, so the reconciler
// of one judges the builds of another by the same rule.
func HeartbeatFor(cfg config.Config) time.Duration {
	rc := cfg.Reconcile
	hb := liveness.HeartbeatEvery(cfg.BuildLiveness)
	running := rc.RunningStaleAfter
	if rc.StaleAfter > 0 {
		running = rc.StaleAfter
	}
	for _, w := range []time.Duration{rc.PullingStaleAfter, running} {
		if w > 0 && w/4 < hb {
			hb = w / 4
		}
	}
	return max(hb, 100*time.Millisecond)
}

func storeDescription(cfg config.Config) string {
	switch {
	case cfg.ArtifactStoreURL != "":
		return cfg.ArtifactStoreURL
	case cfg.S3.Enabled():
		return "s3://" + cfg.S3.Bucket + "/" + cfg.S3.Prefix + " at " + cfg.S3.Endpoint
	}
	return "file://" + cfg.ArtifactStoreDir
}

func progressDescription(o Options) string {
	switch {
	case o.Progress != nil:
		return "shared in-process"
	case o.Config.RedisAddr != "":
		return "redis " + o.Config.RedisAddr
	}
	return "in-memory"
}

// provideServe adds the long-running service's parts to the injector built
// for the pipeline (which already holds the metrics and their registry).
func provideServe(i do.Injector, o Options) {
	cfg, log := o.Config, o.log()
	do.ProvideValue(i, log)
	do.Provide(i, func(do.Injector) (*entstore.Store, error) {
		if o.Store != nil {
			return o.Store, nil
		}
		return startup.OpenStore(context.Background(), cfg.DatabaseSetting(config.DataPlane), cfg.DBDSN)
	})
	do.Provide(i, func(i do.Injector) (ports.Locker, error) {
		if o.Locker != nil {
			return o.Locker, nil
		}
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		return startup.Locker(st, cfg.DBDSN)
	})
	do.Provide(i, func(do.Injector) (*artifactstore.Store, error) {
		return OpenArtifactStore(context.Background(), cfg)
	})
	do.Provide(i, func(do.Injector) (ports.ProgressSink, error) {
		if o.Progress != nil {
			return o.Progress, nil
		}
		if cfg.RedisAddr == "" {
			return memprogress.New(), nil
		}
		// Connected on first use: a Redis outage degrades live progress,
		// it does not keep the data plane from starting.
		return redisprogress.Connect(cfg.RedisAddr, redisprogress.Options{}), nil
	})
	do.Provide(i, func(i do.Injector) (ports.StatusReporter, error) {
		var up *masterclient.UpstreamPeer
		if cfg.UpstreamMaster {
			blobs, err := do.Invoke[*artifactstore.Store](i)
			if err != nil {
				return nil, err
			}
			up = upstreamPeer(cfg, blobs)
		}
		return masterclient.New(masterclient.Config{
			BaseURL: cfg.MasterAddr, Token: cfg.CallbackToken, Logger: log, Metrics: do.MustInvoke[*metrics.Metrics](i),
			Upstream: up,
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
		p.Chunks = chunksOf(cfg, blobs)
		// A publish of chunks new to the store (slow: thousands of new
		// objects) finishes after READY rather than delay it by more than
		// 5 %; nodes take the whole file until its index is there.
		p.ChunksWait = pipeline.DefaultChunksWait
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
		e := &data.Executor{
			Store: startup.CountJobOutcomes(st, m), Locker: locker, Pipeline: p, Artifacts: blobs, Reporter: rep, Progress: prog,
			Clock: system.Clock{}, IDs: system.IDs{}, CubeCA: hostfiles.CubeCAFile{Path: cfg.CubeCAFile},
			Config: data.ExecutorConfig{MaxConcurrent: cfg.MaxConcurrentBuilds, HeartbeatEvery: HeartbeatFor(cfg), BuildTimeout: cfg.BuildTimeout,
				Owner: o.Instance, ReportEvery: cfg.ProgressReportInterval, Logger: log, OnDone: func(o data.Outcome) {
					if o.Result != nil {
						for ph, d := range o.Result.Phases {
							m.ObservePhase(string(ph), d)
						}
					}
					switch {
					case o.Err != nil:
						m.BuildFinished(metrics.BuildFailed)
					case o.Reused:
						m.BuildFinished(metrics.BuildReused)
					default:
						m.BuildFinished(metrics.BuildBuilt)
					}
				}},
		}
		m.ActiveBuildsFrom(e.Running)
		return e, nil
	})
	do.Provide(i, func(i do.Injector) (*data.Deleter, error) {
		blobs, err := do.Invoke[*artifactstore.Store](i)
		if err != nil {
			return nil, err
		}
		gc, err := do.Invoke[*data.ChunkCollector](i)
		if err != nil {
			return nil, err
		}
		return &data.Deleter{Store: do.MustInvoke[*entstore.Store](i), Artifacts: blobs, Chunks: chunksOf(cfg, blobs), ChunkGC: gc}, nil
	})
	do.Provide(i, func(i do.Injector) (*data.ChunkCollector, error) {
		blobs, err := do.Invoke[*artifactstore.Store](i)
		if err != nil {
			return nil, err
		}
		locker, err := do.Invoke[ports.Locker](i)
		if err != nil {
			return nil, err
		}
		return data.NewChunkCollector(chunksOf(cfg, blobs), locker, data.ChunkGCConfig{
			Disabled: cfg.ChunkGCInterval == 0, Interval: cfg.ChunkGCInterval, Grace: cfg.ChunkGCGrace, Logger: log}), nil
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
		return &data.Reconciler{Store: startup.CountJobOutcomes(do.MustInvoke[*entstore.Store](i), do.MustInvoke[*metrics.Metrics](i)),
			Locker: locker, Clock: system.Clock{},
			Config: data.ReconcilerConfig{
				Disabled: rc.Disabled, Interval: rc.Interval, PendingStaleAfter: rc.PendingStaleAfter,
				PullingStaleAfter: rc.PullingStaleAfter, RunningStaleAfter: running,
				DeleteArtifact: d.Delete, ScratchDir: cfg.WorkDir, Logger: log,
			}}, nil
	})
	do.Provide(i, func(i do.Injector) (*data.Scrubber, error) {
		locker, err := do.Invoke[ports.Locker](i)
		if err != nil {
			return nil, err
		}
		blobs := do.MustInvoke[*artifactstore.Store](i)
		kind, _ := artifactstore.Lookup(blobs.Backend())
		remote := kind.Remote
		return &data.Scrubber{Store: do.MustInvoke[*entstore.Store](i), Artifacts: blobs,
			Locker: locker, Clock: system.Clock{},
			Config: data.ScrubConfig{Every: cfg.ScrubInterval, Disabled: cfg.ScrubInterval == 0 || remote && !cfg.ScrubRemote, Logger: log},
		}, nil
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
			Chunks:    chunksOf(cfg, blobs),
			Uploads:   data.UploadRecorder{Artifacts: st.Artifacts()},
			Compat: &data.CompatScanner{Templates: st.Templates(), Manifests: hostfiles.ManifestFile{Path: cfg.ReleaseManifest},
				Clock: system.Clock{}, ManifestSource: cfg.ReleaseManifest},
			Readiness: func(ctx context.Context) error { return st.DB().PingContext(ctx) },
			LocalPath: localPath(cfg),
			SpoolDir:  cfg.WorkDir,
			// Download tokens derive from the callback token the master
			// shares: the database holds only their seeds.
			DownloadTokens: core.NewDownloadTokens(cfg.CallbackToken),
			Metrics:        do.MustInvoke[*metrics.Metrics](i),
			Gatherer:       do.MustInvoke[*prometheus.Registry](i),
			Logger:         log,
		}), nil
	})
}

type deleterFunc func(ctx context.Context, artifactID string) error

func (f deleterFunc) DeleteArtifact(ctx context.Context, id string) error { return f(ctx, id) }

// upstreamArtifactURLTTL is how long the presigned artifact_url an
// upstream master distributes stays valid: upstream's own data plane signs
// for 7 days, the longest S3 allows.
const upstreamArtifactURLTTL = 7 * 24 * time.Hour

// upstreamPeer tells an upstream master where the bytes are: the file of a
// local store (which must be the master's own artifact directory, see
// docs/compatibility.md), or a presigned URL of an object store.
func upstreamPeer(cfg config.Config, blobs *artifactstore.Store) *masterclient.UpstreamPeer {
	lp := localPath(cfg)
	return &masterclient.UpstreamPeer{
		LocalPath: func(a *core.Artifact) string {
			if lp == nil {
				return ""
			}
			return lp(core.ObjectKeyOf(a))
		},
		SignURL: func(ctx context.Context, a *core.Artifact) (string, error) {
			return blobs.SignedURL(ctx, core.ObjectKeyOf(a), upstreamArtifactURLTTL)
		},
	}
}

// localPath maps a store key to its file when the artifact store is the
// local directory (CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR); nil otherwise.
func localPath(cfg config.Config) func(key string) string {
	if cfg.ArtifactStoreURL != "" || cfg.S3.Enabled() {
		return nil
	}
	dir, err := filepath.Abs(cfg.ArtifactStoreDir)
	if err != nil {
		return nil
	}
	return func(key string) string { return filepath.Join(dir, filepath.FromSlash(key)) }
}

// OpenArtifactStore picks the artifact store: an explicit URL, else S3 when
// fully configured, else the local directory (created if missing).
func OpenArtifactStore(ctx context.Context, cfg config.Config) (*artifactstore.Store, error) {
	mode, err := artifactstore.ParseFileMode(cfg.ArtifactFileMode)
	if err != nil {
		return nil, fmt.Errorf("CUBE_TEMPLATE_CENTER_ARTIFACT_FILE_MODE: %w", err)
	}
	fileMode := fmt.Sprintf("%04o", mode)
	switch {
	case cfg.ArtifactStoreURL != "":
		return artifactstore.Open(ctx, withFileMode(cfg.ArtifactStoreURL, fileMode))
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
	// url.URL escapes '#', '?' and '%' in the name, which the file store's
	// URL parsing decodes back to dir.
	u := url.URL{Scheme: artifactstore.BackendFile, Path: filepath.ToSlash(dir), RawQuery: "create_dir=1&file_mode=" + fileMode}
	return artifactstore.Open(ctx, u.String())
}

// gzipDescription names the gzip decoder builds use.
func gzipDescription(fl ports.TreeFlattener) string {
	if f, ok := fl.(layers.Flattener); ok {
		return f.Gunzip.String()
	}
	return "custom flattener"
}

// chunksOf is the chunk store kept beside the artifacts in blobs, or nil
// when chunks are off (CUBE_TEMPLATE_CENTER_CHUNKS).
func chunksOf(cfg config.Config, blobs *artifactstore.Store) ports.ChunkStore {
	if !cfg.Chunks {
		return nil
	}
	return chunkstore.New(blobs)
}

// withFileMode gives a file:// store URL the setting's file_mode unless the
// URL sets its own; other URLs, and URLs Open will refuse, are unchanged.
func withFileMode(raw, mode string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != artifactstore.BackendFile {
		return raw
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil || q.Has("file_mode") {
		return raw
	}
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "file_mode=" + mode
	return u.String()
}
