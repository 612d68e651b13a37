package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
	"github.com/cubesandbox/templatecenter/apps/internal/tcapp"
)

func serveCommand() *cobra.Command {
	var (
		f                 cmdutil.ServiceFlags
		insecure, trusted []string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the data plane: build API, artifact downloads, reconciler",
		Long: `Serves the internal build API under /tc/api/v1 (shared-token auth), artifact
downloads, /health, /ready, /metrics and /openapi.json, runs builds with the
configured builder, reports status to the master (CUBE_MASTER_ADDR) and
reconciles stale jobs. Applies the metadata store's migrations at start-up.
Listens on loopback by default (CUBE_TEMPLATE_CENTER_LISTEN): only the master
and the nodes talk to it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(nil)
			if err != nil {
				return err
			}
			var nodeNote string
			if f.Listen != "" {
				cfg.Listen = f.Listen
				cmdutil.MarkFlag(&cfg, "CUBE_TEMPLATE_CENTER_LISTEN", "listen")
			} else if addr, note := cfg.TemplateCenterListen(config.IsLocalIP); note != "" || addr != cfg.Listen {
				// Upstream's node identity: CUBE_TEMPLATE_CENTER_NODE_IP
				// (or CUBE_SANDBOX_NODE_IP) names the listen address when
				// none was chosen.
				if addr != cfg.Listen {
					cfg.Listen = addr
					cfg.Sources["CUBE_TEMPLATE_CENTER_LISTEN"] = "node IP, " + cfg.Sources["CUBE_TEMPLATE_CENTER_NODE_IP"]
				}
				nodeNote = note
			}
			if len(insecure) > 0 {
				cfg.InsecureRegistries = append(cfg.InsecureRegistries, insecure...)
				cmdutil.MarkFlag(&cfg, "CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES", "insecure-registry")
			}
			if len(trusted) > 0 {
				cfg.TrustedRegistries = append(cfg.TrustedRegistries, trusted...)
				cmdutil.MarkFlag(&cfg, "CUBE_TEMPLATE_CENTER_TRUSTED_REGISTRIES", "allow-registry")
			}
			log, err := f.Logger(&cfg.Log, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if f.PrintConfig {
				return config.Print(cmd.OutOrStdout(), &cfg, config.DataPlane)
			}
			for _, w := range cfg.Warnings {
				log.Warn(w)
			}
			if nodeNote != "" {
				log.Info("templatecenter node identity", "node_ip", cfg.NodeIP, "listen", cfg.Listen, "note", nodeNote)
			}
			if err := tcapp.Check(cfg); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return fmt.Errorf("listen %s (CUBE_TEMPLATE_CENTER_LISTEN): %w", cfg.Listen, err)
			}
			defer ln.Close()
			return tcapp.Run(cmd.Context(), tcapp.Options{Config: cfg, Logger: log}, ln)
		},
	}
	f.Register(cmd, "address to listen on (default CUBE_TEMPLATE_CENTER_LISTEN or 127.0.0.1:8090)")
	cmd.Flags().StringArrayVar(&insecure, "insecure-registry", nil, "registry HOST[:PORT] spoken to over plain HTTP, allowed on loopback/private addresses (repeatable; adds to CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES)")
	cmd.Flags().StringArrayVar(&trusted, "allow-registry", nil, "registry HOST[:PORT] (HTTPS) allowed on loopback/private addresses (repeatable; adds to CUBE_TEMPLATE_CENTER_TRUSTED_REGISTRIES)")
	return cmd
}
