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

// TestGangJoinWaits: a job of several nodes reads the joins of gangs of as
// many whole nodes or more, a job of one node never does, and a gang with
// no such join falls back on GPU-hours over GPUs.
func TestGangJoinWaits(t *testing.T) {
	joins := func(s *Snapshot) {
		p := s.Pools["local"]
		p.GPUHoursAhead = [3]float64{0, 1000, 1000} // fluid: hours deep
		p.Joins[1] = []JoinWait{{GPUs: 8, WaitS: 60}, {GPUs: 8, Nodes: 2, WaitS: 1200}}
		s.Pools["local"] = p
	}
	waitOf := func(gpus, nodes int) float64 {
		t.Helper()
		s := baseSnapshot(t, issueConfig)
		joins(&s)
		j := baseJob("eu")
		j.GPUs, j.Nodes = gpus, nodes
		return candidate(t, Decide(j, s), "local").EstWaitS
	}
	if w := waitOf(8, 0); w != 60 {
		t.Errorf("8 GPUs on one node: wait %v; want the one-node join's 60", w)
	}
	if w := waitOf(4, 2); w != 1200 {
		t.Errorf("2 nodes × 4: wait %v; want the 2-node join's 1200", w)
	}
	if w := waitOf(8, 2); w != 1200 {
		t.Errorf("2 nodes × 8: wait %v; want the 2-node join's 1200", w)
	}
	// Three nodes: no join that large; the pool has two nodes, so it does
	// not fit at all (no wait to read).
	if w := waitOf(8, 3); w == 1200 || w == 60 {
		t.Errorf("3 nodes: wait %v read from a smaller join", w)
	}
}
