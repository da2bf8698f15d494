package jobstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestDispatchReservesGPUs: GPU reservations are exact and exclusive (never
// two jobs on one GPU), CPU slots are counted apart from them, and a
// release frees exactly what the job held.
func TestDispatchReservesGPUs(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	if err := s.Heartbeat(ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 1,
		GPUs: []jobtype.GPU{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}}}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string) *jobtype.Job {
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec(name, jobspec.PriorityNormal)})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	a, bb, c, d := mk("a"), mk("b"), mk("c"), mk("d")
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: a.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1, GPUs: []int{0, 1}}); err != nil {
		t.Fatalf("a on 0,1: %v", err)
	}
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: bb.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1, GPUs: []int{1, 2}}); !errors.Is(err, jobstore.ErrNodeFull) {
		t.Fatalf("b on 1,2 overlaps a: %v", err)
	}
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: bb.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1, GPUs: []int{2, 3}}); err != nil {
		t.Fatalf("b on 2,3: %v", err)
	}
	// A CPU job takes the one CPU slot, GPU reservations aside; a second waits.
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: c.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1}); err != nil {
		t.Fatalf("cpu job c: %v", err)
	}
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: d.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1}); !errors.Is(err, jobstore.ErrNodeFull) {
		t.Fatalf("cpu job d with the slot taken: %v", err)
	}
	nodes, err := s.Nodes(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	n := nodes[0]
	if n.Reserved != 3 || n.CPUReserved != 1 || n.GPUHolder(0) != a.ID || n.GPUHolder(3) != bb.ID || len(n.GPUs) != 4 {
		t.Fatalf("node status: %+v", n)
	}
	if got, _ := s.Get(ctx, bb.ID); len(got.GPUs) != 2 || got.GPUs[0] != 2 || got.Node != "n1" {
		t.Fatalf("job b record: node %s gpus %v", got.Node, got.GPUs)
	}
	// a ends: its GPUs are free again, b's are not.
	if err := s.Finish(ctx, a.ID, 1, jobstore.Ending{State: jobtype.StateFailed, Reason: jobtype.ReasonPermanent, Error: "x"}); err != nil {
		t.Fatalf("finish a: %v", err)
	}
	nodes, _ = s.Nodes(ctx)
	if nodes[0].GPUHolder(0) != "" || nodes[0].GPUHolder(1) != "" || nodes[0].GPUHolder(2) != bb.ID {
		t.Fatalf("after a ended: %+v", nodes[0].Reservations)
	}
}
