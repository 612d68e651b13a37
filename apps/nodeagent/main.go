// Command nodeagent is the node side of CubeTemplateCenter's template
// distribution: a gRPC server that speaks the Cubelet protocol
// (Images.CreateImage/DestroyImage, CubeboxMgr.AppSnapshot/CleanupTemplate)
// so a control plane can use it in place of a Cubelet. It downloads ext4
// artifacts with their token, verifies and stores them, and records local
// run templates. It does NOT boot VMs. See package agent for the details.
//
//	nodeagent [--listen 127.0.0.1:9999] [--data-dir DIR] [--node-id node-1] [--log-level L] [--log-format F]
//	nodeagent --version
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/agentapp"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
	"github.com/cubesandbox/templatecenter/apps/internal/logging"
	"github.com/cubesandbox/templatecenter/apps/internal/version"
)

const longHelp = `nodeagent serves the Cubelet gRPC services the CubeTemplateCenter control
plane calls on a node: Images.CreateImage and DestroyImage (download, verify
and store ext4 rootfs artifacts; delete them) and CubeboxMgr.AppSnapshot and
CleanupTemplate (record and remove a local run template).

It does NOT boot VMs: AppSnapshot only checks that the artifacts are present
and writes <data-dir>/templates/<template id>/template.json. Use it for
development, tests and staging a node's disk; a real Cubelet is needed to run
sandboxes.

The listener has no authentication: bind it to an internal network only.
Every flag's default can also be set by the environment variable shown
(docs/configuration.md). The default node id, node-1, is the one the
master's examples use (CUBE_MASTER_NODES=node-1=127.0.0.1:9999).`

type agentConfig struct {
	listen          string
	dataDir         string
	nodeID          string
	logLevel        string
	logFormat       string
	addrFile        string
	shutdownTimeout time.Duration
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newRoot builds the command; run is called with the parsed settings.
func newRoot(run func(cmd *cobra.Command, c agentConfig) error) (*cobra.Command, error) {
	var c agentConfig
	root := &cobra.Command{
		Use:           "nodeagent",
		Short:         "Cubelet-compatible node agent: stores template artifacts on a node (boots no VMs)",
		Long:          longHelp,
		Args:          cmdutil.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return run(cmd, c) },
	}
	version.Set(root)
	fl := root.Flags()
	for _, s := range config.NodeAgentSettings() {
		def := envOr(s.Env, s.Default)
		usage := s.Doc + " (" + s.Env + ")"
		switch s.Flag {
		case "listen":
			fl.StringVar(&c.listen, s.Flag, def, usage)
		case "data-dir":
			fl.StringVar(&c.dataDir, s.Flag, def, usage)
		case "node-id":
			fl.StringVar(&c.nodeID, s.Flag, def, usage)
		case "log-level":
			fl.StringVar(&c.logLevel, s.Flag, def, usage)
		case "log-format":
			fl.StringVar(&c.logFormat, s.Flag, def, usage)
		case "addr-file":
			fl.StringVar(&c.addrFile, s.Flag, def, usage)
		case "shutdown-timeout":
			d, err := time.ParseDuration(def)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %w", s.Env, def, err)
			}
			fl.DurationVar(&c.shutdownTimeout, s.Flag, d, usage)
		default:
			return nil, fmt.Errorf("nodeagent: setting %s has no flag", s.Flag)
		}
	}
	return root, nil
}

func newLogger(c agentConfig, w io.Writer) (*slog.Logger, error) {
	log, err := logging.New(w, c.logLevel, c.logFormat)
	if err != nil {
		return nil, fmt.Errorf("--log-level/--log-format: %w", err)
	}
	return log, nil
}

// serve listens and runs the agent until ctx ends.
func serve(ctx context.Context, c agentConfig, log *slog.Logger) error {
	lis, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.listen, err)
	}
	defer lis.Close()
	if c.addrFile != "" {
		if err := os.WriteFile(c.addrFile, []byte(lis.Addr().String()+"\n"), 0o644); err != nil {
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	return agentapp.Run(ctx, agentapp.Options{DataDir: c.dataDir, NodeID: c.nodeID, Logger: log, ShutdownTimeout: c.shutdownTimeout}, lis)
}

func main() {
	cmdutil.KeepRunningOnClosedOutput()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	root, err := newRoot(func(cmd *cobra.Command, c agentConfig) error {
		log, err := newLogger(c, cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		if err := serve(cmd.Context(), c, log); err != nil {
			log.Error("node agent failed", "err", err)
			return err
		}
		return nil
	})
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent: "+cmdutil.OneLine(err))
		os.Exit(1)
	}
}
