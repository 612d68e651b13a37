package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/rueidis"
	"github.com/samber/do/v2"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/hostfiles"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcclient"
	"github.com/cubesandbox/templatecenter/adapters/nodedir"
	"github.com/cubesandbox/templatecenter/adapters/progress/memprogress"
	"github.com/cubesandbox/templatecenter/adapters/progress/redisprogress"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// wiring is what the injector needs beyond the config: values checked or
// derived at start-up.
type wiring struct {
	cfg   config.Config
	log   *slog.Logger
	nodes []ports.Node
	// tcBase is the data plane's normalized base URL; downloadBase the base
	// URL nodes download artifacts from.
	tcBase       string
	downloadBase string
}

// redisSink closes its client when the injector shuts down.
type redisSink struct {
	*redisprogress.Sink
	client rueidis.Client
}

func (s redisSink) Shutdown() error { s.client.Close(); return nil }

// newInjector wires the control plane's adapters with samber/do. Providers
// are lazy: nothing is opened until runServe invokes it.
func newInjector(w wiring) *do.RootScope {
	cfg, log := w.cfg, w.log
	i := do.New()
	do.ProvideValue(i, cfg)
	do.ProvideValue(i, log)
	do.Provide(i, func(do.Injector) (*entstore.Store, error) {
		return entstore.Open(context.Background(), cfg.Master.DBDSN)
	})
	do.Provide(i, func(i do.Injector) (ports.Locker, error) {
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		return startup.Locker(st), nil
	})
	do.Provide(i, func(i do.Injector) (*nodedir.Directory, error) {
		st, err := do.Invoke[*entstore.Store](i)
		if err != nil {
			return nil, err
		}
		// CUBE_MASTER_NODES merged with t_cube_template_node, read again
		// on every probe tick.
		src := &nodedir.StoreSource{Static: w.nodes, Repo: st.Nodes(), Logger: log}
		return nodedir.NewWithSource(src, nodedir.Options{Interval: cfg.Master.NodeProbeInterval, Logger: log})
	})
	do.Provide(i, func(do.Injector) (*cubelet.Client, error) {
		req := requestOptions(cfg.Master.Request)
		return cubelet.New(cubelet.Options{Logger: log, Request: &req, CreateImageTimeout: cfg.Master.Request.CreateImageTimeout}), nil
	})
	do.Provide(i, func(do.Injector) (*tcclient.Client, error) {
		return tcclient.New(tcclient.Config{BaseURL: w.tcBase, Token: cfg.CallbackToken, Logger: log})
	})
	do.Provide(i, func(do.Injector) (ports.ProgressSink, error) {
		if cfg.RedisAddr == "" {
			return memprogress.New(), nil
		}
		c, err := redisprogress.Dial(cfg.RedisAddr)
		if err != nil {
			return nil, err
		}
		return redisSink{Sink: redisprogress.New(c, redisprogress.Options{}), client: c}, nil
	})
	do.Provide(i, func(do.Injector) (*prometheus.Registry, error) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		return reg, nil
	})
	do.Provide(i, func(i do.Injector) (*metrics.Metrics, error) {
		return metrics.New(do.MustInvoke[*prometheus.Registry](i))
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
		svc := &control.Service{
			Store: st, Locker: locker, Nodes: dir, Agent: do.MustInvoke[*cubelet.Client](i), DataPlane: tc,
			Legacy: legacy, IDs: system.IDs{}, Clock: system.Clock{}, Progress: prog, Logger: log,
			Config: control.Config{DownloadBaseURL: w.downloadBase},
		}
		if envd, ok := hostfiles.NewEnvdFile(cfg.Master.EnvdHostDir); ok {
			svc.Envd = envd
			log.Info("envd injection available", "path", envd.Path)
		} else {
			log.Info("envd injection disabled: no envd binary", "dir", cfg.Master.EnvdHostDir)
		}
		return svc, nil
	})
	do.Provide(i, func(i do.Injector) (http.Handler, error) {
		svc, err := do.Invoke[*control.Service](i)
		if err != nil {
			return nil, err
		}
		return cubeapi.New(cubeapi.Config{
			Token: cfg.CallbackToken, InsecureNoToken: cfg.CallbackInsecureNoToken,
			Reports: svc, Jobs: svc, Migrations: svc, Catalog: svc, Artifacts: svc,
			TemplateCenterURL: w.tcBase, DownloadBaseURL: w.downloadBase,
			RenderCubelet: renderCubelet(requestOptions(cfg.Master.Request)), CADir: cfg.Master.CADir,
			Metrics: do.MustInvoke[*metrics.Metrics](i), Gatherer: do.MustInvoke[*prometheus.Registry](i),
			Logger: log,
		})
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
