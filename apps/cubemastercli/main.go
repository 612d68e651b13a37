// Command cubemastercli is the operator CLI for the cubemaster template API.
//
//	cubemastercli [-a host[,host...]] [-p 8089] [--timeout 35s] tpl <command> [flags]
//
// Commands under "tpl" (alias "template"): create-from-image, status, watch,
// redo, merge, list (ls), info, alias, delete, build-status. Every request
// carries the header "X-Caller: mastercli" and goes to one of the --address
// hosts picked at random. A non-200 HTTP status or an envelope ret_code other
// than 200 prints one line, "cubemastercli: <reason>", on stderr and exits 1.
// --json prints the raw (indented) response instead of the human view.
//
// create-from-image, redo and merge wait for the job by default, polling
// every --interval; on a terminal the progress is one live line, otherwise
// a plain line per change. --detach returns right after submission. A job
// that ends FAILED exits 1, with --json too (after printing the response).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
