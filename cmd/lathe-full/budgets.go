package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) budgetsCmd() *cobra.Command {
	var month string
	cmd := &cobra.Command{
		Use:   "budgets",
		Short: "Show a month's spend per backend and team: limit, spent, reserved",
		Long: `budgets lists, for the current month (or --month YYYY-MM, UTC), each backend
of the scheduler's config and each team: its monthly limit (- for none),
what settled jobs spent (local GPU-hours × price; cloud instance time ×
price, per second with a 60 s minimum), and what queued and running jobs
hold reserved as their estimate. -o json prints GET /api/v1/budgets.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			b, err := a.client().Budgets(cmd.Context(), month)
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, b)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "MONTH %s\n", b.Month)
			fmt.Fprintln(tw, "SCOPE\tKIND\tLIMIT\tSPENT\tRESERVED\tLEFT")
			for _, r := range b.Scopes {
				limit, left := "-", "-"
				if r.LimitUSD > 0 {
					limit, left = fmtDollars(r.LimitUSD), fmtDollars(r.LimitUSD-r.SpentUSD-r.ReservedUSD)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scope, orDash(r.Kind), limit, fmtDollars(r.SpentUSD), fmtDollars(r.ReservedUSD), left)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().StringVar(&month, "month", "", "the month, YYYY-MM (UTC); default the current one")
	return cmd
}

func fmtDollars(v float64) string { return fmt.Sprintf("$%.2f", v) }
