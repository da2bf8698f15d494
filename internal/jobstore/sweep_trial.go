package jobstore

import (
	"context"
	"fmt"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Pause ends attempt attempt of trial id paused (running → paused, OpPause)
// with its metrics, at step step: the attempt reached its step limit and
// checkpointed. With a cancel asked it ends cancelled; with a stop asked,
// stopped. Its node reservation is released either way; a paused trial
// joins its sweep's paused set (and stays in the active set until the
// sweep duty settles it). A job that is not a running trial at attempt is
// a *ConflictError.
func (s *Store) Pause(ctx context.Context, id string, attempt int, step int, metrics map[string]float64) error {
	m := ""
	if metrics != nil {
		j, err := s.Get(ctx, id)
		if err != nil {
			return err
		}
		for k, v := range metrics {
			j.Metrics[k] = v
		}
		m = mustJSON(j.Metrics)
	}
	r, err := s.run(ctx, "pause", id, pauseScript, attempt, ms(s.now()), s.cfg.EventsMaxLen, m, step)
	if err != nil {
		return err
	}
	if r.code != codeDone {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("pause needs a sweep trial running attempt %d", attempt)}
	}
	return nil
}

// PromoteParams is one ASHA promotion.
type PromoteParams struct {
	SweepID, ID string
	Attempt     int // the paused attempt
	Rung        int // the rung it is promoted to
	StopAtStep  int // that rung's step limit (0: run to the end)
	EstUSD      float64
	EstGPUHours float64
}

// Promote moves a paused trial to queued as attempt+1 into the pending set
// with StopAtStep, reserving its estimate against the sweep's budgets
// (OpPromote); ErrOverBudget (nothing written, the error says which budget
// and its figures) when it does not fit. The paused attempt must have been
// settled (SettleTrial) and the sweep be running; otherwise, or when the
// trial is not paused at p.Attempt, a *ConflictError.
func (s *Store) Promote(ctx context.Context, p PromoteParams) error {
	if p.Rung < 0 || p.StopAtStep < 0 || !(p.EstUSD >= 0) || !(p.EstGPUHours >= 0) {
		return fmt.Errorf("jobstore: promote %s: rung %d, stop_at_step %d, $%v, %v GPU-h: want numbers ≥ 0", p.ID, p.Rung, p.StopAtStep, p.EstUSD, p.EstGPUHours)
	}
	j, err := s.Get(ctx, p.ID)
	if err != nil {
		return err
	}
	r, err := s.run(ctx, "promote", p.ID, promoteScript, p.SweepID, p.Attempt, p.Rung, p.StopAtStep,
		fmtF(p.EstUSD), fmtF(p.EstGPUHours), requeueScore(j), ms(s.now()), s.cfg.EventsMaxLen)
	if err != nil {
		return err
	}
	switch r.code {
	case codeDone:
		return nil
	case codeOverBudget:
		return fmt.Errorf("jobstore: promote %s to rung %d: %s: %w", p.ID, p.Rung, r.state, ErrOverBudget)
	}
	return &ConflictError{ID: p.ID, State: r.state, Attempt: r.attempt,
		Want: fmt.Sprintf("promote needs a trial of running sweep %s paused at attempt %d, that attempt settled, no cancel asked", p.SweepID, p.Attempt)}
}

// Stop ends a trial stopped with reason and message: a waiting (queued,
// unadmitted) or paused trial at once (OpStop), as is a queued trial
// already admitted (it leaves the pending set; its sweep reservation is
// settled by the sweep duty like any ended trial's); a dispatched,
// provisioning or running one gets stop_requested and its owner ends it
// stopped (every path that would end it cancelled). A cancel already asked
// wins (the trial ends cancelled). Returns the state the trial was found
// in; a job that already succeeded, failed or was cancelled is a
// *ConflictError. A job of no sweep is stopped the same way (a budget's
// cap on actual spend stops any job).
func (s *Store) Stop(ctx context.Context, id, reason, msg string) (jobtype.State, error) {
	if reason == "" {
		return "", fmt.Errorf("jobstore: stop %s: the reason is empty", id)
	}
	r, err := s.run(ctx, "stop", id, stopScript, reason, msg, ms(s.now()), s.cfg.EventsMaxLen)
	if err != nil {
		return "", err
	}
	if r.code != codeDone {
		return r.state, &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: "stop needs a sweep trial that has not succeeded, failed or been cancelled"}
	}
	return r.state, nil
}
