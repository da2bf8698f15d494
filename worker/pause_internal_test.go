package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/internal/cloud"
	"github.com/lathe-ml/lathe/internal/cloud/cloudfake"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
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

// TestCloudJobCarriesTheStepLimit: the agent's job.json of a trial's
// attempt with a step limit has training.stop_at_step (the agent writes
// the spec as the trainer's job file), and the schedule's max_steps.
func TestCloudJobCarriesTheStepLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		trial *jobtype.TrialInfo
		want  int
	}{
		{"plain job", nil, 0},
		{"trial without a limit", &jobtype.TrialInfo{SweepID: "s-1", Index: 2}, 0},
		{"ASHA rung", &jobtype.TrialInfo{SweepID: "s-1", Index: 2, StopAtStep: 300}, 300},
	} {
		job := &jobtype.Job{ID: "j-1", Attempt: 1, Trial: c.trial,
			Spec: jobspec.Spec{Residency: []string{"eu"}, Dataset: "s3://eu-data/t.jsonl", Training: jobspec.Training{MaxSteps: 900}}}
		aj := testAttempt(t, cloudTestConfig, job).agentJob("s3://eu-data/t.jsonl", "", time.Hour)
		if aj.Spec.Training.StopAtStep != c.want || aj.Spec.Training.MaxSteps != 900 || job.Spec.Training.StopAtStep != 0 {
			t.Errorf("%s: job.json stop_at_step %d max_steps %d (stored %d), want %d, 900 and 0",
				c.name, aj.Spec.Training.StopAtStep, aj.Spec.Training.MaxSteps, job.Spec.Training.StopAtStep, c.want)
		}
	}
}

// TestCloudPausedStatus: the agent's paused status ends the attempt as
// the local worker's pause does, after the instance is terminated: paused
// at the status's step for an attempt with a step limit; failed,
// permanent, for one without (the trainer's error). Against a real Redis
// (the store calls of the end are not run here: worker/pause_test.go runs
// the local pause against the real store) and cloudfake for EC2.
func TestCloudPausedStatus(t *testing.T) {
	rdb := redistest.Start(t).Client()
	for _, c := range []struct {
		name  string
		trial *jobtype.TrialInfo
		st    agent.Status
		want  string // in the log
	}{
		{"ASHA rung", &jobtype.TrialInfo{SweepID: "s-1", StopAtStep: 3}, agent.Status{State: agent.StatePaused, PausedAt: 3, Checkpoint: "ckpt-3"},
			"paused at step 3; checkpoint ckpt-3 kept"},
		{"no step limit", nil, agent.Status{State: agent.StatePaused, PausedAt: 3}, "says paused_at 3, but this attempt has no step limit"},
		{"paused without a step", &jobtype.TrialInfo{SweepID: "s-1", StopAtStep: 3}, agent.Status{State: agent.StatePaused}, "paused without a paused_at step"},
	} {
		job := &jobtype.Job{ID: "j-1", Attempt: 1, Trial: c.trial, Spec: jobspec.Spec{Residency: []string{"eu"}, Dataset: "s3://eu-data/t.jsonl"}}
		a := testAttempt(t, cloudTestConfig, job)
		ec2 := cloudfake.New("aws-eu")
		ec2.Put(cloud.Instance{ID: "i-1", Backend: "aws-eu", JobID: "j-1", Attempt: 1, Managed: true, Type: "fake.gpu1", State: "running"})
		a.c.cfg.EC2, a.c.store = ec2, jobstore.New(rdb, jobstore.Config{})
		a.inst = &jobtype.Instance{ID: "i-1", Attempt: 1, Backend: "aws-eu", LaunchTime: time.Now().Add(-time.Minute), State: "running"}
		var sb strings.Builder
		a.log = slog.New(slog.NewTextHandler(&sb, nil))
		if end := a.ended(context.Background(), c.st); end == nil {
			t.Fatalf("%s: no end", c.name)
		}
		if !strings.Contains(sb.String(), c.want) {
			t.Errorf("%s: log %q does not say %q", c.name, sb.String(), c.want)
		}
		if got := ec2.Terminated(); len(got) != 1 || got[0] != "i-1" {
			t.Errorf("%s: terminated %v, want the attempt's instance", c.name, got)
		}
	}
}
