package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// maxPage is the largest page the API serves.
const maxPage = 1000

func (a *app) listCmd() *cobra.Command {
	var (
		state   string
		limit   int
		sweepID string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if state != "" && !jobtype.State(state).Valid() {
				return usageErrorf("--state %q is not a job state (%v)", state, jobtype.States)
			}
			if limit < 1 {
				return usageErrorf("--limit must be at least 1, not %d", limit)
			}
			c := a.client()
			out := apiclient.JobList{Jobs: []*jobtype.Job{}}
			for len(out.Jobs) < limit {
				var page *apiclient.JobList
				var err error
				if sweepID != "" {
					page, err = c.ListSweep(cmd.Context(), sweepID, state, out.NextCursor, min(limit-len(out.Jobs), maxPage))
				} else {
					page, err = c.List(cmd.Context(), state, out.NextCursor, min(limit-len(out.Jobs), maxPage))
				}
				if err != nil {
					return err
				}
				out.Jobs = append(out.Jobs, page.Jobs...)
				// A page may be empty and still have a next cursor (the
				// scheduler passed over other teams' jobs): follow it, unless
				// the cursor did not move.
				if page.NextCursor == "" || page.NextCursor == out.NextCursor {
					out.NextCursor = page.NextCursor
					break
				}
				out.NextCursor = page.NextCursor
			}
			if len(out.Jobs) > limit {
				out.Jobs = out.Jobs[:limit]
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, out)
			}
			now := a.now()
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tATTEMPT\tSTEP\tLOSS\tAGE")
			for _, j := range out.Jobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Name, j.State,
					strconv.Itoa(j.Attempt), fmtStep(j.Progress), fmtLoss(j.Progress), fmtAge(now.Sub(j.CreatedAt)))
			}
			return tw.Flush()
		}),
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only jobs in this state")
	f.StringVar(&sweepID, "sweep", "", "only the trials of this sweep, in index order")
	f.IntVar(&limit, "limit", 50, "show at most this many jobs (pages are followed)")
	return cmd
}
