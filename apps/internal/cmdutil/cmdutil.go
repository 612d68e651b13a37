// Package cmdutil holds what every binary's cobra tree shares: --version,
// refusing unknown subcommands (cobra prints help and exits 0 for them),
// the logging flags and the effective-configuration flag of the services.
package cmdutil

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/logging"
	"github.com/cubesandbox/templatecenter/apps/internal/version"
)

// Root is a root command with --version whose errors the caller prints.
func Root(name, short string) *cobra.Command {
	root := &cobra.Command{Use: name, Short: short, SilenceUsage: true, SilenceErrors: true}
	version.Set(root)
	Group(root)
	return root
}

// Group makes a command that only holds subcommands fail on an unknown one
// (exit non-zero, naming it) and print its help when called alone.
func Group(cmd *cobra.Command) {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return fmt.Errorf("%s (see %s --help)", msg, c.CommandPath())
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
}

// OneLine keeps a failure reason on one line, as scripts expect.
func OneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// ServiceFlags are the flags both services' serve commands take.
type ServiceFlags struct {
	Listen      string
	LogLevel    string
	LogFormat   string
	PrintConfig bool
}

// Register adds the flags; listenDoc describes --listen.
func (f *ServiceFlags) Register(cmd *cobra.Command, listenDoc string) {
	fl := cmd.Flags()
	fl.StringVar(&f.Listen, "listen", "", listenDoc)
	fl.StringVar(&f.LogLevel, "log-level", "", "debug, info, warn or error (default from the configuration, info)")
	fl.StringVar(&f.LogFormat, "log-format", "", "json or text (default from the configuration, json)")
	fl.BoolVar(&f.PrintConfig, "print-config", false, "print the effective configuration (secrets redacted) and where each value came from, then exit")
}

// Logger applies the flags over log and builds the service's logger, on
// stderr.
func (f *ServiceFlags) Logger(log *config.Log, w io.Writer) (*slog.Logger, error) {
	if f.LogLevel != "" {
		log.Level = f.LogLevel
	}
	if f.LogFormat != "" {
		log.Format = f.LogFormat
	}
	if w == nil {
		w = os.Stderr
	}
	return logging.New(w, log.Level, log.Format)
}

// MarkFlag records a setting set by a flag, for --print-config.
func MarkFlag(c *config.Config, env, flag string) {
	if c.Sources == nil {
		c.Sources = map[string]string{}
	}
	c.Sources[env] = "flag --" + flag
}

// NoArgs is cobra.NoArgs with a message that names the stray argument.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (%s takes flags only; see --help)", args[0], cmd.CommandPath())
	}
	return nil
}
