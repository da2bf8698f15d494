package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

func (a *app) queuesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "queues",
		Short: "Show the pending set, jobs per state and priority, the oldest wait, cloud bursts and the backend queues",
		Long: "lathe queues prints the queues part of GET /api/v1/overview (the numbers lathe top and the\n" +
			"dashboard show): jobs per state, queued jobs per priority, the oldest queued job's wait, the jobs\n" +
			"burst to cloud backends, and each node's queue. -o json prints that part's JSON, whose pending,\n" +
			"by_state and queues keys are those of GET /api/v1/queues.",
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ov, err := a.client().Overview(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, ov.Queues)
			}
			return writeQueues(a.stdout, ov)
		}),
	}
}

// writeQueues prints the overview's queues as `lathe queues` shows them.
func writeQueues(w io.Writer, ov *wire.Overview) error {
	q := ov.Queues
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if ov.Team != "" {
		fmt.Fprintf(tw, "Team:\t%s (its jobs only)\n", termSafe(ov.Team))
	}
	fmt.Fprintf(tw, "Pending (waiting for a place):\t%d\n", q.Pending)
	// States in lifecycle order, then any the CLI does not know.
	var states []string
	for _, s := range jobtype.States {
		if _, ok := q.ByState[s]; ok {
			states = append(states, string(s))
		}
	}
	var other []string
	for s := range q.ByState {
		if !s.Valid() {
			other = append(other, string(s))
		}
	}
	sort.Strings(other)
	for _, s := range append(states, other...) {
		fmt.Fprintf(tw, "  %s:\t%d\n", termSafe(s), q.ByState[jobtype.State(s)])
	}
	fmt.Fprintf(tw, "Queued by priority:\turgent %d, normal %d, batch %d\n", q.ByPriority["urgent"], q.ByPriority["normal"], q.ByPriority["batch"])
	oldest := "-"
	if q.OldestJob != "" {
		oldest = fmt.Sprintf("%s (%s, %.0f s)", fmtAge(time.Duration(q.OldestWaitS*float64(time.Second))), termSafe(q.OldestJob), q.OldestWaitS)
	}
	fmt.Fprintf(tw, "Oldest wait:\t%s\n", oldest)
	fmt.Fprintf(tw, "Burst (queued or running on cloud backends):\t%d\n", q.Burst)
	if err := tw.Flush(); err != nil {
		return err
	}
	if ov.Team != "" {
		return nil // asynq's per-queue counts cover every team: not shown
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSLOTS\tRESERVED\tPENDING\tACTIVE\tARCHIVED\tCOMPLETED")
	for _, qi := range q.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", termSafe(qi.Name), qi.Slots, qi.Reserved,
			qi.Pending, qi.Active, qi.Archived, qi.Completed)
	}
	return tw.Flush()
}
