package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
)

func (a *app) schedulesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schedules",
		Short: "Show the schedules (daemon config schedules:), their next tick and what the last one did",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			l, err := a.client().Schedules(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, l)
			}
			return printSchedules(a, l)
		}),
	}
}

// printSchedules writes the table of lathe schedules: one row a schedule,
// then each last tick's message, if any.
func printSchedules(a *app, l *apiclient.ScheduleList) error {
	if len(l.Schedules) == 0 {
		_, err := fmt.Fprintln(a.stdout, "No schedules (add them under schedules: in the daemon config).")
		return err
	}
	now := a.now()
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCRON\tTIMEZONE\tKIND\tNEXT\tLAST\tOUTCOME\tLAST RUN\tRUN STATE")
	for _, s := range l.Schedules {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(s.Name), termSafe(s.Cron), termSafe(s.Timezone),
			termSafe(s.Kind), tickCell(s.NextTick, now), tickCell(s.LastTick, now), orDash(termSafe(s.Outcome)),
			orDash(termSafe(s.LastRunID)), orDash(termSafe(s.LastRunState)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range l.Schedules {
		if s.Message != "" {
			fmt.Fprintf(a.stdout, "%s: %s\n", termSafe(s.Name), termSafe(s.Message))
		}
	}
	return nil
}

// tickCell shows a tick as its UTC time and how far it is from now.
func tickCell(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := t.Sub(now)
	rel := "in " + fmtAge(d)
	if d < 0 {
		rel = fmtAge(-d) + " ago"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z") + " (" + rel + ")"
}
