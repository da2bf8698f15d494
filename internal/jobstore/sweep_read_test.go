package jobstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestCancelSweep: cancelling a sweep of more trials than one script
// takes cancels every waiting, admitted and paused trial at once (reason
// cancelled, error "sweep cancelled"), asks the running ones (a stop asked
// before is dropped), leaves ended trials alone, and keeps the sweep in the
// walked sweeps until its admitted trials are settled (then FinishSweep
// takes it out, still cancelled); a second call finds nothing more to do;
// a done sweep is refused.
func TestCancelSweep(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	sw, _, err := s.CreateSweep(ctx, nil, sweepOf(1200, func(sw *jobtype.Sweep) { sw.MaxParallel = 4 }))
	if err != nil {
		t.Fatal(err)
	}
	trial := func(i int) string { return jobstore.TrialID(sw.ID, i) }
	runTrial(t, b, trial(0))
	runTrial(t, b, trial(1))
	if _, err := s.Stop(ctx, trial(1), jobtype.ReasonMedianStopping, "m"); err != nil {
		t.Fatal(err)
	}
	runTrial(t, b, trial(2))
	if err := s.Pause(ctx, trial(2), 1, 5, nil); err != nil {
		t.Fatal(err)
	}
	runTrial(t, b, trial(3))
	if err := s.Finish(ctx, trial(3), 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	n, err := s.CancelSweep(ctx, sw.ID)
	if err != nil || n != 1199 {
		t.Fatalf("cancel sweep: %d, %v; want 1199 (all but the succeeded trial)", n, err)
	}
	got, _ := s.GetSweep(ctx, sw.ID)
	if got.State != jobtype.SweepCancelled || got.FinishedAt == nil {
		t.Fatalf("sweep: %+v", got)
	}
	// The duty still walks it, to settle the admitted trials' reservations.
	if running, _ := s.RunningSweeps(ctx); len(running) != 1 {
		t.Fatalf("walked sweeps after the cancel: %v, want the cancelled one", running)
	}
	if done, err := s.FinishSweep(ctx, sw.ID); done || err != nil {
		t.Fatalf("finish of a cancelled sweep with unsettled trials: %v %v", done, err)
	}
	trials, _ := s.SweepTrials(ctx, sw.ID, 0, 0)
	for i, j := range trials {
		want := jobtype.StateCancelled
		switch i {
		case 0, 1:
			want = jobtype.StateRunning
		case 3:
			want = jobtype.StateSucceeded
		}
		if j.State != want {
			t.Fatalf("trial %d: %s, want %s", i, j.State, want)
		}
		if want == jobtype.StateCancelled && (j.Error != jobtype.ReasonSweepCancelled || j.Reason != jobtype.ReasonCancelled) {
			t.Fatalf("trial %d: reason %q error %q", i, j.Reason, j.Error)
		}
	}
	if trials[0].CancelRequested != true || trials[1].Trial.StopRequested != "" {
		t.Fatalf("running trials: cancel %v, stop %q", trials[0].CancelRequested, trials[1].Trial.StopRequested)
	}
	if sets, _ := s.SweepSetsOf(ctx, sw.ID); sets.Waiting != 0 || sets.Paused != 0 || pendingHas(t, b, trial(4)) {
		t.Fatalf("sets after cancel: %+v", sets)
	}
	if err := s.Requeue(ctx, trial(1), 1, "interrupted", ""); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Get(ctx, trial(1)); j.State != jobtype.StateCancelled {
		t.Fatalf("a stopped-then-cancelled trial ended %s", j.State)
	}
	if n, err := s.CancelSweep(ctx, sw.ID); err != nil || n != 1 {
		t.Fatalf("cancel again: %d %v (trial 0 still running, asked again)", n, err)
	}
	if err := s.Requeue(ctx, trial(0), 1, "interrupted", ""); err != nil {
		t.Fatal(err)
	}
	sets, _ := s.SweepSetsOf(ctx, sw.ID)
	for _, id := range sets.ActiveIDs {
		if err := s.SettleTrial(ctx, sw.ID, id, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.FinishSweep(ctx, sw.ID); !ok || err != nil {
		t.Fatalf("finish of a cancelled sweep, every trial settled: %v %v", ok, err)
	}
	if running, _ := s.RunningSweeps(ctx); len(running) != 0 {
		t.Fatalf("walked sweeps: %v, want none", running)
	}
	if got, _ := s.GetSweep(ctx, sw.ID); got.State != jobtype.SweepCancelled {
		t.Fatalf("a cancelled sweep once settled is %s", got.State)
	}
	done, _, _ := s.CreateSweep(ctx, nil, sweepOf(1, nil))
	if _, err := s.Stop(ctx, jobstore.TrialID(done.ID, 0), jobtype.ReasonSweepBudget, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleTrial(ctx, done.ID, jobstore.TrialID(done.ID, 0), 0, 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.FinishSweep(ctx, done.ID); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if _, err := s.CancelSweep(ctx, done.ID); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("cancel a done sweep: %v", err)
	}
}

// TestFinishSweep: a sweep is done only once nothing waits, is active
// (unsettled) or paused.
func TestFinishSweep(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	sw, _, err := s.CreateSweep(ctx, nil, sweepOf(2, func(sw *jobtype.Sweep) { sw.MaxParallel = 1 }))
	if err != nil {
		t.Fatal(err)
	}
	t0, t1 := jobstore.TrialID(sw.ID, 0), jobstore.TrialID(sw.ID, 1)
	finish := func(want bool) {
		t.Helper()
		if ok, err := s.FinishSweep(ctx, sw.ID); ok != want || err != nil {
			t.Fatalf("finish: %v %v, want %v", ok, err, want)
		}
	}
	finish(false)
	runTrial(t, b, t0)
	if err := s.Finish(ctx, t0, 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleTrial(ctx, sw.ID, t0, 1, 0.5); err != nil {
		t.Fatal(err)
	}
	finish(false) // trial 1 waits
	if a, err := s.AdmitTrials(ctx, sw.ID); err != nil || len(a.IDs) != 1 {
		t.Fatalf("admit: %+v %v", a, err)
	}
	runTrial(t, b, t1)
	if err := s.Pause(ctx, t1, 1, 5, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleTrial(ctx, sw.ID, t1, 1, 0.5); err != nil {
		t.Fatal(err)
	}
	finish(false) // trial 1 is paused
	if _, err := s.Stop(ctx, t1, jobtype.ReasonNotPromoted, ""); err != nil {
		t.Fatal(err)
	}
	finish(true)
	got, _ := s.GetSweep(ctx, sw.ID)
	if got.State != jobtype.SweepDone || got.FinishedAt == nil || got.SpentUSD != 2 || got.SpentGPUHours != 1 {
		t.Fatalf("done sweep: %+v", got)
	}
	finish(true)
	if running, _ := s.RunningSweeps(ctx); len(running) != 0 {
		t.Fatalf("running: %v", running)
	}
	if _, err := s.FinishSweep(ctx, jobstore.NewSweepID(time.Now())); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("finish no sweep: %v", err)
	}
}

// TestListSweeps: newest first, page by page, every field read back.
func TestListSweeps(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	tick := time.UnixMilli(1_700_000_000_000).UTC()
	var ids []string
	for i := range 5 {
		sw, _, err := s.CreateSweep(ctx, nil, sweepOf(1, func(sw *jobtype.Sweep) {
			sw.Name, sw.Schedule, sw.Tick, sw.BudgetGPUHours = fmt.Sprintf("s%d", i), "nightly", &tick, 9
		}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sw.ID)
	}
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		sws, next, err := s.ListSweeps(ctx, cursor, 2)
		if err != nil || page > 3 {
			t.Fatalf("page %d: %v", page, err)
		}
		for _, sw := range sws {
			got = append(got, sw.ID)
			if sw.Schedule != "nightly" || sw.Tick == nil || !sw.Tick.Equal(tick) || sw.BudgetGPUHours != 9 || sw.Search != "grid" ||
				sw.Goal != "minimize" || sw.Submitter != "ada" || sw.CreatedAt.IsZero() {
				t.Fatalf("sweep read back: %+v", sw)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	if _, _, err := s.ListSweeps(ctx, "j-bad", 2); err == nil {
		t.Fatal("a bad cursor was taken")
	}
	if _, err := s.GetSweep(ctx, jobstore.NewSweepID(time.Now())); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("get no sweep: %v", err)
	}
}

// TestEvals: each eval event appended is kept in the job's eval lines
// (its numeric fields but step as metrics, with its attempt), other
// events are not, the list keeps the last 2000, and Delete removes it.
func TestEvals(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("e", jobspec.PriorityNormal)})
	if err != nil {
		t.Fatal(err)
	}
	forceRunning(t, b, j.ID)
	evs := []jobstore.EventIn{
		{Type: jobtype.EventProgress, Data: json.RawMessage(`{"event":"progress","step":1,"loss":3}`)},
		{Type: jobtype.EventEval, Data: json.RawMessage(`{"event":"eval","step":10,"eval_loss":2.5,"eval_acc":0.4}`)},
		{Type: jobtype.EventEval, Data: json.RawMessage(`not json`)},
	}
	for i := range 2005 {
		evs = append(evs, jobstore.EventIn{Type: jobtype.EventEval, Data: json.RawMessage(fmt.Sprintf(`{"event":"eval","step":%d,"eval_loss":1}`, 20+i))})
	}
	if _, err := s.Append(ctx, j.ID, 1, evs[:3]); err != nil {
		t.Fatal(err)
	}
	pts, err := s.Evals(ctx, j.ID)
	if err != nil || len(pts) != 1 || pts[0].Step != 10 || pts[0].Attempt != 1 || len(pts[0].Metrics) != 2 ||
		pts[0].Metrics["eval_loss"] != 2.5 || pts[0].Metrics["eval_acc"] != 0.4 {
		t.Fatalf("evals: %+v %v", pts, err)
	}
	for k := 3; k < len(evs); k += 500 {
		if _, err := s.Append(ctx, j.ID, 1, evs[k:min(k+500, len(evs))]); err != nil {
			t.Fatal(err)
		}
	}
	pts, _ = s.Evals(ctx, j.ID)
	if len(pts) != 2000 || pts[0].Step != 25 || pts[1999].Step != 2024 {
		t.Fatalf("%d evals from step %d to %d, want 2000 from 25 to 2024", len(pts), pts[0].Step, pts[len(pts)-1].Step)
	}
	if err := s.Finish(ctx, j.ID, 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Redis().Exists(ctx, s.Prefix()+"job:"+j.ID+":evals").Result(); n != 0 {
		t.Fatal("Delete left the eval lines")
	}
}

// forceRunning moves job id to running attempt 1 through dispatch and claim.
func forceRunning(t *testing.T, b testBundle, id string) {
	t.Helper()
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 10}); err != nil {
		t.Fatal(err)
	}
	if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
}

// TestClaimTickOnce: the first claim of a tick wins; every later one gets the
// first's run; another tick of the schedule, or another schedule's tick at
// the same time, is a claim of its own.
func TestClaimTickOnce(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	at := time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)
	run := jobstore.TickID("s-", "nightly", at)
	if won, ex, err := s.ClaimTick(ctx, "nightly", at, run); !won || ex != run || err != nil {
		t.Fatalf("first claim: %v %q %v", won, ex, err)
	}
	if won, ex, err := s.ClaimTick(ctx, "nightly", at, "s-other"); won || ex != run || err != nil {
		t.Fatalf("second claim: %v %q %v", won, ex, err)
	}
	if won, _, _ := s.ClaimTick(ctx, "nightly", at.Add(24*time.Hour), "s-next"); !won {
		t.Fatal("the next tick was taken")
	}
	if won, _, _ := s.ClaimTick(ctx, "weekly", at, "s-w"); !won {
		t.Fatal("another schedule's tick was taken")
	}
	if ttl, _ := s.Redis().TTL(ctx, s.Prefix()+fmt.Sprintf("tick:nightly:%d", at.UnixMilli())).Result(); ttl < 6*24*time.Hour {
		t.Fatalf("tick TTL %v, want a week", ttl)
	}
	if _, _, err := s.ClaimTick(ctx, "", at, run); err == nil {
		t.Fatal("a tick of no schedule was claimed")
	}
}

// TestTrialIDs: ValidID takes TrialID's shape as well as NewID's, and
// nothing near them; PruneFinished leaves trials to their sweep.
func TestTrialIDs(t *testing.T) {
	sid := jobstore.NewSweepID(time.Now())
	id := jobstore.TrialID(sid, 42)
	if !jobstore.ValidID(id) || len(id) != 24 || id[19:] != "00042" || !jobstore.ValidID(jobstore.NewID(time.Now())) {
		t.Fatalf("%s: not valid", id)
	}
	for _, bad := range []string{id[:23], id + "0", id[:18] + "x00042", id[:18] + "-0004a", "s" + id[1:], id[:18] + "-" + "0004-"} {
		if jobstore.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
	b := setup(t)
	ctx, s := b.ctx, b.store
	sw, _, err := s.CreateSweep(ctx, nil, sweepOf(1, nil))
	if err != nil {
		t.Fatal(err)
	}
	tid := jobstore.TrialID(sw.ID, 0)
	if _, err := s.Cancel(ctx, tid); err != nil {
		t.Fatal(err)
	}
	plain, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("p", jobspec.PriorityNormal)})
	if _, err := s.Cancel(ctx, plain.ID); err != nil {
		t.Fatal(err)
	}
	// Ids carry the time of the process's id clock, which other tests
	// move forward: everything is older than a century from now.
	n, err := s.PruneFinished(ctx, 0, time.Now().AddDate(100, 0, 0), 100)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the plain job only", n, err)
	}
	if _, err := s.Get(ctx, tid); err != nil {
		t.Fatalf("the trial was pruned: %v", err)
	}
}
