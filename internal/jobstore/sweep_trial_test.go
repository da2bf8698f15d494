package jobstore_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestAdmitTrialsConcurrent: a sweep with budget left for exactly three
// more trials, admitted by 16 goroutines at once (while the trials whose
// reservations free that budget are settled concurrently), admits exactly
// three; what the sweep reserves never passes its budget (read back after
// every call); the trials left wait with the budget's gate. Run with -race.
func TestAdmitTrialsConcurrent(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	// $3 budget, $1 a trial: trials 0-2 admitted at creation.
	sw, _, err := s.CreateSweep(ctx, nil, sweepOf(10, func(sw *jobtype.Sweep) { sw.BudgetUSD = 3 }))
	if err != nil {
		t.Fatal(err)
	}
	first := []string{jobstore.TrialID(sw.ID, 0), jobstore.TrialID(sw.ID, 1), jobstore.TrialID(sw.ID, 2)}
	for _, id := range first { // they end for nothing: their $3 is free again once settled
		if _, err := s.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			if g < len(first) {
				if err := s.SettleTrial(ctx, sw.ID, first[g], 0, 0); err != nil {
					errs <- err
				}
			}
			for range 4 {
				a, err := s.AdmitTrials(ctx, sw.ID)
				if err != nil {
					errs <- err
					return
				}
				got, err := s.GetSweep(ctx, sw.ID)
				if err != nil {
					errs <- err
					return
				}
				if got.ReservedUSD+got.SpentUSD > got.BudgetUSD+1e-9 {
					errs <- errors.New("reserved passed the budget: " + strings.TrimSpace(got.Stalled))
				}
				mu.Lock()
				for _, id := range a.IDs {
					admitted[id]++
				}
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(admitted) != 3 {
		t.Fatalf("admitted %v, want 3 trials", admitted)
	}
	for i := 3; i < 6; i++ {
		if id := jobstore.TrialID(sw.ID, i); admitted[id] != 1 || !pendingHas(t, b, id) {
			t.Fatalf("trial %d admitted %d times (pending %v), want once", i, admitted[id], pendingHas(t, b, id))
		}
	}
	got, _ := s.GetSweep(ctx, sw.ID)
	want := "sweep budget: next trial $1.00, $0.00 of $3.00 left"
	if got.ReservedUSD != 3 || got.SpentUSD != 0 || got.Stalled != want {
		t.Fatalf("sweep after: reserved $%v spent $%v stalled %q", got.ReservedUSD, got.SpentUSD, got.Stalled)
	}
	head, _ := s.Get(ctx, jobstore.TrialID(sw.ID, 6))
	if head.Trial.Gate != want || pendingHas(t, b, head.ID) {
		t.Fatalf("trial 6: gate %q, pending %v", head.Trial.Gate, pendingHas(t, b, head.ID))
	}
	if sets, _ := s.SweepSetsOf(ctx, sw.ID); sets.Waiting != 4 || sets.Active != 3 {
		t.Fatalf("sets: %+v", sets)
	}
}

// TestAdmitTrialsMaxParallel: an active trial that ended or paused no
// longer counts against max_parallel; a waiting trial cancelled
// meanwhile is skipped; a sweep that is not running admits nothing.
func TestAdmitTrialsMaxParallel(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	sw, _, err := s.CreateSweep(ctx, nil, sweepOf(5, func(sw *jobtype.Sweep) { sw.MaxParallel = 1 }))
	if err != nil {
		t.Fatal(err)
	}
	if a, err := s.AdmitTrials(ctx, sw.ID); err != nil || len(a.IDs) != 0 {
		t.Fatalf("admit while trial 0 is queued: %+v %v", a, err)
	}
	if _, err := s.Cancel(ctx, jobstore.TrialID(sw.ID, 1)); err != nil {
		t.Fatal(err)
	}
	if sets, _ := s.SweepSetsOf(ctx, sw.ID); sets.Waiting != 3 {
		t.Fatalf("a cancelled waiting trial left the waiting set? %+v", sets)
	}
	runTrial(t, b, jobstore.TrialID(sw.ID, 0))
	if err := s.Pause(ctx, jobstore.TrialID(sw.ID, 0), 1, 10, nil); err != nil {
		t.Fatal(err)
	}
	a, err := s.AdmitTrials(ctx, sw.ID)
	if err != nil || len(a.IDs) != 1 || a.IDs[0] != jobstore.TrialID(sw.ID, 2) || a.Stalled != "" {
		t.Fatalf("admit after trial 0 paused: %+v %v", a, err)
	}
	if j, _ := s.Get(ctx, jobstore.TrialID(sw.ID, 3)); j.Trial.Gate != jobtype.ReasonMaxParallel {
		t.Fatalf("trial 3's gate %q", j.Trial.Gate)
	}
	if _, err := s.CancelSweep(ctx, sw.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdmitTrials(ctx, sw.ID); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("admit in a cancelled sweep: %v", err)
	}
	if _, err := s.AdmitTrials(ctx, jobstore.NewSweepID(time.Now())); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("admit in no sweep: %v", err)
	}
}

// runTrial dispatches and claims attempt 1 of trial id on node n1.
func runTrial(t *testing.T, b testBundle, id string) {
	t.Helper()
	j, err := b.store.Get(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: id, Attempt: j.Attempt, Node: "n1", Backend: "local", Capacity: 100}); err != nil {
		t.Fatal(err)
	}
	out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: j.Attempt, Node: "n1", Incarnation: "inc", Lease: time.Minute})
	if err != nil || out != jobstore.Claimed {
		t.Fatalf("claim %s: %v %v", id, out, err)
	}
}

// TestPausePromote: an ASHA trial's attempt pauses at its rung's limit
// (its node slot freed, its metrics kept, in the paused set); it cannot be
// promoted before it is settled, nor beyond the sweep's budget (nothing
// written); promoted, it is the next attempt in the pending set at the
// next rung, its new estimate reserved, and a second settlement counts
// only what it spent since the first.
func TestPausePromote(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	sw, _, err := s.CreateSweep(ctx, nil, sweepOf(1, func(sw *jobtype.Sweep) { sw.Search, sw.BudgetUSD = "asha", 4 }))
	if err != nil {
		t.Fatal(err)
	}
	id := jobstore.TrialID(sw.ID, 0)
	runTrial(t, b, id)
	if err := s.Pause(ctx, id, 2, 10, nil); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("pause of another attempt: %v", err)
	}
	if err := s.Pause(ctx, id, 1, 10, map[string]float64{"eval_loss": 1.5}); err != nil {
		t.Fatal(err)
	}
	j, _ := s.Get(ctx, id)
	res, _ := s.Redis().HGetAll(ctx, s.Prefix()+"node:n1:reserved").Result()
	if j.State != jobtype.StatePaused || j.Metrics["eval_loss"] != 1.5 || j.FinishedAt == nil || len(res) != 0 {
		t.Fatalf("paused: %+v, node reservations %v", j, res)
	}
	if ch := lastStateChange(t, b, id); ch.To != jobtype.StatePaused || ch.Reason != "rung 0" || !strings.Contains(ch.Error, "reached step 10") {
		t.Fatalf("pause event: %+v", ch)
	}
	if sets, _ := s.SweepSetsOf(ctx, sw.ID); sets.Paused != 1 || sets.Active != 1 {
		t.Fatalf("sets: %+v", sets)
	}
	promote := jobstore.PromoteParams{SweepID: sw.ID, ID: id, Attempt: 1, Rung: 1, StopAtStep: 30, EstUSD: 2, EstGPUHours: 1}
	if err := s.Promote(ctx, promote); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("promote before settling: %v", err)
	}
	if err := s.SettleTrial(ctx, sw.ID, id, 0.8, 0.4); err != nil {
		t.Fatal(err)
	}
	over := promote
	over.EstUSD = 3.5
	err = s.Promote(ctx, over)
	if !errors.Is(err, jobstore.ErrOverBudget) || !strings.Contains(err.Error(), "next rung $3.50, $3.20 of $4.00 left") {
		t.Fatalf("promote over budget: %v", err)
	}
	if j, _ := s.Get(ctx, id); j.State != jobtype.StatePaused {
		t.Fatalf("an over-budget promotion wrote %s", j.State)
	}
	if err := s.Promote(ctx, promote); err != nil {
		t.Fatal(err)
	}
	j, _ = s.Get(ctx, id)
	if j.State != jobtype.StateQueued || j.Attempt != 2 || j.Trial.Rung != 1 || j.Trial.StopAtStep != 30 || j.Node != "" || j.FinishedAt != nil || !pendingHas(t, b, id) {
		t.Fatalf("promoted: %+v (trial %+v)", j, j.Trial)
	}
	if ch := lastStateChange(t, b, id); ch.From != jobtype.StatePaused || ch.Reason != "promoted to rung 1" {
		t.Fatalf("promote event: %+v", ch)
	}
	got, _ := s.GetSweep(ctx, sw.ID)
	if got.ReservedUSD != 2 || got.SpentUSD != 0.8 || got.ReservedGPUHours != 1 || got.SpentGPUHours != 0.4 {
		t.Fatalf("sweep after promotion: %+v", got)
	}
	if sets, _ := s.SweepSetsOf(ctx, sw.ID); sets.Paused != 0 || sets.Active != 1 {
		t.Fatalf("sets: %+v", sets)
	}
	// The second rung ran: the trial's whole cost is now $2.
	for range 2 {
		if err := s.SettleTrial(ctx, sw.ID, id, 2, 1); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = s.GetSweep(ctx, sw.ID)
	if got.ReservedUSD != 0 || got.SpentUSD != 2 || got.ReservedGPUHours != 0 || got.SpentGPUHours != 1 {
		t.Fatalf("sweep after the second settlement: %+v", got)
	}
}

// TestStop: a waiting trial, an admitted queued trial and a paused trial
// end stopped at once (out of the waiting, pending and paused sets); a
// running one is asked, and each way its attempt can end on a cancel ends
// it stopped with the stop's reason and message; a cancel asked after
// the stop wins; a job that is no trial, or a trial that succeeded, is
// refused.
func TestStop(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	sw, _, err := s.CreateSweep(ctx, nil, sweepOf(9, func(sw *jobtype.Sweep) { sw.MaxParallel = 7 }))
	if err != nil {
		t.Fatal(err)
	}
	trial := func(i int) string { return jobstore.TrialID(sw.ID, i) }
	stopped := func(id, reason string) {
		t.Helper()
		j, _ := s.Get(ctx, id)
		if j.State != jobtype.StateStopped || j.Reason != reason || j.FinishedAt == nil {
			t.Fatalf("%s: %s reason %q, want stopped (%s)", id, j.State, j.Reason, reason)
		}
		if ch := lastStateChange(t, b, id); ch.To != jobtype.StateStopped || ch.Reason != reason {
			t.Fatalf("%s: event %+v", id, ch)
		}
	}
	if st, err := s.Stop(ctx, trial(8), jobtype.ReasonSweepBudget, "no budget left"); err != nil || st != jobtype.StateQueued {
		t.Fatalf("stop waiting: %s %v", st, err)
	}
	stopped(trial(8), jobtype.ReasonSweepBudget)
	if st, err := s.Stop(ctx, trial(0), jobtype.ReasonMedianStopping, "m"); err != nil || st != jobtype.StateQueued || pendingHas(t, b, trial(0)) {
		t.Fatalf("stop admitted: %s %v", st, err)
	}
	stopped(trial(0), jobtype.ReasonMedianStopping)
	runTrial(t, b, trial(1))
	if err := s.Pause(ctx, trial(1), 1, 10, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stop(ctx, trial(1), jobtype.ReasonNotPromoted, "not in the top third"); err != nil || st != jobtype.StatePaused {
		t.Fatalf("stop paused: %s %v", st, err)
	}
	stopped(trial(1), jobtype.ReasonNotPromoted)
	if sets, _ := s.SweepSetsOf(ctx, sw.ID); sets.Waiting != 1 || sets.Paused != 0 || sets.Active != 7 {
		t.Fatalf("sets: %+v (stopped admitted trials stay active until settled)", sets)
	}
	ends := map[string]func(id string) error{
		"finish cancelled": func(id string) error {
			return s.Finish(ctx, id, 1, jobstore.Ending{State: jobtype.StateCancelled, Reason: "cancelled"})
		},
		"requeue":           func(id string) error { return s.Requeue(ctx, id, 1, "exit", "boom") },
		"reap":              func(id string) error { return s.Reap(ctx, id, 1, -time.Hour) },
		"pause":             func(id string) error { return s.Pause(ctx, id, 1, 10, nil) },
		"cancel dispatched": nil,
	}
	i := 2
	for name, end := range ends {
		id := trial(i)
		i++
		if end == nil { // dispatched, not claimed: the cancel path of a removed task
			if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 100}); err != nil {
				t.Fatal(err)
			}
			end = func(id string) error { return s.CancelDispatched(ctx, id, 1) }
		} else {
			runTrial(t, b, id)
		}
		if st, err := s.Stop(ctx, id, jobtype.ReasonMedianStopping, "worse than the median"); err != nil || st == jobtype.StateStopped {
			t.Fatalf("%s: stop: %s %v", name, st, err)
		}
		if j, _ := s.Get(ctx, id); !j.CancelRequested || j.Trial.StopRequested != jobtype.ReasonMedianStopping {
			t.Fatalf("%s: stop asked: %+v", name, j.Trial)
		}
		if err := end(id); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		stopped(id, jobtype.ReasonMedianStopping)
		if j, _ := s.Get(ctx, id); j.Error != "worse than the median" {
			t.Fatalf("%s: error %q", name, j.Error)
		}
	}
	// trial 7 runs: asked to stop, then cancelled by its user: cancelled.
	runTrial(t, b, trial(7))
	if _, err := s.Stop(ctx, trial(7), jobtype.ReasonMedianStopping, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, trial(7)); err != nil {
		t.Fatal(err)
	}
	if err := s.Requeue(ctx, trial(7), 1, "interrupted", "stopped"); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Get(ctx, trial(7)); j.State != jobtype.StateCancelled {
		t.Fatalf("cancel after stop: %s", j.State)
	}
	// A job of no sweep is stopped too (a budget's cap): queued, it ends
	// stopped at once and leaves the pending set.
	plain, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("plain", "")})
	if st, err := s.Stop(ctx, plain.ID, jobtype.ReasonBudget, "team budget reached"); err != nil || st != jobtype.StateQueued {
		t.Fatalf("stop of a plain job: %v %v", st, err)
	}
	if j, _ := s.Get(ctx, plain.ID); j.State != jobtype.StateStopped || j.Reason != jobtype.ReasonBudget || pendingHas(t, b, plain.ID) {
		t.Fatalf("the plain job after its stop: %s %s, pending %v", j.State, j.Reason, pendingHas(t, b, plain.ID))
	}
	if _, err := s.Stop(ctx, trial(7), jobtype.ReasonMedianStopping, ""); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("stop of a cancelled trial: %v", err)
	}
	if _, err := s.Retry(ctx, trial(7)); !errors.Is(err, jobstore.ErrTrialRetry) || !strings.Contains(err.Error(), sw.ID) {
		t.Fatalf("retry of a trial: %v", err)
	}
}

// TestTrialTeamBudget: a sweep's trials reserve their team's and
// backend's budgets in the scripts that admit them, as a submitted job's
// create does: with room for two trials in the team's month, the sweep is
// stored with two trials admitted and reserved, the third waiting with a
// gate that names the team's budget and what is left of it (not the
// sweep's own budget: OwnBudget false, so the sweep duty lets it wait).
// When a trial settles below its estimate, the next AdmitTrials admits
// the waiting one with its reservation.
func TestTrialTeamBudget(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	month := jobstore.Month(time.Now())
	ns := sweepOf(3, nil)
	for i := range ns.Trials {
		ns.Trials[i].Job.Budget = &jobstore.BudgetReservation{Month: month, USD: 40,
			Scopes: []jobstore.BudgetScope{{Scope: "backend:local"}, {Scope: "team:ml", Limit: 100}}}
	}
	sw, _, err := s.CreateSweep(ctx, nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	trials, err := s.SweepTrials(ctx, sw.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range trials {
		reserved := j.BudgetReservedUSD == 40
		if reserved != (i < 2) || pendingHas(t, b, j.ID) != (i < 2) {
			t.Fatalf("trial %d: reserved %v, pending %v, gate %q", i, j.BudgetReservedUSD, pendingHas(t, b, j.ID), j.Trial.Gate)
		}
	}
	wantGate := "budget: next trial $40.00 would pass team:ml's " + month + " budget ($20.00 of $100.00 left)"
	if g := trials[2].Trial.Gate; g != wantGate {
		t.Fatalf("gate %q, want %q", g, wantGate)
	}
	if sp, _ := s.Spends(ctx, month, []string{"team:ml", "backend:local"}); sp["team:ml"].ReservedUSD != 80 || sp["backend:local"].ReservedUSD != 80 {
		t.Fatalf("spends %+v", sp)
	}
	adm, err := s.AdmitTrials(ctx, sw.ID)
	if err != nil || len(adm.IDs) != 0 || adm.Stalled != wantGate || adm.OwnBudget {
		t.Fatalf("admit while the team's budget is full: %+v %v", adm, err)
	}
	// Trial 0 ends at $10: its reservation is released, $10 spent; $50 left.
	if _, err := s.Cancel(ctx, trials[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, trials[0].ID, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleTrial(ctx, sw.ID, trials[0].ID, 10, 0); err != nil {
		t.Fatal(err)
	}
	adm, err = s.AdmitTrials(ctx, sw.ID)
	if err != nil || len(adm.IDs) != 1 || adm.IDs[0] != trials[2].ID || adm.Stalled != "" {
		t.Fatalf("admit after money freed: %+v %v", adm, err)
	}
	if j, _ := s.Get(ctx, trials[2].ID); j.BudgetReservedUSD != 40 || !pendingHas(t, b, j.ID) {
		t.Fatalf("the third trial: reserved %v", j.BudgetReservedUSD)
	}
	if sp, _ := s.Spends(ctx, month, []string{"team:ml"}); sp["team:ml"].ReservedUSD != 80 || sp["team:ml"].SpentUSD != 10 {
		t.Fatalf("team spend %+v", sp["team:ml"])
	}
}
