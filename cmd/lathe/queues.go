package main

import (
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

func (a *app) queuesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "queues",
		Short: "Show the pending set, jobs per state and the backend queues",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			q, err := a.client().Queues(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, q)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
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
				fmt.Fprintf(tw, "  %s:\t%d\n", s, q.ByState[jobtype.State(s)])
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout)
			tw = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tSLOTS\tRESERVED\tPENDING\tACTIVE\tARCHIVED\tCOMPLETED")
			for _, qi := range q.Queues {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", qi.Name, qi.Slots, qi.Reserved,
					qi.Pending, qi.Active, qi.Archived, qi.Completed)
			}
			return tw.Flush()
		}),
	}
}
