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
	"runtime/debug"
	"syscall"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
)

func main() {
	cmdutil.KeepRunningOnClosedOutput()
	gcTarget()
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

// gcTarget halves the heap's headroom over live data unless GOGC is set.
// A build's live heap is small next to the garbage it makes as it goes
// (tree entries decoded one at a time, per-layer buffers), and with Go's
// default target the heap grows to twice the live data between
// collections: most of a large image's peak memory. Half that headroom
// costs about one percent of a build's CPU more (GODEBUG=gctrace=1) and
// brings a cold build to about 250 bytes of peak RSS per tree entry
// (docs/benchmarks.md, the scale part).
func gcTarget() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
}
