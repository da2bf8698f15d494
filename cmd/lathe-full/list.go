package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// maxPage is the largest page the API serves.
const maxPage = 1000

// listOptions are lathe list's flags.
type listOptions struct {
	state   string
	limit   int
	sweepID string
}

func (a *app) listCmd() *cobra.Command {
	var o listOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.list(cmd.Context(), o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.state, "state", "", "only jobs in this state")
	f.StringVar(&o.sweepID, "sweep", "", "only the trials of this sweep, in index order")
	f.IntVar(&o.limit, "limit", 50, "show at most this many jobs (pages are followed)")
	return cmd
}

func (a *app) list(ctx context.Context, o listOptions) error {
	if o.state != "" && !jobtype.State(o.state).Valid() {
		return usageErrorf("--state %q is not a job state (%v)", o.state, jobtype.States)
	}
	if o.limit < 1 {
		return usageErrorf("--limit must be at least 1, not %d", o.limit)
	}
	out, err := listJobs(ctx, a.client(), o)
	if err != nil {
		return err
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
}

// listJobs fetches up to o.limit jobs (of sweep o.sweepID, if set), following
// pages of at most maxPage. NextCursor is where a further list would go on.
func listJobs(ctx context.Context, c *apiclient.Client, o listOptions) (apiclient.JobList, error) {
	out := apiclient.JobList{Jobs: []*jobtype.Job{}}
	for len(out.Jobs) < o.limit {
		var page *apiclient.JobList
		var err error
		if o.sweepID != "" {
			page, err = c.ListSweep(ctx, o.sweepID, o.state, out.NextCursor, min(o.limit-len(out.Jobs), maxPage))
		} else {
			page, err = c.List(ctx, o.state, out.NextCursor, min(o.limit-len(out.Jobs), maxPage))
		}
		if err != nil {
			return out, err
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
	if len(out.Jobs) > o.limit {
		out.Jobs = out.Jobs[:o.limit]
	}
	return out, nil
}
