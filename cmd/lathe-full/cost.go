package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/cost"
)

// costCmd is `lathe cost FILE` (the job's cost on every feasible backend,
// through the scheduler's routing) and `lathe cost breakeven` (offline).
func (a *app) costCmd() *cobra.Command {
	var rf *routeFlags
	cmd := &cobra.Command{
		Use:   "cost FILE | cost breakeven",
		Short: "Estimate a job's GPU-hours and cost on every feasible backend, or when owning GPUs beats renting",
		Long: `lathe cost FILE shows the job's estimated run time, GPU-hours and cost on
every backend (feasible ones first, cheapest first; then the infeasible ones
with why), as routing computes them. It takes the same flags as
'lathe route --explain' (--config FILE decides offline; --assume-wait and
--assume-spent state what-ifs), prints the same JSON with -o json, and exits
the same way: 1 when no backend may run the job.

lathe cost breakeven gives the months after which owning a GPU beats renting
one, for the prices and utilisation stated, with the formula shown
(docs/cost.md). Its defaults are the worked example of docs/cost.md: one H100
of a DGX H100 against AWS p5.48xlarge on demand (sources cited there).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s takes a job spec FILE (or: cost breakeven)", cmd.CommandPath())
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.routeExplain(cmd.Context(), cmd.InOrStdin(), args[0], rf, true)
		}),
	}
	rf = addRouteFlags(cmd)
	cmd.AddCommand(a.breakevenCmd())
	return cmd
}

func (a *app) breakevenCmd() *cobra.Command {
	// The defaults: docs/cost.md's worked example.
	t := cost.TCO{PurchaseUSDPerGPU: 33750, AmortisationMonths: 48, PowerKWPerGPU: 1.0, USDPerKWh: 0.0892, PUE: 1.58,
		OpsOverheadPct: 80, Utilisation: 0.6}
	cloud := 55.04 / 8
	cmd := &cobra.Command{
		Use:   "breakeven",
		Short: "Months after which owning a GPU beats renting it (formula shown)",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			b, err := cost.BreakevenMonths(t, cloud)
			if err != nil {
				return usageErrorf("%v", err) // every bad input named with its value
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, map[string]any{"breakeven": b, "owned_usd_per_used_gpu_hour": t.USDPerGPUHour(),
					"breakdown": t.Breakdown()})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			if b.Never {
				fmt.Fprintf(tw, "Breakeven:\tnever: renting costs less per month than running owned GPUs at %.0f%% utilisation\n", b.Utilisation*100)
			} else {
				fmt.Fprintf(tw, "Breakeven:\t%.1f months\n", b.Months)
			}
			fmt.Fprintf(tw, "Owned:\t$%.3f per used GPU-hour\n", t.USDPerGPUHour())
			fmt.Fprintf(tw, "Rented:\t$%.3f per GPU-hour\n", cloud)
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "\n%s\n", b.Formula)
			return err
		}),
	}
	f := cmd.Flags()
	f.Float64Var(&t.PurchaseUSDPerGPU, "purchase-usd-per-gpu", t.PurchaseUSDPerGPU, "purchase price of one GPU with its share of the server")
	f.Float64Var(&t.AmortisationMonths, "amortisation-months", t.AmortisationMonths, "months over which the purchase is written off")
	f.Float64Var(&t.PowerKWPerGPU, "power-kw-per-gpu", t.PowerKWPerGPU, "average draw of one GPU with its share of the server, kW")
	f.Float64Var(&t.USDPerKWh, "usd-per-kwh", t.USDPerKWh, "electricity price")
	f.Float64Var(&t.PUE, "pue", t.PUE, "data-centre power usage effectiveness")
	f.Float64Var(&t.OpsOverheadPct, "ops-overhead-pct", t.OpsOverheadPct, "staff, space and support as % of the hardware cost")
	f.Float64Var(&t.Utilisation, "utilisation", t.Utilisation, "fraction of hours the GPUs do paid work (0-1]")
	f.Float64Var(&cloud, "cloud-usd-per-gpu-hour", cloud, "what renting costs per GPU-hour")
	return cmd
}
