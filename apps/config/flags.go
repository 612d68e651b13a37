package config

import (
	"os"

	"github.com/spf13/cobra"
)

// AddStrictFlag adds --strict-config to a command and its subcommands: it
// makes Load refuse unknown settings in the config file instead of warning
// about them (the same as CUBE_TEMPLATE_CENTER_STRICT_CONFIG=true).
func AddStrictFlag(root *cobra.Command) {
	var strict bool
	root.PersistentFlags().BoolVar(&strict, "strict-config", false, "refuse unknown settings in the config file instead of warning")
	prev := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if strict {
			// Load reads the environment; the flag is its spelling on the
			// command line.
			if err := os.Setenv("CUBE_TEMPLATE_CENTER_STRICT_CONFIG", "true"); err != nil {
				return err
			}
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}
