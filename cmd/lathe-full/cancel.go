package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

func (a *app) cancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Ask the scheduler to cancel a job",
		Long: `Ask the scheduler to cancel a job. The request is durable: the job's worker
stops the trainer and records "cancelled" once it has exited.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			job, err := a.client().Cancel(cmd.Context(), args[0])
			if err != nil {
				var ae *apiclient.APIError
				if errors.As(err, &ae) && ae.Code == apiclient.CodeConflict {
					return failedErrorf("cannot cancel %s: it already ended (state %s)", args[0], orDash(ae.State))
				}
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, job)
			}
			if job.State == jobtype.StateCancelled {
				_, err = fmt.Fprintf(a.stdout, "%s is cancelled\n", job.ID)
			} else {
				_, err = fmt.Fprintf(a.stdout, "cancel requested for %s (state %s)\n", job.ID, job.State)
			}
			return err
		}),
	}
}
