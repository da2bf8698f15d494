package policy

import (
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
)

// TestProgressEnd: a running job's end from its trainer's progress lines
// is the steps left at the pace since the attempt's first line; with one
// line, a first attempt's whole run per step; none for a resumed attempt
// without its own first line, nor without a step and total.
func TestProgressEnd(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	started := now.Add(-50 * time.Minute)
	job := func(attempt, step, total int, from *jobtype.ProgressMark) *jobtype.Job {
		return &jobtype.Job{State: jobtype.StateRunning, Attempt: attempt, StartedAt: &started,
			Progress: jobtype.Progress{Step: step, TotalSteps: total}, ProgressFrom: from}
	}
	trial := func(j *jobtype.Job, stopAt int) *jobtype.Job {
		j.Trial = &jobtype.TrialInfo{SweepID: "s", StopAtStep: stopAt}
		return j
	}
	mark := func(attempt, step int, ago time.Duration) *jobtype.ProgressMark {
		return &jobtype.ProgressMark{Attempt: attempt, Step: step, At: now.Add(-ago)}
	}
	for _, c := range []struct {
		name string
		j    *jobtype.Job
		left time.Duration // -1: no estimate
	}{
		// 10 minutes of start-up, then 40 steps in 40 minutes: 60 left.
		{"paced since the first line", job(1, 41, 101, mark(1, 1, 40*time.Minute)), 60 * time.Minute},
		{"one line: the whole run per step", job(1, 10, 20, mark(1, 10, 0)), 50 * time.Minute},
		{"no mark: the whole run per step", job(1, 25, 100, nil), 150 * time.Minute},
		{"resumed at step 500: its own pace", job(2, 520, 1000, mark(2, 500, 20*time.Minute)), 480 * time.Minute},
		{"resumed, last attempt's mark", job(2, 520, 1000, mark(1, 1, 20*time.Minute)), -1},
		{"resumed, no mark", job(2, 520, 1000, nil), -1},
		{"no total", job(1, 10, 0, nil), -1},
		{"past its total", job(1, 10, 10, nil), -1},
		{"a huge total is capped", job(1, 1, 1<<40, nil), maxProgressLeft},
		{"a trial pausing at its rung's step 50", trial(job(1, 25, 100, nil), 50), 50 * time.Minute},
		{"a trial past its rung's step", trial(job(1, 60, 100, nil), 50), -1},
	} {
		end, ok := ProgressEnd(c.j, now)
		switch {
		case c.left < 0 && ok:
			t.Errorf("%s: an estimate (%s left), want none", c.name, end.Sub(now))
		case c.left >= 0 && (!ok || end.Sub(now).Round(time.Second) != c.left):
			t.Errorf("%s: %s left (ok %v), want %s", c.name, end.Sub(now), ok, c.left)
		}
	}
	if _, ok := ProgressEnd(&jobtype.Job{State: jobtype.StateQueued, Attempt: 1, Progress: jobtype.Progress{Step: 1, TotalSteps: 9}}, now); ok {
		t.Error("a queued job has no progress end")
	}
}

// TestPlacementReadsProgress: placement's expected end of a running job is
// its progress end, within its max_runtime; without progress, its
// expected_runtime.
func TestPlacementReadsProgress(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	started := now.Add(-time.Hour)
	run := func(id string, p jobtype.Progress) *jobtype.Job {
		return &jobtype.Job{ID: id, State: jobtype.StateRunning, Attempt: 1, StartedAt: &started, Progress: p,
			Spec: jobspec.Spec{MaxRuntime: jobspec.Duration(4 * time.Hour), ExpectedRuntime: jobspec.Duration(90 * time.Minute)}}
	}
	jobs := map[string]*jobtype.Job{
		"half":  run("half", jobtype.Progress{Step: 50, TotalSteps: 100}), // 1 h more
		"slow":  run("slow", jobtype.Progress{Step: 1, TotalSteps: 100}),  // 99 h more: its max_runtime first
		"quiet": run("quiet", jobtype.Progress{}),                         // its expected_runtime
	}
	res := map[string]poolstate.Reservation{}
	for id := range jobs {
		res[id] = poolstate.Reservation{GPUs: []int{len(res)}}
	}
	in := &RoundInput{Now: now, Jobs: jobs, Nodes: []poolstate.NodeStatus{{Node: poolstate.Node{Name: "n1", Backend: "local"}, Reservations: res}}}
	want := map[string]time.Time{"half": now.Add(time.Hour), "slow": started.Add(4 * time.Hour), "quiet": started.Add(90 * time.Minute)}
	for _, r := range PlacementNodes(in, 24*time.Hour)[0].Running {
		if !r.ExpectedEnd.Equal(want[r.JobID]) {
			t.Errorf("%s: expected end %s, want %s", r.JobID, r.ExpectedEnd, want[r.JobID])
		}
	}
}
