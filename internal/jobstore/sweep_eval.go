package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// EvalPoint is one eval line of a job (the trainer's "eval" event).
type EvalPoint struct {
	Attempt int                `json:"attempt"`
	Step    int                `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// Evals reads a job's eval lines, oldest first (the last 2000: Append
// keeps them in job:<id>:evals). Metrics are every numeric field of the
// trainer's line but "step" ({"event":"eval","step":40,"eval_loss":1.9}
// gives Step 40, Metrics {eval_loss: 1.9}). A line that is not a JSON
// object is skipped.
func (s *Store) Evals(ctx context.Context, id string) ([]EvalPoint, error) {
	raw, err := s.rdb.LRange(ctx, s.key("job", id, "evals"), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: evals of %s: %w", id, err)
	}
	out := make([]EvalPoint, 0, len(raw))
	for _, r := range raw {
		var line struct {
			Attempt int                        `json:"attempt"`
			Data    map[string]json.RawMessage `json:"data"`
		}
		if json.Unmarshal([]byte(r), &line) != nil || line.Data == nil {
			continue
		}
		p := EvalPoint{Attempt: line.Attempt, Metrics: map[string]float64{}}
		for k, v := range line.Data {
			var f float64
			if json.Unmarshal(v, &f) != nil {
				continue
			}
			if k == "step" {
				p.Step = int(f)
				continue
			}
			p.Metrics[k] = f
		}
		out = append(out, p)
	}
	return out, nil
}

// tickTTL is how long a claimed tick is remembered.
const tickTTL = 7 * 24 * time.Hour

// ClaimTick records that schedule's tick at `at` made run runID, once:
// won=false and the run recorded by whoever claimed it first otherwise
// (SET NX). The claim is kept for a week.
func (s *Store) ClaimTick(ctx context.Context, schedule string, at time.Time, runID string) (won bool, existing string, err error) {
	if schedule == "" || runID == "" {
		return false, "", fmt.Errorf("jobstore: claim tick: schedule %q, run %q: both must be set", schedule, runID)
	}
	res, err := claimTickScript.Run(ctx, s.rdb, []string{s.key("tick", schedule, ms(at))}, runID, int(tickTTL.Seconds())).Slice()
	if err != nil {
		return false, "", fmt.Errorf("jobstore: claim tick %s at %s: %w", schedule, at.UTC().Format(time.RFC3339), err)
	}
	if len(res) != 2 {
		return false, "", fmt.Errorf("jobstore: claim tick %s: unexpected script reply %v", schedule, res)
	}
	code, _ := res[0].(int64)
	existing, _ = res[1].(string)
	return code == 1, existing, nil
}
