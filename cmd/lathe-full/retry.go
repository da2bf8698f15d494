package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
)

func (a *app) retryCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Make a new attempt of a failed or cancelled job",
		Long: `Make a new attempt of a failed or cancelled job. It goes back to the pending set
and is placed again; it resumes from the job's last checkpoint.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			job, err := a.client().Retry(cmd.Context(), args[0])
			if err != nil {
				var ae *apiclient.APIError
				if errors.As(err, &ae) && ae.Code == apiclient.CodeConflict {
					return failedErrorf("cannot retry %s: only a failed or cancelled job can be retried (state %s)", args[0], orDash(ae.State))
				}
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, job)
			}
			_, err = fmt.Fprintf(a.stdout, "%s queued again as attempt %d\n", job.ID, job.Attempt)
			return err
		}),
	}
}
