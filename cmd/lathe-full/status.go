package main

import (
	"github.com/spf13/cobra"
)

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "Show one job: state, placement, progress, losses, artifacts",
		Args:  exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			job, err := a.client().Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, job)
			}
			return printJob(a.stdout, job, a.now())
		}),
	}
}
