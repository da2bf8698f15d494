package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

func (a *app) gpusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gpus",
		Short: "Show every GPU of every live node: memory, load, health and the job holding it",
		Long: `gpus lists every GPU of every live node as its worker last reported it,
sorted by node then index, with the job holding it. Unhealthy GPUs get no
new work; why is printed under the table. Simulated GPUs (go-nvml's mock
servers, --gpus simulated:…) are marked "(simulated)": they are not real
hardware. -o json prints the list of GPU objects of GET /api/v1/gpus.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			gpus, err := a.client().GPUs(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, gpus)
			}
			return printGPUs(a, gpus)
		}),
	}
}

// printGPUs writes the GPU table, then one line per unhealthy GPU saying why.
func printGPUs(a *app, gpus []jobtype.GPU) error {
	if len(gpus) == 0 {
		fmt.Fprintln(a.stdout, "No GPUs: no live node reports one (lathe nodes lists the nodes).")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tIDX\tNAME\tMEM (MB)\tUTIL\tTEMP\tHEALTH\tJOB")
	var sick []string
	for _, g := range gpus {
		name := orDash(g.Name)
		if g.Simulated {
			name += " (simulated)"
		}
		health := "ok"
		if !g.Healthy {
			health = "UNHEALTHY"
			sick = append(sick, fmt.Sprintf("%s GPU %d unhealthy: %s", g.Node, g.Index, orDash(g.Unhealthy)))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d/%d\t%d%%\t%dC\t%s\t%s\n", g.Node, g.Index, name,
			g.MemoryUsedMB, g.MemoryTotalMB, g.UtilizationPct, g.TemperatureC, health, orDash(g.JobID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range sick {
		fmt.Fprintln(a.stdout, s)
	}
	return nil
}
