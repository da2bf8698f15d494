package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/wire"
)

func (a *app) nodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "Show the live worker nodes: GPUs free and unhealthy, CPU slots, jobs",
		Long: `nodes lists the live worker nodes (heartbeat not expired), sorted by
name: GPUs (free = healthy and held by no job), CPU slots held/total, the
NVIDIA driver and CUDA versions, when the node last beat, and the jobs
holding a reservation. Nodes with simulated GPUs are marked "(simulated)".
-o json prints the list of node objects of GET /api/v1/nodes.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			nodes, err := a.client().Nodes(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, nodes)
			}
			return printNodes(a, nodes, a.now())
		}),
	}
}

// printNodes writes the node table.
func printNodes(a *app, nodes []wire.NodeInfo, now time.Time) error {
	if len(nodes) == 0 {
		fmt.Fprintln(a.stdout, "No live nodes (is a lathed worker running?).")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tBACKEND\tGPUS\tFREE\tUNHEALTHY\tCPU SLOTS\tDRIVER\tCUDA\tSEEN\tJOBS")
	for _, n := range nodes {
		gpus := strconv.Itoa(n.GPUs)
		if n.Simulated {
			gpus += " (simulated)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d/%d\t%s\t%s\t%s ago\t%s\n", n.Name, orDash(n.Backend), gpus,
			n.GPUsFree, n.GPUsUnhealthy, n.CPUReserved, n.Slots, orDash(n.Driver), orDash(n.CUDA),
			fmtAge(now.Sub(n.SeenAt)), orDash(strings.Join(n.Jobs, ",")))
	}
	return tw.Flush()
}
