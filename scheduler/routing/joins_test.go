package routing

import (
	"testing"
	"time"
)

// TestJoinWaits: the local wait comes from the pool's joins (the placement
// replay) when every GPU serves the job and a join is big enough, not from
// GPU-hours over GPUs; otherwise the fluid estimate stands. A spill-over
// adds what the job waited, unless it could start now.
func TestJoinWaits(t *testing.T) {
	withJoins := func(s *Snapshot) {
		p := s.Pools["local"]
		p.GPUHoursAhead = [3]float64{0, 1000, 1000} // fluid: hours deep
		p.Joins[1] = []JoinWait{{GPUs: 1, WaitS: 0}, {GPUs: 2, WaitS: 1800}, {GPUs: 4, WaitS: -1}}
		s.Pools["local"] = p
	}
	waitOn := func(t *testing.T, job Job, mod func(*Snapshot)) float64 {
		t.Helper()
		s := baseSnapshot(t, issueConfig)
		mod(&s)
		return candidate(t, Decide(job, s), "local").EstWaitS
	}
	j := baseJob("eu")
	if w := waitOn(t, j, withJoins); w != 0 {
		t.Errorf("1 GPU with a join of 0: wait %v; want 0 (the fluid estimate would be hours)", w)
	}
	j.GPUs = 2
	if w := waitOn(t, j, withJoins); w != 1800 {
		t.Errorf("2 GPUs: wait %v; want the 2-GPU join's 1800", w)
	}
	j.GPUs = 3 // the smallest join that holds it: 4 GPUs, never
	if w := waitOn(t, j, withJoins); w != -1 {
		t.Errorf("3 GPUs, 4-GPU join never: wait %v; want unknown (-1)", w)
	}
	j.GPUs = 1
	j.GPUModels = []string{"A100"} // not every GPU of an H100 pool: fluid (and no fit)
	s := baseSnapshot(t, issueConfig)
	withJoins(&s)
	if c := candidate(t, Decide(j, s), "local"); c.Feasible {
		t.Errorf("A100 on an H100 pool: %+v; want no fit", c)
	}
	j.GPUModels = nil
	j.GPUMemoryGB = 90 // more than the pool's GPUs have: no fit either way
	if c := candidate(t, Decide(j, s), "local"); c.Feasible {
		t.Errorf("90 GB on 80 GB GPUs: %+v; want no fit", c)
	}
	j.GPUMemoryGB = 0
	j.Priority = 2 // no joins for batch: the fluid estimate
	if w := waitOn(t, j, withJoins); w <= 3600 {
		t.Errorf("batch, no joins: wait %v; want the fluid estimate, hours", w)
	}
	// A spill-over: it waited 2h; a join of 30m makes 2h30m, past max_wait.
	j.Priority, j.GPUs, j.Waited = 1, 2, 2*time.Hour
	s = baseSnapshot(t, issueConfig)
	withJoins(&s)
	d := Decide(j, s)
	if w := candidate(t, d, "local").EstWaitS; w != 9000 || d.Backend == "local" {
		t.Errorf("spill-over after 2h, join 30m: wait %v, backend %s; want 9000 s and a burst", w, d.Backend)
	}
	j.GPUs = 1 // it could start now: it stays
	if d := Decide(j, s); d.Backend != "local" || candidate(t, d, "local").EstWaitS != 0 {
		t.Errorf("spill-over that could start now: %s wait %v; want local, 0", d.Backend, candidate(t, d, "local").EstWaitS)
	}
}
