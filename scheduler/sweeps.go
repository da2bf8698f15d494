package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/sweep"
)

// Sweeps (docs/sweeps.md): a sweep spec's trials are drawn, and its first
// checkInline built and checked like submitted jobs before anything is
// stored (the rest as their chunks are stored); then the
// sweep is stored in bounded steps (jobstore.StoreTrials, SweepChunk
// trials a script, each chunk routed over a fresh snapshot): the first
// chunk with the sweep's record (state admitting), the others after it,
// the last moving it to running; then its first trials are admitted with
// their reservations (jobstore.AdmitTrials). A request stores what it can
// within inlineFill and answers; a bigger sweep's filling goes on in the
// background (fillRest), and the leader's sweep duty resumes any sweep
// whose filler died (resumeSweep). The sweep duty (sweep_duty.go) drives
// it from there.

// inlineFill is how long a request stores the chunks of a sweep of up to
// checkInline trials before it answers, by default
// (Config.SweepInlineFill); the sweep is then answered admitting, its
// filling going on behind. A sweep of a few hundred trials is answered
// running; a bigger one is answered after its first chunk.
const inlineFill = 100 * time.Millisecond

// resumeSlice is how long one pass of the sweep duty stores chunks of a
// sweep whose filler died, so that the leader's other duties (and its
// lease) are never held up; the filler's lease (jobstore.Config.FillLease)
// keeps the sweep this duty's between passes.
const resumeSlice = 200 * time.Millisecond

// checkInline is how many of a sweep's trials a submit builds and checks
// before it stores anything: a sweep of up to that many is refused whole
// (400, nothing stored) when any trial is not a valid job here. A bigger
// sweep's later trials are built and checked chunk by chunk as they are
// stored, and one that is not valid gives the admission up (abandon), as a
// trial no backend may run does: checking all 10,000 trials of the biggest
// sweep first took ~300 ms and held every job spec in memory.
const checkInline = 1000

// drawSweep draws req's spec's trials (sweepspec.Sweep.Draw): a
// plane.InvalidError when the spec's search cannot be drawn.
func drawSweep(req plane.SweepRequest) (*sweepspec.Expansion, error) {
	exp, err := req.Spec.Draw()
	if err != nil {
		return nil, &plane.InvalidError{Fields: []jobspec.FieldError{{Message: err.Error()}}}
	}
	return exp, nil
}

// buildTrials builds trials from…to-1 of exp, each normalised and checked
// like a job submitted by team (the sweep's): a plane.InvalidError naming
// every trial that is not a valid job here (a problem many trials share,
// such as a dataset outside the team's allowed roots, named once, with how
// many more trials have it).
func (ad *admission) buildTrials(team string, exp *sweepspec.Expansion, from, to int) ([]sweepspec.Trial, error) {
	trials, err := exp.Build(from, to)
	if err != nil {
		var ve *jobspec.ValidationError
		if errors.As(err, &ve) {
			return nil, &plane.InvalidError{Fields: ve.Errors}
		}
		return nil, &plane.InvalidError{Fields: []jobspec.FieldError{{Message: err.Error()}}}
	}
	var fields []jobspec.FieldError
	type problem struct{ field, value, msg string }
	seen := map[problem]int{} // → its index in fields
	more := map[int]int{}     // fields index → trials beyond the first
	// What admissible looks at is most often the same in every trial (a
	// sweep varies hyperparameters): it is checked once per distinct
	// trainer and paths in this range (each check resolves the paths on
	// disk; the worker checks them again when it opens them). The team is
	// the same for every trial, so it needs no place in the key.
	type looked struct {
		trainer, dataset, eval, output string
		nodes                          int
	}
	memo := map[looked][]jobspec.FieldError{}
	for i := range trials {
		sp := trials[i].Spec
		sp.Normalize(ad.cfg.Defaults)
		at := looked{sp.Trainer, sp.Dataset, sp.EvalDataset, sp.Output.URI, sp.Resources.Nodes}
		fes, ok := memo[at]
		if !ok {
			fes = ad.admissible(team, sp)
			if sp.Resources.Nodes > 1 {
				fes = append(fes, jobspec.FieldError{Field: "resources.nodes", Value: strconv.Itoa(sp.Resources.Nodes), Message: msgMultiNode})
			}
			memo[at] = fes
		}
		for _, fe := range fes {
			k := problem{fe.Field, fe.Value, fe.Message}
			if at, ok := seen[k]; ok {
				more[at]++
				continue
			}
			seen[k] = len(fields)
			fields = append(fields, fe.Under(fmt.Sprintf("trials[%d]", trials[i].Index)))
		}
	}
	for at, n := range more {
		fields[at].Message += fmt.Sprintf(" (and %d more trials)", n)
	}
	if len(fields) > 0 {
		return nil, &plane.InvalidError{Fields: fields}
	}
	return trials, nil
}

// planTrials routes trials (the sweep's, from index trials[0].Index) over
// one snapshot, as admission routes any job: the NewTrials to store. A
// trial no backend may run is a plane.RefusedError.
func (ad *admission) planTrials(ctx context.Context, req plane.SweepRequest, trials []sweepspec.Trial, dry bool) ([]jobstore.NewTrial, []routing.Decision, error) {
	jobs := make([]jobstore.NewJob, len(trials))
	for i, t := range trials {
		jobs[i] = jobstore.NewJob{ID: jobstore.TrialID(req.ID, t.Index), Spec: t.Spec}
	}
	pl, err := ad.plan(ctx, admitting{p: req.Who, path: "sweep", label: "trials[%d]", offset: trials[0].Index,
		what: "trials of the sweep", jobs: jobs, waitForMoney: true}, dry)
	if err != nil {
		return nil, pl.ds, err
	}
	frac, stopAt := firstRungShare(req.Spec), firstStopAt(req.Spec)
	out := make([]jobstore.NewTrial, len(trials))
	for i, t := range trials {
		d := pl.ds[i]
		out[i] = jobstore.NewTrial{Job: pl.jobs[i], Index: t.Index, Params: t.Params, StopAtStep: stopAt,
			EstUSD: d.EstCostUSD * frac, EstGPUHours: float64(t.Spec.Resources.TotalGPUs()) * d.EstRuntime.Hours() * frac}
	}
	return out, pl.ds, nil
}

// planSweep expands req's spec into its trials and routes every one (the
// dry run's answer; nothing is stored).
func (ad *admission) planSweep(ctx context.Context, req plane.SweepRequest, dry bool) (jobstore.NewSweep, []routing.Decision, error) {
	exp, err := drawSweep(req)
	if err != nil {
		return jobstore.NewSweep{}, nil, err
	}
	trials, err := ad.buildTrials(req.Who.Team, exp, 0, exp.Len())
	if err != nil {
		return jobstore.NewSweep{}, nil, err
	}
	nts, ds, err := ad.planTrials(ctx, req, trials, dry)
	if err != nil {
		return jobstore.NewSweep{}, ds, err
	}
	return jobstore.NewSweep{Sweep: sweepRecord(req), IdempotencyKey: req.Idem, Trials: nts}, ds, nil
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

// admitSweep checks and stores the sweep req asks for. Its first
// checkInline trials are built and checked first (a plane.InvalidError
// stores nothing; later ones are checked as their chunks are stored), then the first
// chunk is routed (a plane.RefusedError stores nothing) and stored with
// the sweep's record. A sweep of up to checkInline trials goes on being
// stored for inlineFill, and one stored whole by then has its first
// trials admitted and is answered running; a bigger one is answered
// admitting at once (its first chunk stored), and its filling goes on in
// the background (fillRest). A trial of a later chunk that no
// backend may run ends the sweep's admission: it is cancelled, with a
// message naming the trial (no trial of it ran: none is admitted before
// the last chunk is stored); so does a later trial that is not a valid
// job here.
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
	exp, err := drawSweep(req)
	if err != nil {
		return nil, false, err
	}
	checked, err := ad.buildTrials(req.Who.Team, exp, 0, min(checkInline, exp.Len()))
	if err != nil {
		return nil, false, err
	}
	f := &sweepFill{req: req, exp: exp, built: checked, owner: fillOwner()}
	first, _, err := ad.planTrials(ctx, req, checked[:min(jobstore.SweepChunk, len(checked))], false)
	if err != nil {
		return nil, false, err
	}
	if err := ad.testHold(ctx, req); err != nil {
		return nil, false, err
	}
	sw, existed, err := ad.store.StoreTrials(ctx, ad.cfg.Ledger, f.chunk(first), f.owner)
	if err != nil || existed {
		return sw, existed, unknownOutcome(err)
	}
	ad.fillInline(ctx, f, sw)
	if sw, err = ad.store.GetSweep(context.WithoutCancel(ctx), req.ID); err != nil {
		return nil, false, unknownOutcome(err)
	}
	return sw, false, nil
}

// testHold is a test hook (lathed: LATHE_TEST_HOLD_SCHEDULED_SWEEP): a
// scheduled sweep is expanded, nothing of it is stored, and admitSweep
// waits Config.TestHoldScheduledSweep (or until ctx ends: its error) for
// the test to kill this leader. Without the hook it returns at once.
func (ad *admission) testHold(ctx context.Context, req plane.SweepRequest) error {
	hold := ad.cfg.TestHoldScheduledSweep
	if hold <= 0 || req.Schedule == "" {
		return nil
	}
	ad.log.Warn("test hook: holding a planned scheduled sweep before storing it", slog.String("sweep_id", req.ID), slog.Duration("hold", hold))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(hold):
		return nil
	}
}

// fillInline goes on storing sweep sw's trials (f, its first chunk
// stored) within the request: for up to SweepInlineFill when it has at
// most checkInline trials, else not at all; what is left is stored in the
// background (fillRest). A sweep whose filling failed stays admitting,
// and a scheduler resumes it once its filler's lease lapses.
func (ad *admission) fillInline(ctx context.Context, f *sweepFill, sw *jobtype.Sweep) {
	inline := ad.cfg.SweepInlineFill
	if f.exp.Len() > checkInline {
		inline = 0 // answered at once, its first chunk stored: the rest behind
	}
	done, err := ad.fill(ctx, f, sw.Stored, time.Now().Add(inline))
	switch {
	case err != nil && !errors.Is(err, context.DeadlineExceeded):
		// The sweep is stored (admitting): answered with it as it is; a
		// scheduler resumes its filling (its lease lapses).
		ad.log.Warn("sweep: storing its trials", slog.String("sweep_id", sw.ID), slog.Any("err", err))
	case !done:
		ad.fillRest(f)
	}
}

// sweepFill is a sweep being stored: its request, its trials (drawn, built
// a chunk at a time), the trials built and checked already from the first
// (a submit's checkInline), and the name its filler's lease holds.
type sweepFill struct {
	req   plane.SweepRequest
	exp   *sweepspec.Expansion
	built []sweepspec.Trial
	owner string
}

// chunk is the store call's NewSweep for trials nts.
func (f *sweepFill) chunk(nts []jobstore.NewTrial) jobstore.NewSweep {
	return jobstore.NewSweep{Sweep: sweepRecord(f.req), IdempotencyKey: f.req.Idem, Total: f.exp.Len(), Trials: nts}
}

// trials are the chunk of f's trials from trial from, built and checked
// (a plane.InvalidError when one is not a valid job here); the trials
// built before are let go once the filling is past them.
func (ad *admission) trials(f *sweepFill, from int) ([]sweepspec.Trial, error) {
	to := min(from+jobstore.SweepChunk, f.exp.Len())
	if to <= len(f.built) {
		return f.built[from:to], nil
	}
	f.built = nil
	return ad.buildTrials(f.req.Who.Team, f.exp, from, to)
}

// fillOwner is a new filler's name.
func fillOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fill stores f's chunks from trial from until every trial is stored (and
// the first admitted: done) or until passes. A trial no backend may run
// ends the admission (abandon). Another filler's chunk (a stale one) is
// skipped over; another filler's lease ends this one quietly (done =
// false, nil).
func (ad *admission) fill(ctx context.Context, f *sweepFill, from int, until time.Time) (done bool, err error) {
	id := f.req.ID
	for from < f.exp.Len() {
		if time.Now().After(until) {
			return false, nil
		}
		trials, err := ad.trials(f, from)
		var inv *plane.InvalidError
		if errors.As(err, &inv) {
			return false, ad.abandon(ctx, id, "some trials are not valid jobs here: "+jobspec.JoinFieldErrors("", inv.Fields))
		}
		if err != nil {
			return false, err
		}
		nts, _, err := ad.planTrials(ctx, f.req, trials, false)
		var re *plane.RefusedError
		if errors.As(err, &re) {
			return false, ad.abandon(ctx, id, "no backend may run some trials: "+strings.Join(re.Reasons, "; "))
		}
		if err != nil {
			return false, err
		}
		sw, _, err := ad.store.StoreTrials(ctx, ad.cfg.Ledger, f.chunk(nts), f.owner)
		var stale *jobstore.StaleChunkError
		var gone *jobstore.SweepConflictError
		switch {
		case errors.As(err, &stale):
			from = stale.Stored
			continue
		case errors.Is(err, jobstore.ErrFillerBusy), errors.As(err, &gone):
			return false, nil // another filler has it, or it was cancelled
		case err != nil:
			return false, err
		}
		from = sw.Stored
	}
	if _, err := ad.store.AdmitTrials(ctx, id); err != nil {
		return false, err
	}
	ad.wake()
	return true, nil
}

// fillRest stores the rest of f in the background, until done or this
// scheduler stops (a leader's sweep duty then resumes it).
func (ad *admission) fillRest(f *sweepFill) {
	if _, busy := ad.filling.LoadOrStore(f.req.ID, true); busy {
		return
	}
	ad.bg.Add(1)
	go func() {
		defer ad.bg.Done()
		defer ad.filling.Delete(f.req.ID)
		sw, err := ad.store.GetSweep(ad.bgCtx, f.req.ID)
		if err == nil {
			_, err = ad.fill(ad.bgCtx, f, sw.Stored, time.Now().Add(24*time.Hour))
		}
		if err != nil && ad.bgCtx.Err() == nil {
			ad.log.Warn("sweep: storing its trials", slog.String("sweep_id", f.req.ID), slog.Any("err", err))
		}
	}()
}

// resumeSweep goes on storing sweep sw (admitting, its filler gone: a
// scheduler that died, a request whose filling failed) for resumeSlice:
// the sweep duty's part. Its spec is expanded again from the record (the
// expansion is deterministic: a random search draws from its seed); each
// chunk's trials are built and checked again as they are stored.
func (ad *admission) resumeSweep(ctx context.Context, sw *jobtype.Sweep, owner string) error {
	if _, busy := ad.filling.Load(sw.ID); busy {
		return nil // this scheduler's background filler has it
	}
	sp, err := sweepspec.Parse(sw.Spec, sweepspec.Options{})
	if err != nil {
		return ad.abandon(ctx, sw.ID, "its stored spec no longer parses: "+err.Error())
	}
	req := plane.SweepRequest{Spec: sp, ID: sw.ID, Who: plane.Principal{Name: sw.Submitter, Team: sw.Team}, Schedule: sw.Schedule, Tick: sw.Tick}
	exp, err := drawSweep(req)
	if err != nil {
		return ad.abandon(ctx, sw.ID, "its trials can no longer be drawn: "+err.Error())
	}
	if exp.Len() != sw.Trials {
		return ad.abandon(ctx, sw.ID, fmt.Sprintf("its spec expands to %d trials now, not %d", exp.Len(), sw.Trials))
	}
	_, err = ad.fill(ctx, &sweepFill{req: req, exp: exp, owner: owner}, sw.Stored, time.Now().Add(resumeSlice))
	return err
}

// abandon ends sweep id's admission: why goes on its record and it is
// cancelled (its stored trials, none admitted, with it).
func (ad *admission) abandon(ctx context.Context, id, why string) error {
	ad.log.Warn("sweep: admission given up", slog.String("sweep_id", id), slog.String("why", why))
	if err := ad.store.SetSweepMessage(ctx, id, "admission given up: "+why); err != nil {
		return err
	}
	if _, err := ad.store.CancelSweep(ctx, id); err != nil && !errors.Is(err, jobstore.ErrConflict) {
		return err
	}
	return nil
}
