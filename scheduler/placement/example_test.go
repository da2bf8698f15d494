package placement_test

import (
	"fmt"
	"time"

	"github.com/lathe-ml/lathe/scheduler/placement"
)

// Three 4-GPU jobs for one 8-GPU node: two start on disjoint GPUs, the third
// waits for the first to end.
func ExamplePlace() {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	node := placement.Node{Name: "gpu-box-1"}
	for i := range 8 {
		node.GPUs = append(node.GPUs, placement.GPU{Index: i, Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559, Healthy: true})
	}
	req := placement.Request{GPUs: 4, MinMemoryMB: 40 * 1024, Models: []string{"H100"}}
	plan := placement.Place(placement.Snapshot{
		Now:   now,
		Nodes: []placement.Node{node},
		Pending: []placement.Job{
			{ID: "j-1", Priority: placement.PriorityNormal, Request: req, Estimate: 2 * time.Hour},
			{ID: "j-2", Priority: placement.PriorityNormal, Request: req, Estimate: 3 * time.Hour},
			{ID: "j-3", Priority: placement.PriorityNormal, Request: req, Estimate: time.Hour},
		},
	})
	for _, a := range plan.Assign {
		fmt.Println("start", a.JobID, "on", a.Node, a.GPUs)
	}
	for _, w := range plan.Waits {
		fmt.Printf("wait %s #%d from %s: %s\n", w.JobID, w.Position, w.EstimatedStart.Format(time.Kitchen), w.Reason)
	}
	// Output:
	// start j-1 on gpu-box-1 [0 1 2 3]
	// start j-2 on gpu-box-1 [4 5 6 7]
	// wait j-3 #1 from 2:00PM: no room: needs 4 × ≥40 GB H100; the largest free block on any node is 0; first in line for GPUs [0 1 2 3] on gpu-box-1
}
