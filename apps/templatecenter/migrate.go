package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
)

func migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the metadata store's schema migrations and exit",
		Long:  "Migrates the database named by CUBE_TEMPLATE_CENTER_DB_DSN (a SQLite file's directory is created).",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(nil)
			if err != nil {
				return err
			}
			for _, w := range cfg.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			st, err := startup.OpenStore(cmd.Context(), "CUBE_TEMPLATE_CENTER_DB_DSN", cfg.DBDSN)
			if err != nil {
				return err
			}
			defer st.Close()
			applied, err := st.Migrate(cmd.Context())
			if err != nil {
				return fmt.Errorf("migrate %s store (CUBE_TEMPLATE_CENTER_DB_DSN %s): %w", st.Dialect(), config.RedactDSN(cfg.DBDSN), err)
			}
			if len(applied) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s schema is up to date\n", st.Dialect())
				return nil
			}
			for _, v := range applied {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %s migration %s\n", st.Dialect(), v)
			}
			return nil
		},
	}
}

// warn prints configuration warnings on stderr.
func warn(cmd *cobra.Command, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
	}
}
