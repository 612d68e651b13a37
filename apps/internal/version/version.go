// Package version holds what `--version` prints for every binary: the
// version and commit stamped at link time (the Makefile passes
// -ldflags "-X .../version.Version=... -X .../version.Commit=..."), and the
// Go version the binary was built with.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Stamped at link time; the defaults say the binary was built without them.
var (
	Version = "dev"
	Commit  = ""
)

// commit is Commit, else the VCS revision Go recorded (when built with
// -buildvcs), else "unknown".
func commit() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// String is the one line --version prints.
func String(binary string) string {
	return fmt.Sprintf("%s %s (commit %s, %s %s/%s)", binary, Version, commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Set gives a cobra root command its --version flag.
func Set(root *cobra.Command) {
	root.Version = Version
	root.SetVersionTemplate(String(root.Name()) + "\n")
}
