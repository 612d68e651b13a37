package masterapp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/samber/do/v2"
	"google.golang.org/grpc"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/hostfiles"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/console"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcclient"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/adapters/nodedir"
	"github.com/cubesandbox/templatecenter/adapters/progress/memprogress"
	"github.com/cubesandbox/templatecenter/adapters/progress/redisprogress"
	"github.com/cubesandbox/templatecenter/adapters/sealer"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// wiring is what the injector needs beyond the config: values checked or
// derived at start-up, and parts handed in by Options.
type wiring struct {
	cfg   config.Config
	log   *slog.Logger
	nodes []ports.Node
	// tcBase is the data plane's normalized base URL; downloadBase the base
	// URL nodes download artifacts from.
	tcBase       string
	downloadBase string
	// nodeDial are the options of every connection to a node (the node
	// credential, TLS); nodeSecure says they carry transport credentials.
	nodeDial   []grpc.DialOption
	nodeSecure bool

	store    *entstore.Store
	locker   ports.Locker
	progress ports.ProgressSink
}

// redisSink closes its connection when the injector shuts down.
type redisSink struct {
	*redisprogress.Sink
}

func (s redisSink) Shutdown() error { s.Close(); return nil }

// newInjector wires the control plane's adapters with samber/do. Providers
// are lazy: nothing is opened until Run invokes it.
func newInjector(w wiring) *do.RootScope {
	cfg := w.cfg
	i := do.New()
	// Records naming a job are kept in the job log too (the console's
	// build page), on the store's database.
	rec, log := startup.JobLogRecorder(w.log, jobLogSource("cubemaster"), func() (ports.JobLog, error) {
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		return st.JobLog(), nil
	})
	do.ProvideValue(i, rec)
	do.ProvideValue(i, cfg)
	do.ProvideValue(i, log)
	do.Provide(i, func(do.Injector) (*entstore.Store, error) {
		if w.store != nil {
			return w.store, nil
		}
		return startup.OpenStore(context.Background(), cfg.DatabaseSetting(config.ControlPlane), cfg.Master.DBDSN)
	})
	do.Provide(i, func(i do.Injector) (ports.Locker, error) {
		if w.locker != nil {
			return w.locker, nil
		}
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		return startup.Locker(st, cfg.Master.DBDSN)
	})
	do.Provide(i, func(i do.Injector) (*nodedir.Directory, error) {
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		// CUBE_MASTER_NODES merged with t_cube_template_node, read again
		// on every probe tick.
		src := &nodedir.StoreSource{Static: w.nodes, Repo: st.Nodes(), Logger: log}
		return nodedir.NewWithSource(src, nodedir.Options{Interval: cfg.Master.NodeProbeInterval, Logger: log,
			DialOptions: w.nodeDial, Secure: w.nodeSecure})
	})
	do.Provide(i, func(do.Injector) (*cubelet.Client, error) {
		req := requestOptions(cfg.Master.Request)
		return cubelet.New(cubelet.Options{Logger: log, Request: &req, CreateImageTimeout: cfg.Master.Request.CreateImageTimeout,
			DialOptions: w.nodeDial, Secure: w.nodeSecure}), nil
	})
	do.Provide(i, func(do.Injector) (*tcclient.Client, error) {
		return tcclient.New(tcclient.Config{BaseURL: w.tcBase, Token: cfg.CallbackToken, Logger: log})
	})
	do.Provide(i, func(do.Injector) (ports.ProgressSink, error) {
		if w.progress != nil {
			return w.progress, nil
		}
		if cfg.RedisAddr == "" {
			return memprogress.New(), nil
		}
		// Connected on first use: a Redis outage degrades live progress,
		// it does not keep the master from starting.
		return redisSink{Sink: redisprogress.Connect(cfg.RedisAddr, redisprogress.Options{})}, nil
	})
	do.Provide(i, func(do.Injector) (*prometheus.Registry, error) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		return reg, nil
	})
	do.Provide(i, func(i do.Injector) (*metrics.Metrics, error) {
		return metrics.New(do.MustInvoke[*prometheus.Registry](i), metrics.ControlPlane)
	})
	do.Provide(i, func(i do.Injector) (*control.Service, error) {
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		locker, err := do.Invoke[ports.Locker](i)
		if err != nil {
			return nil, err
		}
		dir, err := do.Invoke[*nodedir.Directory](i)
		if err != nil {
			return nil, err
		}
		tc, err := do.Invoke[*tcclient.Client](i)
		if err != nil {
			return nil, err
		}
		prog, err := do.Invoke[ports.ProgressSink](i)
		if err != nil {
			return nil, err
		}
		legacy, err := hostfiles.NewLegacyArtifacts(cfg.Master.LocalArtifactDirs)
		if err != nil {
			return nil, err
		}
		policy, err := loadPlacementPolicy(cfg.Master.PlacementPolicyFile)
		if err != nil {
			return nil, err
		}
		host, _ := os.Hostname()
		agent := meteredAgent{NodeAgent: do.MustInvoke[*cubelet.Client](i), m: do.MustInvoke[*metrics.Metrics](i)}
		svc := &control.Service{
			Store: startup.CountJobOutcomes(st, do.MustInvoke[*metrics.Metrics](i)), Locker: locker, Nodes: dir, Agent: agent, DataPlane: tc,
			Legacy: legacy, IDs: system.IDs{}, Clock: system.Clock{}, Progress: prog, Logger: log,
			Config: control.Config{DownloadBaseURL: w.downloadBase, NodeDownloadBaseURL: cfg.Master.NodeDownloadBaseURL, ConvergeDisabled: !cfg.Master.Converge,
				DownloadTokens:  core.NewDownloadTokens(cfg.CallbackToken),
				ConvergeBackoff: cfg.Master.ConvergeBackoff, ConvergeAtOnce: cfg.Master.ConvergeAtOnce,
				ReplicaCheckAtOnce: cfg.Master.ReplicaCheckAtOnce, ReplicaCheckDisabled: cfg.Master.ReplicaCheckAtOnce == 0,
				DistributionWorkers: cfg.Master.DistributionWorkers, BuildLiveness: cfg.BuildLiveness,
				PlacementPolicy: policy, PlacementAtOnce: cfg.Master.PlacementAtOnce, MasterName: fmt.Sprintf("%s/%d", host, os.Getpid())},
			ObservePlacement: func(d core.PlacementDecision) { agent.m.PlacementDecision(d.Decision, d.Reason) },
		}
		// Registry credentials are sealed with keys of their own, never
		// the callback token; values sealed with it before still open
		// (and are sealed again when the master starts).
		sl, err := newSealer(cfg)
		if err != nil {
			return nil, err
		}
		svc.Sealer = sl
		if sl.CurrentKey() == "" {
			log.Warn("registry credentials are not kept for redo: no sealing key (set CUBE_MASTER_SEALING_KEYS or CUBE_MASTER_SEALING_KEY_FILE)")
		}
		if envd, ok := hostfiles.NewEnvdFile(cfg.Master.EnvdHostDir); ok {
			svc.Envd = envd
			log.Info("envd injection available", "path", envd.Path)
		} else {
			log.Info("envd injection disabled: no envd binary", "dir", cfg.Master.EnvdHostDir)
		}
		// The CA this master serves on /cube/ca goes with every build that
		// wants it baked; it is read at each build (rotation needs no
		// restart).
		if cfg.Master.CADir != "" {
			svc.CubeCA = hostfiles.CubeCAFile{Path: filepath.Join(cfg.Master.CADir, core.CubeCAFileName)}
		}
		return svc, nil
	})
	do.Provide(i, func(i do.Injector) (http.Handler, error) {
		svc, err := do.Invoke[*control.Service](i)
		if err != nil {
			return nil, err
		}
		st := do.MustInvoke[*entstore.Store](i)
		dir := do.MustInvoke[*nodedir.Directory](i)
		var public *auth.Public
		if a := cfg.Master.Auth; a.Enabled {
			public = auth.NewPublic(auth.PublicConfig{SecretKeys: a.SecretKeys, BearerTokens: a.BearerTokens, Expiry: a.Expiry})
		}
		r, err := cubeapi.New(cubeapi.Config{
			Token: cfg.CallbackToken, InsecureNoToken: cfg.CallbackInsecureNoToken, PublicAuth: public,
			Reports: svc, Jobs: svc, Migrations: svc, Catalog: svc, Artifacts: svc, Placement: svc, JobLog: st.JobLog(), Nodes: nodeViews(dir, svc),
			TemplateCenterURL: w.tcBase, DownloadBaseURL: w.downloadBase,
			RenderCubelet: renderCubelet(requestOptions(cfg.Master.Request)), CADir: cfg.Master.CADir,
			Readiness:      readiness(st, dir, w.tcBase, cfg.CallbackToken),
			StorageBackend: startup.StoreKind(cfg),
			Metrics:        do.MustInvoke[*metrics.Metrics](i), Gatherer: do.MustInvoke[*prometheus.Registry](i),
			Logger: log,
		})
		if err != nil {
			return nil, err
		}
		// The web console: static files only, its data read through the
		// public API above with the caller's own credentials.
		r.Handle(strings.TrimSuffix(console.Path, "/"), console.Handler())
		r.Handle(console.Path+"*", console.Handler())
		return r, nil
	})
	return i
}

// requestOptions are the node request settings the cubelet client and the
// preview route share.
func requestOptions(r config.RequestSettings) cubelet.RequestOptions {
	return cubelet.RequestOptions{
		EnableExposedPort: r.EnableExposedPort, ExposedPortList: r.ExposedPortList,
		BlkQos: r.BlkQos, BlkQosByInstanceType: r.BlkQosMap, FsQos: r.FsQos, FsQosByInstanceType: r.FsQosMap,
		Region: r.Region, AllowedHostMountPrefixes: r.HostMountPrefixes,
	}
}

// renderCubelet renders POST /cube/sandbox/preview's cubelet_request: the
// Cubelet request, as upstream's preview marshals it.
func renderCubelet(o cubelet.RequestOptions) cubeapi.CubeletRenderer {
	return func(req *core.SandboxRequest) (any, error) { return o.RunRequest(req) }
}

// readiness is what /ready checks: the database answers; the data plane is
// ready and takes this master's callback token; at least one node is
// healthy, when any is configured (none configured is not a failure: the
// API serves reads and deletes, and a create says "no template nodes").
func readiness(st *entstore.Store, dir *nodedir.Directory, tcBase, token string) []cubeapi.Check {
	hc := &http.Client{Timeout: 3 * time.Second}
	return []cubeapi.Check{
		{Name: "database", Failure: "not reachable", Run: func(ctx context.Context) (string, error) {
			if err := st.DB().PingContext(ctx); err != nil {
				return st.Dialect(), fmt.Errorf("ping %s database: %w", st.Dialect(), err)
			}
			return st.Dialect(), nil
		}},
		// The detail leaves out the data plane's address: /ready is
		// unauthenticated. The errors, which are only logged, name it.
		{Name: "data_plane", Failure: "not reachable", Run: func(ctx context.Context) (string, error) {
			return "", dataPlaneReady(ctx, hc, tcBase, token)
		}},
		{Name: "nodes", Failure: "no healthy node", Run: func(context.Context) (string, error) {
			all := dir.Statuses()
			healthy := 0
			for _, s := range all {
				if s.Healthy {
					healthy++
				}
			}
			switch {
			case len(all) == 0:
				return "none configured (CUBE_MASTER_NODES, t_cube_template_node)", nil
			case healthy == 0:
				return fmt.Sprintf("%d/%d healthy", healthy, len(all)), fmt.Errorf("no node is healthy")
			}
			return fmt.Sprintf("%d/%d healthy", healthy, len(all)), nil
		}},
	}
}

// dataPlaneReady asks the data plane's /ready with this master's callback
// token, which it checks: a data plane that is up but configured with
// another token would refuse every build and callback. A data plane
// without /ready (upstream's) is asked /health instead.
func dataPlaneReady(ctx context.Context, hc *http.Client, tcBase, token string) error {
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, tcBase+path, nil)
		if err != nil {
			return nil, err
		}
		if token != "" {
			req.Header.Set(auth.Header, token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%w (CUBE_TEMPLATE_CENTER_ADDR)", err)
		}
		return resp, nil
	}
	resp, err := get(tcapi.PathReady)
	if err == nil && resp.StatusCode == http.StatusNotFound {
		wire.Drain(resp)
		resp, err = get(tcapi.PathHealth)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body wire.ReadyResponse
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	if c, ok := body.Checks[tcapi.TokenCheck]; ok && c.Status != wire.CheckOK {
		return &wire.ReadyFailure{Answer: "callback token mismatch",
			Err: fmt.Errorf("the data plane at %s refuses this master's CUBE_TEMPLATE_CALLBACK_TOKEN: both services must have the same one", tcBase)}
	}
	if resp.StatusCode != http.StatusOK {
		var failed []string
		for name, c := range body.Checks {
			if c.Status != wire.CheckOK {
				failed = append(failed, name+": "+c.Error)
			}
		}
		slices.Sort(failed)
		return &wire.ReadyFailure{Answer: "not ready", Err: fmt.Errorf("GET %s%s answered %s %s", tcBase, resp.Request.URL.Path, resp.Status, strings.Join(failed, ", "))}
	}
	return nil
}

// newSealer seals with CUBE_MASTER_SEALING_KEYS, else the keys of
// CUBE_MASTER_SEALING_KEY_FILE; with neither it only opens what was
// sealed before with the callback token's key.
func newSealer(cfg config.Config) (*sealer.Sealer, error) {
	var keys []sealer.Key
	var err error
	switch {
	case strings.TrimSpace(cfg.Master.SealingKeys) != "":
		if keys, err = sealer.ParseKeys(cfg.Master.SealingKeys); err != nil {
			return nil, fmt.Errorf("CUBE_MASTER_SEALING_KEYS: %w", err)
		}
	case cfg.Master.SealingKeyFile != "":
		if keys, err = sealer.ReadKeyFile(cfg.Master.SealingKeyFile); err != nil {
			return nil, fmt.Errorf("CUBE_MASTER_SEALING_KEY_FILE: %w", err)
		}
	}
	sl, err := sealer.New(keys, cfg.CallbackToken)
	if err != nil {
		return nil, fmt.Errorf("sealing keys: %w", err)
	}
	return sl, nil
}

// jobLogSource names this process in its job log lines: the service and
// its host, so two replicas' lines can be told apart.
func jobLogSource(service string) string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return fmt.Sprintf("%s %s/%d", service, h, os.Getpid())
	}
	return service
}

// nodeViews is GET /cube/node: the directory's nodes with this master's
// last probes and what each holds.
func nodeViews(dir *nodedir.Directory, svc *control.Service) func(ctx context.Context) ([]cubeview.NodeInfo, error) {
	return func(ctx context.Context) ([]cubeview.NodeInfo, error) {
		usage, err := svc.NodesUsage(ctx)
		if err != nil {
			return nil, err
		}
		var out []cubeview.NodeInfo
		for _, s := range dir.Statuses() {
			u := usage[s.ID]
			out = append(out, cubeview.NodeInfo{NodeID: s.ID, NodeIP: s.IP, InstanceType: s.InstanceType, Healthy: s.Healthy,
				LastProbe: cubeview.RFC3339(s.LastProbe), LastSeen: cubeview.RFC3339(s.LastSeen), LastError: s.LastError,
				TemplatesHeld: u.Templates, BytesUsed: u.Bytes})
		}
		return out, nil
	}
}
