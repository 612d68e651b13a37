// Command templatecenter is the data plane of the template supply chain.
//
//	templatecenter build --image REF --out FILE [--builder mkfs|NAME] [--platform OS/ARCH]
//	                     [--insecure-registry HOST]... [--allow-registry HOST]... [--json]
//	templatecenter serve [--listen ADDR] [--print-config] [--log-level L] [--log-format F]
//	                     [--insecure-registry HOST]... [--allow-registry HOST]...
//	templatecenter migrate
//	templatecenter --version
//
// build is a one-shot build of one image into an ext4 file; serve runs the
// data plane's internal API, downloads and reconciler; migrate applies the
// metadata store's schema migrations and exits. Settings come from the
// environment (CUBE_TEMPLATE_CENTER_*) and the YAML file named by
// CUBE_TEMPLATE_CENTER_CONFIG_PATH; docs/configuration.md lists them all.
package main

import (
	"context"
	"errors"
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
	root := cmdutil.Root("templatecenter", "Build OCI images into ext4 root filesystems for microVM sandboxes")
	config.AddStrictFlag(root)
	root.AddCommand(buildCommand(), migrateCommand(), serveCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "templatecenter: "+cmdutil.OneLine(err))
		code := 1
		var ec exitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		os.Exit(code)
	}
}

type exitCoder interface{ ExitCode() int }
