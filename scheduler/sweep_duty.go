package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/sweep"
)

// sweepEvery is how often the leader drives the running sweeps.
const sweepEvery = time.Second

// sweeper is the leader's duty that drives every running sweep, one pass
// at a time, from what the store holds (so a new leader carries on where
// the last one stopped): settle the trials whose attempt ended, apply
// ASHA's or median stopping's decisions, admit waiting trials, stop the
// waiting ones when the budget is spent, and finish the sweep.
type sweeper struct {
	store     *jobstore.Store
	log       *slog.Logger
	routing   func() *policy.RouteState
	stopTrial func(ctx context.Context, j *jobtype.Job, st jobtype.State)
	wake      func()
	resume    func(ctx context.Context, sw *jobtype.Sweep, owner string) error
	owner     string // this duty's name as a sweep's filler
	// lead is how far ahead the cap guard looks: its own interval plus
	// a stop's kill grace (guard).
	lead time.Duration
}

// sweeperParams is what a sweeper is built from.
type sweeperParams struct {
	Store   *jobstore.Store
	Log     *slog.Logger
	Routing func() *policy.RouteState // the routing config in force (its prices)
	// StopTrial is the cancel fast path (admit.go's cancelFastPath) for a
	// trial asked to stop while dispatched or running (st).
	StopTrial func(ctx context.Context, j *jobtype.Job, st jobtype.State)
	Wake      func() // trials were admitted or promoted: place them
	// Resume goes on storing an admitting sweep whose filler is gone, for
	// a bounded slice of time (admission.resumeSweep).
	Resume func(ctx context.Context, sw *jobtype.Sweep, owner string) error
	// StopLead is how long a running trial asked to stop may go on
	// costing: the kill grace (the guard adds its own interval).
	StopLead time.Duration
}

func newSweeper(p sweeperParams) *sweeper {
	return &sweeper{store: p.Store, log: p.Log, routing: p.Routing, stopTrial: p.StopTrial, wake: p.Wake, resume: p.Resume,
		owner: fillOwner(), lead: sweepEvery + p.StopLead}
}

func (d *sweeper) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ids, err := d.store.RunningSweeps(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.log.Warn("sweeps: list running", slog.Any("err", err))
		}
		return
	}
	for _, id := range ids {
		if err := d.drive(ctx, id); err != nil {
			d.log.Warn("sweep pass", slog.String("sweep_id", id), slog.Any("err", err))
		}
	}
}

// drive is one pass over one running sweep: a cancelled one is finished
// (finishCancelled), an admitting one whose filler is gone is resumed, a
// running one is advanced (advance).
func (d *sweeper) drive(ctx context.Context, id string) error {
	sw, err := d.store.GetSweep(ctx, id)
	if err != nil {
		return err
	}
	switch sw.State {
	case jobtype.SweepCancelled:
		return d.finishCancelled(ctx, sw)
	case jobtype.SweepAdmitting:
		// Stored in chunks by the request's filler; one that died (its
		// scheduler stopped, Redis failed under it) is resumed here once
		// its lease lapses.
		if err := d.resume(ctx, sw, d.owner); err != nil && !errors.Is(err, jobstore.ErrFillerBusy) {
			return err
		}
		return nil
	case jobtype.SweepRunning:
		return d.advance(ctx, sw)
	}
	return nil
}

// finishCancelled finishes cancelled sweep sw. A cancel cut short (its
// request timed out, its scheduler died) left trials not ended: the duty
// finishes it (cancelling again is a no-op for those ended). Then its
// trials end as their cancels land: settle them, then let it go.
func (d *sweeper) finishCancelled(ctx context.Context, sw *jobtype.Sweep) error {
	if _, err := d.store.CancelSweep(ctx, sw.ID); err != nil && !errors.Is(err, jobstore.ErrConflict) {
		return err
	}
	if err := d.settle(ctx, sw); err != nil {
		return err
	}
	_, err := d.store.FinishSweep(ctx, sw.ID)
	return err
}

// advance is one pass over running sweep sw: settle its ended trials,
// stop them all when a budget caps it (guard), apply its search's
// decisions (search), admit its waiting trials, and end it when nothing
// more will run (conclude).
func (d *sweeper) advance(ctx context.Context, sw *jobtype.Sweep) error {
	sp, err := sweepspec.Parse(sw.Spec, sweepspec.Options{})
	if err != nil {
		return fmt.Errorf("sweep %s: its stored spec: %w", sw.ID, err)
	}
	if err := d.settle(ctx, sw); err != nil {
		return err
	}
	if capped, err := d.guard(ctx, sw.ID); err != nil || capped {
		if err != nil {
			return err
		}
		// Capped: nothing more is admitted or promoted; the sweep is done
		// once its stopped trials have ended and settled (else it stayed
		// running, capped again on every pass).
		_, err := d.store.FinishSweep(ctx, sw.ID)
		return err
	}
	blocked, err := d.search(ctx, sw, sp)
	if err != nil {
		return err
	}
	adm, err := d.store.AdmitTrials(ctx, sw.ID)
	if err != nil {
		return err
	}
	if len(adm.IDs) > 0 {
		d.wake()
	}
	return d.conclude(ctx, sw, adm, blocked)
}

// conclude ends running sweep sw after a pass that admitted adm, blocked
// saying why its search's promotion did not fit the sweep's budget (""
// when none was refused): its waiting trials are stopped when nothing
// will ever run them, and the sweep is finished when no trial is left.
func (d *sweeper) conclude(ctx context.Context, sw *jobtype.Sweep, adm jobstore.Admitted, blocked string) error {
	sets, err := d.store.SweepSetsOf(ctx, sw.ID)
	if err != nil {
		return err
	}
	// Nothing runs, and the next admission or promotion does not fit the
	// sweep's own budget: nothing will ever free any, so the sweep ends
	// here. (A team's or a backend's budget frees as other jobs settle:
	// its trials wait.)
	if sets.Active == 0 && ((sets.Waiting > 0 && adm.Stalled != "" && adm.OwnBudget) || blocked != "") {
		why := adm.Stalled
		if why == "" {
			why = blocked
		}
		return d.stopWaiting(ctx, sw, why)
	}
	if sets.Active == 0 && sets.Paused == 0 && sets.Waiting == 0 {
		if done, err := d.store.FinishSweep(ctx, sw.ID); err != nil || done {
			if done {
				d.log.Info("sweep done", slog.String("sweep_id", sw.ID))
			}
			return err
		}
	}
	return nil
}

// settle settles the sweep reservation of every active trial whose
// attempt ended (terminal, or paused between ASHA rungs).
func (d *sweeper) settle(ctx context.Context, sw *jobtype.Sweep) error {
	sets, err := d.store.SweepSetsOf(ctx, sw.ID)
	if err != nil || len(sets.ActiveIDs) == 0 {
		return err
	}
	jobs, err := d.store.GetMany(ctx, sets.ActiveIDs)
	if err != nil {
		return err
	}
	cfg := d.routing().Config
	for _, j := range jobs {
		if j == nil || !(j.State.Terminal() || j.State == jobtype.StatePaused) {
			continue
		}
		usd, gpuh := policy.JobUsage(cfg, j)
		if err := d.store.SettleTrial(ctx, sw.ID, j.ID, usd, gpuh); err != nil {
			return err
		}
	}
	return nil
}

// stopWaiting ends the trials still waiting for a sweep, and the paused
// ones, when its budget cannot admit the next one or promote a paused one
// while nothing runs: stopped, reason sweep budget, with the figures.
func (d *sweeper) stopWaiting(ctx context.Context, sw *jobtype.Sweep, why string) error {
	jobs, err := d.store.SweepTrials(ctx, sw.ID, 0, 0)
	if err != nil {
		return err
	}
	n := 0
	for _, j := range jobs {
		waiting := j != nil && j.Trial != nil && j.State == jobtype.StateQueued && j.Trial.Gate != ""
		if !waiting && (j == nil || j.State != jobtype.StatePaused) {
			continue
		}
		if _, err := d.store.Stop(ctx, j.ID, jobtype.ReasonSweepBudget, why); err != nil && !errors.Is(err, jobstore.ErrConflict) {
			return err
		}
		n++
	}
	d.log.Info("sweep budget spent: waiting trials stopped", slog.String("sweep_id", sw.ID), slog.Int("trials", n), slog.String("why", why))
	return nil
}

// search applies the sweep's early stopping: ASHA's promotions and stops,
// or median stopping's stop requests. blocked says why a promotion did
// not fit the sweep's budget ("" when none was refused).
func (d *sweeper) search(ctx context.Context, sw *jobtype.Sweep, sp *sweepspec.Sweep) (blocked string, err error) {
	rungs := ashaRungs(sp)
	median := sp.Search.Median
	if len(rungs) < 2 && median == nil {
		return "", nil
	}
	trials, waiting, err := d.trialViews(ctx, sw)
	if err != nil {
		return "", err
	}
	var acts []sweep.Action
	if len(rungs) >= 2 {
		acts = sweep.ASHA(rungs, sp.Search.ASHA.ReductionFactor, sw.Goal, trials, waiting)
	} else {
		acts = sweep.Median(median.GraceSteps, median.MinTrials, sw.Goal, trials)
	}
	for _, a := range acts {
		why, err := d.apply(ctx, sw, rungs, a)
		if err != nil {
			return "", err
		}
		if why != "" {
			blocked = why
		}
	}
	return blocked, nil
}

// trialViews reads every trial of sw with its objective history (the
// eval lines of the trials that started), and counts those not admitted.
func (d *sweeper) trialViews(ctx context.Context, sw *jobtype.Sweep) ([]sweep.Trial, int, error) {
	jobs, err := d.store.SweepTrials(ctx, sw.ID, 0, 0)
	if err != nil {
		return nil, 0, err
	}
	out := make([]sweep.Trial, 0, len(jobs))
	waiting := 0
	for _, j := range jobs {
		if j == nil || j.Trial == nil {
			continue
		}
		if j.State == jobtype.StateQueued && j.Trial.Gate != "" {
			waiting++
		}
		t := sweep.Trial{ID: j.ID, Index: j.Trial.Index, State: j.State, Rung: j.Trial.Rung, StopAtStep: j.Trial.StopAtStep,
			StopRequested: j.Trial.StopRequested}
		if j.StartedAt != nil {
			evals, err := d.store.Evals(ctx, j.ID)
			if err != nil {
				return nil, 0, err
			}
			for _, e := range evals {
				if v, ok := e.Metrics[sw.Metric]; ok {
					t.History = append(t.History, sweep.Point{Step: e.Step, Value: v})
				}
			}
		}
		out = append(out, t)
	}
	return out, waiting, nil
}

// apply carries out one decision. A promotion that does not fit the
// sweep's budget leaves the trial paused (the next pass tries again) and
// says why.
func (d *sweeper) apply(ctx context.Context, sw *jobtype.Sweep, rungs []int, a sweep.Action) (blocked string, err error) {
	switch a.Kind {
	case sweep.Promote:
		j, err := d.store.Get(ctx, a.ID)
		if err != nil {
			return "", err
		}
		share := float64(rungs[a.Rung]-rungs[a.Rung-1]) / float64(rungs[len(rungs)-1])
		p := jobstore.PromoteParams{SweepID: sw.ID, ID: a.ID, Attempt: j.Attempt, Rung: a.Rung, StopAtStep: a.StopAtStep}
		if j.Route != nil {
			p.EstUSD = j.Route.EstCostUSD * share
			p.EstGPUHours = float64(j.Spec.Resources.TotalGPUs()) * j.Route.EstRuntimeS / 3600 * share
		}
		err = d.store.Promote(ctx, p)
		switch {
		case err == nil:
			d.log.Info("asha: promoted", slog.String("sweep_id", sw.ID), slog.String("trial", a.ID), slog.Int("rung", a.Rung))
			d.wake()
		case errors.Is(err, jobstore.ErrOverBudget):
			d.log.Info("asha: promotion waits for the sweep budget", slog.String("trial", a.ID), slog.Any("why", err))
			return err.Error(), nil
		case errors.Is(err, jobstore.ErrConflict):
		default:
			return "", err
		}
	case sweep.Stop, sweep.RequestStop:
		st, err := d.store.Stop(ctx, a.ID, a.Reason, a.Message)
		if err != nil && !errors.Is(err, jobstore.ErrConflict) {
			return "", err
		}
		d.log.Info("sweep: trial stopped", slog.String("sweep_id", sw.ID), slog.String("trial", a.ID), slog.String("reason", a.Reason), slog.String("why", a.Message))
		if j, err := d.store.Get(ctx, a.ID); err == nil && (st == jobtype.StateDispatched || st == jobtype.StateRunning) {
			d.stopTrial(ctx, j, st)
		}
	}
	return "", nil
}

// guard stops sweep id's trials when what it will have cost by the time
// they could be stopped after the next pass reaches its budget_usd or
// budget_gpu_hours: its settled spend, plus what its trials still running
// will have cost lead (this duty's interval plus the kill grace) from now.
// Every trial not ended is then stopped, reason budget (a running one
// checkpoints, as on any stop). A cap limits actual spend, not
// estimates, and is not passed while the passes come on time and the
// stops take no longer than the kill grace; a late pass or a slow stop
// passes it by the running trials' cost over that lateness. The stop
// comes at most lead early. It reports whether the cap was reached.
func (d *sweeper) guard(ctx context.Context, id string) (bool, error) {
	sw, err := d.store.GetSweep(ctx, id)
	if err != nil || (sw.BudgetUSD <= 0 && sw.BudgetGPUHours <= 0) {
		return false, err
	}
	now, ahead, err := d.spent(ctx, sw, d.lead)
	if err != nil {
		return false, err
	}
	over := ""
	switch {
	case sw.BudgetUSD > 0 && ahead.usd >= sw.BudgetUSD:
		over = fmt.Sprintf("sweep budget reached: $%.2f of $%.2f spent, $%.2f once its running trials are stopped (settled and running trials so far)",
			now.usd, sw.BudgetUSD, ahead.usd)
	case sw.BudgetGPUHours > 0 && ahead.gpuh >= sw.BudgetGPUHours:
		over = fmt.Sprintf("sweep budget reached: %.2f of %.2f GPU-h spent, %.2f once its running trials are stopped (settled and running trials so far)",
			now.gpuh, sw.BudgetGPUHours, ahead.gpuh)
	default:
		return false, nil
	}
	if err := d.stopTrials(ctx, id, over); err != nil {
		return true, err
	}
	d.log.Warn("sweep cap reached: trials stopped", slog.String("sweep_id", id), slog.String("why", over))
	return true, nil
}

// usage is money and GPU-hours spent.
type usage struct{ usd, gpuh float64 }

// spent is what sweep sw has cost so far, and what it will have cost lead
// from now if its running trials go on: its settled spend plus what its
// running trials have cost beyond what was settled of them, accrued at the
// prices in force.
func (d *sweeper) spent(ctx context.Context, sw *jobtype.Sweep, lead time.Duration) (now, ahead usage, err error) {
	// A running trial holds its sweep reservation until settled: the
	// active set is all that can be running (not every trial of a sweep
	// of 10,000 each pass).
	sets, err := d.store.SweepSetsOf(ctx, sw.ID)
	if err != nil {
		return usage{}, usage{}, err
	}
	active, err := d.store.GetMany(ctx, sets.ActiveIDs)
	if err != nil {
		return usage{}, usage{}, err
	}
	cfg, t := d.routing().Config, time.Now()
	now = usage{sw.SpentUSD, sw.SpentGPUHours}
	ahead = now
	for _, j := range active {
		if j != nil && j.Trial != nil && j.State == jobtype.StateRunning {
			u, g := policy.JobUsageAt(cfg, j, t)
			now.usd += max(u-j.Trial.SettledUSD, 0)
			now.gpuh += max(g-j.Trial.SettledGPUHours, 0)
			u, g = policy.JobUsageAt(cfg, j, t.Add(lead))
			ahead.usd += max(u-j.Trial.SettledUSD, 0)
			ahead.gpuh += max(g-j.Trial.SettledGPUHours, 0)
		}
	}
	return now, ahead, nil
}

// stopTrials stops every trial of sweep id not ended nor asked to stop
// already, reason budget with message why; a dispatched or running one is
// told at once (stopTrial).
func (d *sweeper) stopTrials(ctx context.Context, id, why string) error {
	jobs, err := d.store.SweepTrials(ctx, id, 0, 0)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j == nil || j.Trial == nil || j.State.Terminal() || j.Trial.StopRequested != "" {
			continue
		}
		st, err := d.store.Stop(ctx, j.ID, jobtype.ReasonBudget, why)
		if err != nil && !errors.Is(err, jobstore.ErrConflict) {
			return err
		}
		if st == jobtype.StateDispatched || st == jobtype.StateRunning {
			d.stopTrial(ctx, j, st)
		}
	}
	return nil
}
