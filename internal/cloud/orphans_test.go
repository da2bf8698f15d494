package cloud

import (
	"testing"
	"time"
)

// TestOrphans: what the reconciler terminates, failing closed. The labels'
// parsing (a bad attempt tag naming no attempt) is tested with each
// backend (backends/aws: TestOrphans).
func TestOrphans(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	grace := 10 * time.Minute
	old := now.Add(-time.Hour)
	live := map[string]int{"job-a": 2}
	inst := func(id, job string, attempt int, launched time.Time, mod ...func(*Instance)) Instance {
		i := Instance{ID: id, JobID: job, Attempt: attempt, Managed: true, State: StateRunning, LaunchTime: launched}
		for _, m := range mod {
			m(&i)
		}
		return i
	}
	cases := []struct {
		name   string
		inst   Instance
		orphan bool
	}{
		{"live attempt", inst("i-1", "job-a", 2, old), false},
		{"stale attempt of a live job", inst("i-2", "job-a", 1, old), true},
		{"job without a live attempt", inst("i-3", "job-z", 1, old), true},
		{"exactly grace old", inst("i-4", "job-z", 1, now.Add(-grace)), false},
		{"just over grace", inst("i-5", "job-z", 1, now.Add(-grace-time.Second)), true},
		{"no attempt", inst("i-6", "job-a", 0, old), true},
		{"no job", inst("i-7", "", 2, old), true},
		{"unknown launch time", inst("i-8", "job-z", 1, time.Time{}), true},
		{"terminated", inst("i-9", "job-z", 1, old, func(i *Instance) { i.State = StateTerminated }), false},
		{"shutting down", inst("i-10", "job-z", 1, old, func(i *Instance) { i.State = StateShuttingDown }), false},
		{"stopped counts", inst("i-11", "job-z", 1, old, func(i *Instance) { i.State = StateStopped }), true},
		{"not managed", inst("i-12", "job-z", 1, old, func(i *Instance) { i.Managed = false }), false},
	}
	for _, c := range cases {
		got := Orphans([]Instance{c.inst}, live, now, grace)
		if (len(got) == 1) != c.orphan {
			t.Errorf("%s: orphan = %v, want %v", c.name, len(got) == 1, c.orphan)
		}
	}
}
