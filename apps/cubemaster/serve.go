package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
	"github.com/cubesandbox/templatecenter/apps/internal/masterapp"
)

func serveCommand() *cobra.Command {
	var f cmdutil.ServiceFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane: template API, status callback, distribution, sweeper",
		Long: `Serves the public /cube/* template API, the data plane's status callback
(/internal/template/jobs/{job_id}/status, shared-token auth), /notify/health
(liveness), /ready (the data plane, database and nodes), /metrics,
/openapi.json and the web console on /console/ (it uses the public API with
the operator's token); proxies compat and artifact downloads to the template center
(CUBE_TEMPLATE_CENTER_ADDR); distributes built artifacts to the nodes in
CUBE_MASTER_NODES, probing their gRPC health; replays stuck BUILT jobs and
collects unreferenced artifacts every CUBE_MASTER_SWEEP_INTERVAL. Applies the
metadata store's migrations at start-up. Listens on loopback by default
(CUBE_MASTER_LISTEN); see docs/configuration.md for every setting.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(nil)
			if err != nil {
				return err
			}
			if f.Listen != "" {
				cfg.Master.Listen = f.Listen
				cmdutil.MarkFlag(&cfg, "CUBE_MASTER_LISTEN", "listen")
			}
			log, err := f.Logger(&cfg.Master.Log, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if f.PrintConfig {
				return config.Print(cmd.OutOrStdout(), &cfg, config.ControlPlane)
			}
			for _, w := range cfg.Warnings {
				log.Warn(w)
			}
			if err := masterapp.Check(cfg); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", cfg.Master.Listen)
			if err != nil {
				return fmt.Errorf("listen %s (CUBE_MASTER_LISTEN): %w", cfg.Master.Listen, err)
			}
			defer ln.Close()
			return masterapp.Run(cmd.Context(), masterapp.Options{Config: cfg, Logger: log}, ln)
		},
	}
	f.Register(cmd, "address to listen on (default CUBE_MASTER_LISTEN or 127.0.0.1:8089)")
	return cmd
}
