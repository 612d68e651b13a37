package cmdutil

import (
	"os"
	"os/signal"
	"syscall"
)

// KeepRunningOnClosedOutput makes a write to a closed stdout or stderr fail
// with EPIPE instead of killing the process. Go ends a program that writes
// to a broken pipe on file descriptor 1 or 2 with SIGPIPE unless it asks
// for the signal (os/signal, "SIGPIPE"); a service whose log reader went
// away (`serve | tee` stopped with Ctrl-C, a log shipper restarted) would
// then die at its next log line, in the middle of builds and copies. Asking
// for the signal (and never reading it: delivery never blocks) keeps the
// process running; its log lines are lost until it is restarted with a
// reader. Child processes still start with the default SIGPIPE action:
// exec resets caught signals, not ignored ones, which is why this asks for
// the signal instead of ignoring it.
func KeepRunningOnClosedOutput() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}
