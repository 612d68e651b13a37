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
// create-from-image, redo, merge and watch wait for the job by default,
// polling every --interval; on a terminal the progress is two live lines
// laid out to the terminal's width (the job, and its nodes: the ones it
// still waits for and the ones that failed), otherwise a plain line per
// change; with --json, one compact JSON object per line for every update.
// --detach returns right after submission.
//
// Exit status: 0 when the command did what was asked (a job READY on every
// one of its nodes); 1 when it could not, or the job ended FAILED; 3 when
// the job ended READY on only some of its nodes (a partial result: the
// template is PARTIALLY_READY), with or without --json.
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
