// Command templatecenter is the data plane of the template supply chain.
//
//	templatecenter build --image REF --out FILE [--builder mkfs|NAME] [--platform OS/ARCH]
//	                     [--insecure-registry HOST]... [--json]
//	templatecenter migrate
//
// build is a one-shot build of one image into an ext4 file; migrate applies
// the metadata store's schema migrations and exits. Settings come from the
// environment (CUBE_TEMPLATE_CENTER_*) and the YAML file named by
// CUBE_TEMPLATE_CENTER_CONFIG_PATH; see apps/config.
package main

import (
	"context"
	"errors"
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
		Use:           "templatecenter",
		Short:         "Build OCI images into ext4 root filesystems for microVM sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	config.AddStrictFlag(root)
	root.AddCommand(buildCommand(), migrateCommand(), serveCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "templatecenter: "+oneLine(err))
		code := 1
		var ec exitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		os.Exit(code)
	}
}

type exitCoder interface{ ExitCode() int }

// oneLine keeps the failure reason on one line, as scripts expect.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
