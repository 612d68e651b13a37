// Command cubemaster is the control plane of the template supply chain.
//
//	cubemaster serve [--listen ADDR]
//	cubemaster migrate
//
// serve runs the public /cube/* template API, the data plane's status
// callback, the resume pipeline that distributes built artifacts to nodes,
// the BUILT-job sweeper and artifact GC, and node health probing. migrate
// applies the metadata store's schema migrations and exits.
//
// Settings come from the environment (and the YAML file named by
// CUBE_TEMPLATE_CENTER_CONFIG_PATH); see apps/config:
//
//	CUBE_MASTER_LISTEN             listen address (default :8089; --listen wins)
//	CUBE_MASTER_DB_DSN             metadata store; default CUBE_TEMPLATE_CENTER_DB_DSN
//	                               (both processes share one database)
//	CUBE_TEMPLATE_CENTER_ADDR      data plane base URL (default http://127.0.0.1:8090)
//	CUBE_TEMPLATE_CALLBACK_TOKEN   shared secret for internal routes; required unless
//	CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN=true
//	CUBE_MASTER_NODES              id=host:port[@instanceType],... (node agents, gRPC)
//	CUBE_MASTER_NODE_PROBE_INTERVAL  node gRPC health probe period (default 10s)
//	CUBE_MASTER_DOWNLOAD_BASE_URL  base URL nodes download artifacts from (default
//	                               http://<listen host, or 127.0.0.1>:<port>)
//	CUBE_TEMPLATE_CENTER_REDIS_ADDR  optional Redis for live progress
//	CUBE_MASTER_SWEEP_INTERVAL     sweeper + GC period (default 1m)
//	CUBE_MASTER_ENVD_HOST_DIR      directory holding the envd binary (optional)
//
// Failures print one line, "cubemaster: <reason>", and exit non-zero.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "cubemaster",
		Short:         "Control plane: template API, distribution to nodes, cleanup",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	config.AddStrictFlag(root)
	root.AddCommand(serveCommand(), migrateCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "cubemaster: "+oneLine(err))
		os.Exit(1)
	}
}

// oneLine keeps the failure reason on one line, as scripts expect.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
