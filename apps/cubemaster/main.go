// Command cubemaster is the control plane of the template supply chain.
//
//	cubemaster serve [--listen ADDR] [--print-config] [--log-level L] [--log-format F]
//	cubemaster dev [--data-dir DIR] [--listen ADDR] ...
//	cubemaster migrate
//	cubemaster --version
//
// serve runs the public /cube/* template API, the data plane's status
// callback, the resume pipeline that distributes built artifacts to nodes,
// the BUILT-job sweeper and artifact GC, and node health probing. dev runs
// everything in one process on embedded defaults (the master, the data
// plane, a node agent and an OCI registry with an example image, all on
// loopback), for trying it out. migrate applies the metadata store's
// schema migrations and exits.
//
// Settings come from the environment (and the YAML file named by
// CUBE_TEMPLATE_CENTER_CONFIG_PATH); docs/configuration.md lists them all.
// Failures print one line, "cubemaster: <reason>", and exit non-zero.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
)

func main() {
	cmdutil.KeepRunningOnClosedOutput()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := cmdutil.Root("cubemaster", "Control plane: template API, distribution to nodes, cleanup")
	config.AddStrictFlag(root)
	root.AddCommand(serveCommand(), migrateCommand(), devCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "cubemaster: "+cmdutil.OneLine(err))
		os.Exit(1)
	}
}
