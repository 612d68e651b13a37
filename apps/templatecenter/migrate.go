package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
)

func migrateCommand() *cobra.Command {
	var plan bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the metadata store's schema migrations and exit",
		Long: `Migrates the database named by CUBE_TEMPLATE_CENTER_DB_DSN (a SQLite file's directory is created).
A database created by upstream's master (its tables, no cube_schema_migrations)
is adopted: only additions (tables, columns, indexes, wider types); nothing of
theirs is dropped or narrowed. --plan prints the statements first and changes
nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(nil)
			if err != nil {
				return err
			}
			for _, w := range cfg.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			st, err := startup.OpenStore(cmd.Context(), cfg.DatabaseSetting(config.DataPlane), cfg.DBDSN)
			if err != nil {
				return err
			}
			defer st.Close()
			return startup.MigrateCommand(cmd.Context(), cmd.OutOrStdout(), st, plan, cfg.DatabaseSetting(config.DataPlane), config.RedactDSN(cfg.DBDSN))
		},
	}
	cmd.Flags().BoolVar(&plan, "plan", false, "print the statements a migration would run (as SQL) and change nothing")
	return cmd
}

// warn prints configuration warnings on stderr.
func warn(cmd *cobra.Command, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
	}
}
