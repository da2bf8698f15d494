package jobstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// gangRig is a store with a settable clock and two 2-GPU nodes, n1 and n2.
type gangRig struct {
	s   *jobstore.Store
	ctx context.Context
	now *atomic.Int64 // ms
}

func setupGang(t *testing.T) gangRig {
	t.Helper()
	srv := redistest.Start(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	s := jobstore.New(srv.Client(), jobstore.Config{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	ctx := context.Background()
	for _, n := range []string{"n1", "n2"} {
		if err := s.Heartbeat(ctx, jobstore.Node{Name: n, Incarnation: "i-" + n, Backend: "local", Slots: 1,
			GPUs: []jobtype.GPU{{Index: 0}, {Index: 1}}}, jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
			t.Fatal(err)
		}
	}
	return gangRig{s: s, ctx: ctx, now: &now}
}

func (g gangRig) gangJob(t *testing.T) *jobtype.Job {
	t.Helper()
	sp := spec("gang", jobspec.PriorityNormal)
	sp.Resources = jobspec.Resources{GPUs: 1, Nodes: 2}
	j, _, err := g.s.Create(g.ctx, jobstore.NewJob{Spec: sp})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// dispatchedGang is a new gang job dispatched to n1 and n2 as attempt 1.
func (g gangRig) dispatchedGang(t *testing.T) *jobtype.Job {
	t.Helper()
	j := g.gangJob(t)
	if err := g.s.DispatchGang(g.ctx, j.ID, 1, twoRanks, ""); err != nil {
		t.Fatal(err)
	}
	return j
}

// holders is who holds GPU 0 on n1 and on n2.
func (g gangRig) holders(t *testing.T) [2]string {
	t.Helper()
	nodes, err := g.s.Nodes(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var h [2]string
	for _, n := range nodes {
		if n.Name == "n1" {
			h[0] = n.GPUHolder(0)
		} else {
			h[1] = n.GPUHolder(0)
		}
	}
	return h
}

var twoRanks = []jobtype.GangRank{{Node: "n1", GPUs: []int{0}}, {Node: "n2", GPUs: []int{0}}}

func (g gangRig) claim(t *testing.T, id string, attempt, rank int) {
	t.Helper()
	out, err := g.s.ClaimRank(g.ctx, jobstore.RankClaim{ClaimParams: jobstore.ClaimParams{ID: id, Attempt: attempt,
		Node: twoRanks[rank].Node, Incarnation: "i-" + twoRanks[rank].Node, Lease: time.Minute}, Rank: rank, Addr: "10.77.0.1", Port: 29500})
	if err != nil || out != jobstore.Claimed {
		t.Fatalf("claim rank %d of attempt %d: %v %v", rank, attempt, out, err)
	}
}

// TestGangDispatchAllOrNothing: a gang's dispatch reserves every rank's
// GPUs or none; the ranks are recorded on the job.
func TestGangDispatchAllOrNothing(t *testing.T) {
	g := setupGang(t)
	other, _, _ := g.s.Create(g.ctx, jobstore.NewJob{Spec: spec("other", jobspec.PriorityNormal)})
	if err := g.s.Dispatch(g.ctx, jobstore.DispatchParams{JobID: other.ID, Attempt: 1, Node: "n2", Backend: "local", Capacity: 1, GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	j := g.gangJob(t)
	same := []jobtype.GangRank{{Node: "n1", GPUs: []int{0}}, {Node: "n1", GPUs: []int{1}}}
	if err := g.s.DispatchGang(g.ctx, j.ID, 1, same, ""); err == nil || !strings.Contains(err.Error(), `both on node "n1"`) {
		t.Fatalf("two ranks on one node: %v", err)
	}
	if err := g.s.DispatchGang(g.ctx, j.ID, 1, twoRanks, ""); !errors.Is(err, jobstore.ErrNodeFull) {
		t.Fatalf("gang over a held GPU: %v", err)
	}
	if h := g.holders(t); h[0] != "" {
		t.Fatalf("a refused gang reserved n1's GPU 0: %v", h)
	}
	if err := g.s.Finish(g.ctx, other.ID, 1, jobstore.Ending{State: jobtype.StateFailed, Reason: jobtype.ReasonPermanent}); err != nil {
		t.Fatal(err)
	}
	if err := g.s.DispatchGang(g.ctx, j.ID, 1, twoRanks, ""); err != nil {
		t.Fatalf("gang: %v", err)
	}
	if h := g.holders(t); h[0] != j.ID || h[1] != j.ID {
		t.Fatalf("gang holds %v", h)
	}
	got, _ := g.s.Get(g.ctx, j.ID)
	if got.State != jobtype.StateDispatched || got.Gang == nil || len(got.Gang.Ranks) != 2 || got.Gang.Ranks[1].Node != "n2" {
		t.Fatalf("dispatched gang record: %+v %+v", got, got.Gang)
	}
}

// TestGangOneFate: rank 0's claim makes the attempt running with the
// rendezvous; one rank's failure ends the attempt for both (GPUs freed on
// both nodes, the other rank's renewal refused); attempt 2 succeeds only
// once both ranks have.
func TestGangOneFate(t *testing.T) {
	g := setupGang(t)
	j := g.dispatchedGang(t)
	g.claim(t, j.ID, 1, 1)
	if got, _ := g.s.Get(g.ctx, j.ID); got.State != jobtype.StateDispatched {
		t.Fatalf("rank 1 alone made it %s", got.State)
	}
	g.claim(t, j.ID, 1, 0)
	got, _ := g.s.Get(g.ctx, j.ID)
	if got.State != jobtype.StateRunning || got.Gang.Addr != "10.77.0.1" || got.Gang.Port != 29500 {
		t.Fatalf("after rank 0's claim: %s %+v", got.State, got.Gang)
	}
	if err := g.s.Requeue(g.ctx, j.ID, 1, "exit", "rank 1: exit status 1"); err != nil {
		t.Fatal(err)
	}
	if h := g.holders(t); h != [2]string{} {
		t.Fatalf("after the failure GPUs held: %v", h)
	}
	if _, err := g.s.RenewRank(g.ctx, j.ID, 1, 0, "i-n1", time.Minute); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("rank 0's renewal after rank 1 failed: %v", err)
	}
	if err := g.s.DispatchGang(g.ctx, j.ID, 2, twoRanks, ""); err != nil {
		t.Fatalf("attempt 2: %v", err)
	}
	g.claim(t, j.ID, 2, 0)
	g.claim(t, j.ID, 2, 1)
	arts := []jobtype.Artifact{{Path: "adapter.bin"}}
	if ended, err := g.s.RankSucceeded(g.ctx, j.ID, 2, 0, "i-n1", map[string]float64{"train_loss": 1}, arts); err != nil || ended {
		t.Fatalf("rank 0 done: ended=%v %v", ended, err)
	}
	if got, _ := g.s.Get(g.ctx, j.ID); got.State != jobtype.StateRunning {
		t.Fatalf("one rank done made it %s", got.State)
	}
	if ended, err := g.s.RankSucceeded(g.ctx, j.ID, 2, 1, "i-n2", nil, nil); err != nil || !ended {
		t.Fatalf("rank 1 done: ended=%v %v", ended, err)
	}
	got, _ = g.s.Get(g.ctx, j.ID)
	if got.State != jobtype.StateSucceeded || len(got.Artifacts) != 1 || got.Metrics["train_loss"] != 1 {
		t.Fatalf("after both: %+v", got)
	}
	if h := g.holders(t); h != [2]string{} {
		t.Fatalf("after success GPUs held: %v", h)
	}
}

// TestGangReapsALapsedRank: the attempt's lease is its ranks' earliest,
// so one rank that stops renewing (its worker died) gets the whole attempt
// reaped, while a rank that never claims after rank 0 did has one lease.
func TestGangReapsALapsedRank(t *testing.T) {
	g := setupGang(t)
	j := g.dispatchedGang(t)
	g.claim(t, j.ID, 1, 0) // rank 1 never claims
	for i := 0; i < 3; i++ {
		g.now.Add(30_000)
		if _, err := g.s.RenewRank(g.ctx, j.ID, 1, 0, "i-n1", time.Minute); err != nil {
			t.Fatalf("rank 0 renews: %v", err)
		}
	}
	if err := g.s.Reap(g.ctx, j.ID, 1, time.Second); err != nil {
		t.Fatalf("reap with rank 1 lapsed: %v", err)
	}
	got, _ := g.s.Get(g.ctx, j.ID)
	if got.State != jobtype.StateQueued || got.Attempt != 2 {
		t.Fatalf("after the reap: %s attempt %d", got.State, got.Attempt)
	}
	if h := g.holders(t); h != [2]string{} {
		t.Fatalf("after the reap GPUs held: %v", h)
	}
}

// TestGangPreempted: a preemption asked of a running gang reaches every
// rank at its renewal; the first rank's Preempted ends the attempt for both
// (GPUs freed on both nodes, back to queued), the second's loses.
func TestGangPreempted(t *testing.T) {
	g := setupGang(t)
	j := g.dispatchedGang(t)
	g.claim(t, j.ID, 1, 0)
	g.claim(t, j.ID, 1, 1)
	if err := g.s.RequestPreempt(g.ctx, j.ID, 1, "j-urgent"); err != nil {
		t.Fatal(err)
	}
	for r := range twoRanks {
		if _, err := g.s.RenewRank(g.ctx, j.ID, 1, r, "i-"+twoRanks[r].Node, time.Minute); !errors.Is(err, jobstore.ErrPreemptRequested) {
			t.Fatalf("rank %d's renewal: %v", r, err)
		}
	}
	if err := g.s.Preempted(g.ctx, j.ID, 1, "j-urgent"); err != nil {
		t.Fatal(err)
	}
	if err := g.s.Preempted(g.ctx, j.ID, 1, "j-urgent"); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("the second rank's Preempted: %v", err)
	}
	got, _ := g.s.Get(g.ctx, j.ID)
	if got.State != jobtype.StateQueued || got.Attempt != 2 || got.Preemptions != 1 {
		t.Fatalf("after the preemption: %s attempt %d preemptions %d", got.State, got.Attempt, got.Preemptions)
	}
	if h := g.holders(t); h != [2]string{} {
		t.Fatalf("after the preemption GPUs held: %v", h)
	}
}

// TestGangCancelledBeforeRankZero: a cancel asked before rank 0 claimed
// ends the attempt cancelled at rank 0's claim, freeing both nodes; rank
// 1's later claim is stale.
func TestGangCancelledBeforeRankZero(t *testing.T) {
	g := setupGang(t)
	j := g.dispatchedGang(t)
	if _, err := g.s.Cancel(g.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	out, err := g.s.ClaimRank(g.ctx, jobstore.RankClaim{ClaimParams: jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "i-n1", Lease: time.Minute}, Rank: 0})
	if err != nil || out != jobstore.ClaimCancelled {
		t.Fatalf("rank 0's claim: %v %v", out, err)
	}
	out, err = g.s.ClaimRank(g.ctx, jobstore.RankClaim{ClaimParams: jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n2", Incarnation: "i-n2", Lease: time.Minute}, Rank: 1})
	if err != nil || out != jobstore.ClaimStale {
		t.Fatalf("rank 1's claim: %v %v", out, err)
	}
	if got, _ := g.s.Get(g.ctx, j.ID); got.State != jobtype.StateCancelled {
		t.Fatalf("state %s", got.State)
	}
	if h := g.holders(t); h != [2]string{} {
		t.Fatalf("after the cancel GPUs held: %v", h)
	}
}
