package worker

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestJudgePause: how an attempt whose trainer exited 0 ends, for each
// combination of the attempt's step limit and what the trainer said.
func TestJudgePause(t *testing.T) {
	cases := []struct {
		name    string
		limit   int
		end     trainerEnd
		want    pauseVerdict
		problem string // a substring of the problem; "" none
	}{
		{"plain job ran to its end", 0, trainerEnd{lastStep: 900, artifacts: 2}, pauseVerdict{}, ""},
		{"paused at the limit", 300, trainerEnd{pausedAt: 300, lastStep: 300}, pauseVerdict{paused: true, step: 300}, ""},
		{"paused at once past the limit (resumed from a later checkpoint)", 300, trainerEnd{pausedAt: 320}, pauseVerdict{paused: true, step: 320}, ""},
		{"stopped at the limit without saying so", 300, trainerEnd{lastStep: 300}, pauseVerdict{paused: true, step: 300}, ""},
		{"paused, with artifacts too: still a pause", 300, trainerEnd{pausedAt: 300, lastStep: 300, artifacts: 1}, pauseVerdict{paused: true, step: 300}, ""},
		{"limit at or past the end: the trainer finished", 900, trainerEnd{lastStep: 900, artifacts: 2}, pauseVerdict{}, ""},
		{"limit, trainer ran to its end short of it", 300, trainerEnd{lastStep: 200, artifacts: 2}, pauseVerdict{}, ""},
		{"paused_at without a limit", 0, trainerEnd{pausedAt: 300, lastStep: 300}, pauseVerdict{}, "says paused_at 300, but this attempt has no step limit"},
		{"paused_at short of the limit", 300, trainerEnd{pausedAt: 100, lastStep: 100}, pauseVerdict{}, "paused_at 100, short of the attempt's step limit training.stop_at_step 300"},
		{"negative paused_at without a limit", 0, trainerEnd{pausedAt: -1}, pauseVerdict{}, "says paused_at -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := judgePause(c.limit, c.end)
			if c.problem != "" {
				if !strings.Contains(got.problem, c.problem) || got.paused {
					t.Fatalf("judgePause(%d, %+v) = %+v, want a problem with %q and no pause", c.limit, c.end, got, c.problem)
				}
				return
			}
			if got != c.want {
				t.Fatalf("judgePause(%d, %+v) = %+v, want %+v", c.limit, c.end, got, c.want)
			}
		})
	}
}

// TestAttemptSpecCarriesTheStepLimit: the job file of a trial's attempt
// with a step limit has training.stop_at_step; the stored spec is not
// changed; a plain job's (and a last rung's) job file has no such key.
func TestAttemptSpecCarriesTheStepLimit(t *testing.T) {
	base := jobspec.Spec{Name: "t", Training: jobspec.Training{MaxSteps: 900, LearningRate: 0.01}}
	trial := &jobtype.Job{ID: "j-1", Spec: base, Trial: &jobtype.TrialInfo{SweepID: "s-1", Index: 3, Rung: 1, StopAtStep: 300}}
	spec := attemptSpec(trial)
	if spec.Training.StopAtStep != 300 || trial.Spec.Training.StopAtStep != 0 {
		t.Fatalf("attempt spec stop_at_step %d, stored %d: want 300 and 0", spec.Training.StopAtStep, trial.Spec.Training.StopAtStep)
	}
	b, _ := json.Marshal(spec)
	if !strings.Contains(string(b), `"stop_at_step":300`) || !strings.Contains(string(b), `"max_steps":900`) {
		t.Fatalf("job file %s: want stop_at_step 300 beside max_steps 900 (the schedule stays the full run's)", b)
	}
	for name, job := range map[string]*jobtype.Job{
		"plain job": {ID: "j-2", Spec: base},
		"last rung": {ID: "j-3", Spec: base, Trial: &jobtype.TrialInfo{SweepID: "s-1", Rung: 2}},
	} {
		if b, _ := json.Marshal(attemptSpec(job)); strings.Contains(string(b), "stop_at_step") {
			t.Errorf("%s: job file %s has stop_at_step", name, b)
		}
	}
}

// TestCloudRefusesStepLimits: the AWS worker has no pause path yet, so an
// attempt with a step limit is refused, permanent, before anything is
// copied or launched; a trial without one (grid, random, ASHA's last
// rung) goes on.
func TestCloudRefusesStepLimits(t *testing.T) {
	for _, c := range []struct {
		name    string
		trial   *jobtype.TrialInfo
		refused bool
	}{
		{"plain job", nil, false},
		{"trial without a limit", &jobtype.TrialInfo{SweepID: "s-1", Index: 2}, false},
		{"ASHA rung", &jobtype.TrialInfo{SweepID: "s-1", Index: 2, StopAtStep: 300}, true},
	} {
		job := &jobtype.Job{ID: "j-1", Attempt: 1, OutputURI: "file:///out/j-1", Trial: c.trial,
			Spec: jobspec.Spec{Residency: []string{"eu"}, Dataset: "s3://eu-data/t.jsonl"}}
		a := testAttempt(t, cloudTestConfig, job)
		var sb strings.Builder
		a.log = slog.New(slog.NewTextHandler(&sb, nil))
		end := a.checkStepLimit()
		if (end != nil) != c.refused {
			t.Fatalf("%s: refused = %v, want %v", c.name, end != nil, c.refused)
		}
		if c.refused && (!strings.Contains(sb.String(), "ASHA pause on cloud backends is not built yet") ||
			!strings.Contains(sb.String(), "step limit 300") || !strings.Contains(sb.String(), "reason=permanent")) {
			t.Fatalf("%s: refusal %q does not say ASHA pause is not built, name the limit, with reason permanent", c.name, sb.String())
		}
	}
}
