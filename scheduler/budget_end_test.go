package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// TestUnfundableWaitersEnd: team ml's budget ($0.20) holds two jobs'
// estimates ($0.083 each) reserved; a third job is held (its reservation
// refused, as when it lost a race) and a sweep's trial waits with a gate
// naming the team's budget. The first two end having cost $0.15 in all: what is left
// ($0.05) can fund neither waiter, and no settlement will free more this
// month, so the settle duty ends both stopped, reason budget (before the
// fix they waited, queued, until the month ended), and the sweep is done.
func TestUnfundableWaitersEnd(t *testing.T) {
	r := newAdmitRig(t, strings.Replace(admitConfig, "{ml: 1000}", "{ml: 0.20}", 1))
	ctx, store := r.ctx, r.store
	spec, err := jobspec.Parse([]byte(admitSpec))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(r.cfg.Defaults)
	who := plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "ml"}
	submit := func() string {
		t.Helper()
		created, err := r.s.Submit(ctx, plane.Admission{Who: who, Jobs: []jobstore.NewJob{{Spec: spec}}})
		if err != nil {
			t.Fatal(err)
		}
		return created[0].Job.ID
	}
	// The held job, as a submit that lost the race to the last dollars is
	// stored (jobstore's reserve_or_hold): held, holding no reservation.
	heldID := submit()
	if err := store.Settle(ctx, heldID, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.HSet(ctx, "lathe:job:"+heldID, "held", "budget reservation refused: $0.08 would pass team:ml's budget").Err(); err != nil {
		t.Fatal(err)
	}
	ran := []string{submit(), submit()}
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"lora.rank":{"grid":[8]}}}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sw, _, err := r.s.SubmitSweep(ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: who})
	if err != nil {
		t.Fatal(err)
	}
	trial := jobstore.TrialID(sw.ID, 0)
	if j, _ := store.Get(ctx, trial); j == nil || !strings.Contains(j.Trial.Gate, "team:ml") {
		t.Fatalf("the trial does not wait for the team's money: %+v", j)
	}
	for _, id := range ran {
		if _, err := store.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		// What they cost (settled by hand, as the settle duty would).
		if err := store.Settle(ctx, id, 0.075); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.s.Stop(ctx) })
	for _, id := range []string{heldID, trial} {
		j := waitfor.Value(t, 20*time.Second, id+" ended", func() *jobtype.Job {
			j, _ := store.Get(ctx, id)
			return j
		}, func(j *jobtype.Job) bool { return j != nil && j.State.Terminal() })
		if j.State != jobtype.StateStopped || j.Reason != jobtype.ReasonBudget || !strings.Contains(j.Error, "cannot fund it") {
			t.Errorf("%s ended %s (%s: %s); want stopped, reason budget", id, j.State, j.Reason, j.Error)
		}
	}
	waitfor.True(t, 20*time.Second, "the sweep done", func() bool {
		s, err := store.GetSweep(ctx, sw.ID)
		return err == nil && s.State == jobtype.SweepDone
	})
}

// TestCappedSweepFinishes: a sweep capped at $0.10 whose one trial has
// cost $0.25 so far is stopped by the sweep duty (TestSweepCapOnActualSpend);
// once the trial's attempt ends (the worker finishes it cancelled, and it
// ends stopped) the sweep is done. Before the fix the duty returned after
// its guard on every pass, the guard capped again (the settled spend stays
// over the cap), and the sweep stayed running forever.
func TestCappedSweepFinishes(t *testing.T) {
	r := newAdmitRig(t, admitConfig)
	ctx := r.ctx
	sw, id := r.cappedSweepRunning(t, 450*time.Second)
	waitfor.True(t, 20*time.Second, "the trial asked to stop for the sweep's budget", func() bool {
		j, _ := r.store.Get(ctx, id)
		return j != nil && j.Trial != nil && j.Trial.StopRequested == jobtype.ReasonBudget
	})
	if err := r.store.Finish(ctx, id, 1, jobstore.Ending{State: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled}); err != nil {
		t.Fatal(err)
	}
	waitfor.Value(t, 20*time.Second, "the capped sweep done", func() string {
		s, err := r.store.GetSweep(ctx, sw.ID)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%s, spent $%.2f of $%.2f", s.State, s.SpentUSD, s.BudgetUSD)
	}, func(s string) bool { return strings.HasPrefix(s, string(jobtype.SweepDone)) })
	if j, _ := r.store.Get(ctx, id); j == nil || j.State != jobtype.StateStopped || j.Reason != jobtype.ReasonBudget {
		t.Fatalf("the trial ended %+v; want stopped, reason budget", j)
	}
}

// TestTeamGuardCountsJobsJustEnded: team ml's budget is $0.20; job a ran
// 7.5 minutes ($0.25 at $2 a GPU-hour) and has just ended, not settled
// yet; job b has just started. One settle pass (settler.run, called once)
// settles a and then guards the team: $0.25 spent is over the budget, so
// b is asked to stop, reason budget, in that same pass. Before the fix
// the guard looked before settling: it saw $0 spent and b's cents, and b
// ran on for another pass (a cost the documented overshoot bound leaves
// out).
func TestTeamGuardCountsJobsJustEnded(t *testing.T) {
	r := newAdmitRig(t, strings.Replace(admitConfig, "{ml: 1000}", "{ml: 0.20}", 1))
	ctx, store := r.ctx, r.store
	spec, err := jobspec.Parse([]byte(admitSpec))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(r.cfg.Defaults)
	created, err := r.s.Submit(ctx, plane.Admission{Who: plane.Principal{Name: "alice", Team: "ml"},
		Jobs: []jobstore.NewJob{{Spec: spec}, {Spec: spec}}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := created[0].Job.ID, created[1].Job.ID
	run := func(id string, gpu int, ago time.Duration) {
		t.Helper()
		st := jobstore.New(r.rdb, jobstore.Config{Now: func() time.Time { return time.Now().Add(-ago) }})
		if err := st.Dispatch(ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4, GPUs: []int{gpu}}); err != nil {
			t.Fatal(err)
		}
		if out, err := st.Claim(ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "i1", Lease: time.Hour}); err != nil || out != jobstore.Claimed {
			t.Fatalf("claim %s: %v %v", id, out, err)
		}
	}
	if err := store.Heartbeat(ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 4,
		GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559},
			{Index: 1, UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559}},
	}, jobstore.HeartbeatOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	run(a, 0, 450*time.Second)
	if err := store.Finish(ctx, a, 1, jobstore.Ending{State: jobtype.StateFailed, Reason: jobtype.ReasonExit}); err != nil {
		t.Fatal(err)
	}
	run(b, 1, 0)
	var stopped []string
	d := newSettler(settlerParams{Store: store, Log: r.cfg.Logger, Routing: r.s.Routing,
		Stop: func(_ context.Context, j *jobtype.Job, _ jobtype.State) { stopped = append(stopped, j.ID) }})
	d.run(ctx)
	j, err := store.Get(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !j.CancelRequested || len(stopped) != 1 || stopped[0] != b {
		t.Fatalf("after one settle pass: b cancel requested %v, stops %v; want b asked to stop for the team's budget (a's $0.25 settled first)", j.CancelRequested, stopped)
	}
	if ja, _ := store.Get(ctx, a); ja.CostUSD < 0.24 {
		t.Fatalf("a settled at $%.4f; want its 7.5 minutes, $0.25", ja.CostUSD)
	}
}
