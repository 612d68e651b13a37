package main
import "github.com/spf13/cobra"
func devCommand() *cobra.Command { return &cobra.Command{Use: "dev"} }
