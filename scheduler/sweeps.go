package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/sweep"
)

// Sweeps (docs/sweeps.md): a sweep spec is expanded into trials here,
// every trial validated and routed like a submitted job, and the sweep
// with all its trials, their routes and ledger records stored in one
// store call (jobstore.CreateSweep). The leader's sweep duty
// (sweep_duty.go) drives it from there.

// planSweep expands req's spec into its trials, normalises, checks and
// routes each one over one snapshot (pure apart from the snapshot read):
// the NewSweep to store. A trial no backend may run refuses the sweep.
func (ad *admission) planSweep(ctx context.Context, req plane.SweepRequest, dry bool) (jobstore.NewSweep, []routing.Decision, error) {
	trials, err := req.Spec.Expand()
	if err != nil {
		var ve *jobspec.ValidationError
		if errors.As(err, &ve) {
			return jobstore.NewSweep{}, nil, &plane.InvalidError{Fields: ve.Errors}
		}
		return jobstore.NewSweep{}, nil, &plane.InvalidError{Fields: []jobspec.FieldError{{Message: err.Error()}}}
	}
	var fields []jobspec.FieldError
	for i := range trials {
		trials[i].Spec.Normalize(ad.cfg.Defaults)
		for _, fe := range ad.admissible(trials[i].Spec) {
			fields = append(fields, fe.Under(fmt.Sprintf("trials[%d]", i)))
		}
	}
	if len(fields) > 0 {
		return jobstore.NewSweep{}, nil, &plane.InvalidError{Fields: fields}
	}
	jobs := make([]jobstore.NewJob, len(trials))
	for i, t := range trials {
		jobs[i] = jobstore.NewJob{ID: jobstore.TrialID(req.ID, i), Spec: t.Spec}
	}
	pl, err := ad.plan(ctx, admitting{p: req.Who, path: "sweep", label: "trials[%d]", what: "trials of the sweep", jobs: jobs, waitForMoney: true}, dry)
	if err != nil {
		return jobstore.NewSweep{}, pl.ds, err
	}
	ns := jobstore.NewSweep{Sweep: sweepRecord(req), IdempotencyKey: req.Idem, Trials: make([]jobstore.NewTrial, len(trials))}
	frac := firstRungShare(req.Spec)
	for i, t := range trials {
		d := pl.ds[i]
		ns.Trials[i] = jobstore.NewTrial{Job: pl.jobs[i], Index: i, Params: t.Params, StopAtStep: firstStopAt(req.Spec),
			EstUSD: d.EstCostUSD * frac, EstGPUHours: float64(t.Spec.Resources.GPUs) * d.EstRuntime.Hours() * frac}
	}
	return ns, pl.ds, nil
}

// sweepRecord is the record of the sweep req asks for.
func sweepRecord(req plane.SweepRequest) jobtype.Sweep {
	sp := req.Spec
	return jobtype.Sweep{ID: req.ID, Name: sp.Name, Search: sp.Search.Kind, Metric: sp.Objective.Metric, Goal: sp.Objective.Goal,
		Trials: sp.Search.Trials, MaxParallel: sp.MaxParallel, BudgetUSD: sp.BudgetUSD, BudgetGPUHours: sp.BudgetGPUHours,
		Submitter: req.Who.Name, Team: req.Who.Team, Schedule: req.Schedule, Tick: req.Tick, Spec: sp.JSON()}
}

// ashaRungs are an ASHA sweep's rungs (nil for other searches).
func ashaRungs(sp *sweepspec.Sweep) []int {
	if sp.Search.Kind != sweepspec.SearchASHA || sp.Search.ASHA == nil {
		return nil
	}
	a := sp.Search.ASHA
	return sweep.Rungs(a.MinSteps, a.MaxSteps, a.ReductionFactor)
}

// firstStopAt is the first attempt's step limit: ASHA's first rung (0 for
// other searches, or when there is one rung).
func firstStopAt(sp *sweepspec.Sweep) int {
	if r := ashaRungs(sp); len(r) > 1 {
		return r[0]
	}
	return 0
}

// firstRungShare is the share of a full run's cost the first attempt
// reserves: ASHA's first rung's steps over the last's (1 otherwise).
func firstRungShare(sp *sweepspec.Sweep) float64 {
	if r := ashaRungs(sp); len(r) > 1 {
		return float64(r[0]) / float64(r[len(r)-1])
	}
	return 1
}

// admitSweep plans and stores the sweep req asks for, and wakes the
// placer. The store's script admits the first trials with their
// reservations in every budget they touch (the sweep's, their team's and
// backend's), as a submit's does; the rest wait (AdmitTrials).
func (ad *admission) admitSweep(ctx context.Context, req plane.SweepRequest) (*jobtype.Sweep, bool, error) {
	if req.Idem != "" {
		// Idempotency first: the key's outcome, whatever the budgets say now.
		existing, release, err := ad.claimKey(ctx, jobstore.IdemSweep, req.Idem, jobstore.SweepFingerprint(req.Spec.JSON(), req.Who.Team))
		var ce *jobstore.IdempotencyConflictError
		if errors.As(err, &ce) {
			return nil, false, fmt.Errorf("idempotency key %q names sweep %s, created from another spec or by another team: %w", req.Idem, ce.JobID, jobstore.ErrIdempotencyConflict)
		}
		if err != nil {
			return nil, false, err
		}
		if existing != "" {
			sw, err := ad.store.GetSweep(ctx, existing)
			return sw, true, err
		}
		defer release()
	}
	ns, _, err := ad.planSweep(ctx, req, false)
	if err != nil {
		return nil, false, err
	}
	if hold := ad.cfg.TestHoldScheduledSweep; hold > 0 && req.Schedule != "" {
		// A test hook (lathed: LATHE_TEST_HOLD_SCHEDULED_SWEEP): the sweep
		// is expanded, nothing of it is stored, and the test kills this
		// leader now.
		ad.log.Warn("test hook: holding a planned scheduled sweep before storing it", slog.String("sweep_id", req.ID), slog.Duration("hold", hold))
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(hold):
		}
	}
	sw, existed, err := ad.store.CreateSweep(ctx, ad.cfg.Ledger, ns)
	if err != nil {
		return nil, false, unknownOutcome(err)
	}
	if !existed {
		ad.wake()
	}
	return sw, existed, nil
}
