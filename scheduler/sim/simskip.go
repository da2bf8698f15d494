package sim

import (
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/scheduler/policy"
)

// What a simulation may leave out because it cannot change a decision
// (issue #25: with no cloud backend a backlog grows without bound, and a
// round over it, or a wake of each of its jobs every max_wait, costs the
// whole backlog each time).
//
// A job no cloud backend could take (spillable) has nowhere to spill to:
// a spill-over re-decision can only send it back to the owned pool. It is
// given to the policy with no max_wait, so it is neither woken nor
// re-decided while it waits; the backend it runs on is the same.
//
// When no job of the trace could go to a cloud backend (inert), the pool's
// pressure changes no routing decision (routing chooses between the owned
// pool and a cloud), and a round that cannot start a job on the owned pool
// decides nothing: it is skipped (mayStart).

// spillable reports whether some cloud backend could take job in: its
// site carries every tag of the job and it has an instance type of the
// job's GPU count or more. It is generous (other checks may refuse the
// job there): a job it calls spillable is simulated as before.
func (sm *deployment) spillable(in *Job) bool {
	tags := sm.effective(in)
	for _, b := range sm.clouds {
		if !carriesAll(sm.tags[b.Site], tags) {
			continue
		}
		for _, t := range b.InstanceTypes {
			if t.GPUs >= in.GPUs {
				return true
			}
		}
	}
	return false
}

// countPending counts job i into the pending tallies (d = 1) as it joins
// the queue, or out of them (d = -1) as it leaves.
func (sm *simulation) countPending(i, d int) {
	sj := &sm.jobs[i]
	if sm.pendGPUs == nil {
		sm.pendGPUs = map[int]int{}
	}
	if sm.pendGPUs[sj.in.GPUs] += d; sm.pendGPUs[sj.in.GPUs] == 0 {
		delete(sm.pendGPUs, sj.in.GPUs)
	}
	if sj.job.Spec.Priority == jobspec.PriorityUrgent {
		sm.pendUrgent += d
	}
}

// mayStart reports whether a round now could do anything in an inert
// simulation: a job waits that asks for no more GPUs than are free (or
// for none), an urgent job waits (it may preempt), or a preempted job
// waits to be re-decided. Otherwise placement can start nothing (a job
// takes at least its GPUs, on one node or as a gang of whole nodes, and all
// free GPUs together are too few for any), and
// no job is re-decided: no job has a max_wait, and the pressure the round
// would publish changes no routing decision. A simulation with a job that
// could spill to the cloud always runs the round.
func (sm *simulation) mayStart() bool {
	if !sm.inert || sm.setup.exhaustive || sm.pendUrgent > 0 || sm.redecide {
		return true
	}
	free := sm.setup.Owned - sm.usedGPUs
	for k := range sm.pendGPUs {
		if k <= free {
			return true
		}
	}
	return false
}

// setInert marks each job spillable or not, and the simulation inert when
// none is; it numbers each job's shape (GPU count and model) for
// roundPending.
func (sm *simulation) setInert() {
	sm.inert = true
	type shape struct {
		gpus  int
		model string
	}
	shapes := map[shape]int{}
	for i := range sm.jobs {
		sj := &sm.jobs[i]
		if sj.spill = sm.spillable(sj.in); sj.spill {
			sm.inert = false
		}
		sh := shape{sj.in.GPUs, sj.in.GPUModel}
		if _, ok := shapes[sh]; !ok {
			shapes[sh] = len(shapes) + 1 // 0: none (placeClass{})
		}
		sj.shape = shapes[sh]
	}
	sm.shapes = len(shapes)
}

// roundPending appends the ids of the pending jobs a round must see to
// out, in queue order, their run time estimates refreshed (refresh). A
// round sees every pending job, except in an inert simulation with no job
// that may preempt (no urgent job waiting, no preempted job to re-decide)
// where it sees only those that could change what placement decides (the
// rest would wait, and what they would add to the pool's pressure and
// joins changes no routing decision, mayStart). With F GPUs free in all:
//
//   - A job of k ≤ F GPUs may start. Placement decides a simulated GPU job
//     by its shape (GPU count and model: its spec sets no GPU memory, and
//     a GPU job takes no CPU slot) and its estimate, and a longer estimate
//     never helps (backfill past the head's reservation needs a job to end
//     before it). So once a job cannot start, no later job of its shape
//     with an estimate as long or longer can (GPUs are only taken in a
//     round); and at most F/k jobs of the shape start. A job with F/k+1
//     earlier jobs of its shape whose estimates are no longer than its own
//     cannot start (one of them did not): it is not shown. Held jobs are
//     set aside (they wait for their routing, and start nothing).
//   - A job of more than F GPUs cannot start; the first of each shape may
//     be the head, the first job that cannot start, whose reservation
//     limits the jobs after it. The others are not shown.
//   - A job of no GPUs is always shown.
//
// It still reads every pending job, but only to tally it: what a round
// costs over a long backlog is this loop, not placement's replay of it.
func (sm *simulation) roundPending(out []string) []string {
	if !sm.inert || sm.setup.exhaustive || sm.pendUrgent > 0 || sm.redecide {
		for _, i := range sm.pending {
			sj := &sm.jobs[i]
			sm.refresh(sj)
			out = append(out, sj.in.ID)
		}
		return out
	}
	free := sm.setup.Owned - sm.usedGPUs
	if len(sm.shortest) != sm.shapes+1 {
		sm.shortest = make([]shortest, sm.shapes+1)
	}
	for s := range sm.shortest {
		sm.shortest[s].reset()
	}
	for _, i := range sm.pending {
		sj := &sm.jobs[i]
		k := sj.in.GPUs
		switch {
		case k == 0:
			sm.refresh(sj)
		case sj.job.Held != "":
			continue
		case k > free:
			// More GPUs than are free: only the first may be the head.
			if sh := &sm.shortest[sj.shape]; !sh.add(0, 1) {
				continue
			}
			sm.refresh(sj)
		default:
			sm.refresh(sj)
			est := int64(policy.Estimate(&sj.job, simMaxRuntime))
			if !sm.shortest[sj.shape].add(est, free/k+1) {
				continue
			}
		}
		out = append(out, sj.in.ID)
	}
	return out
}

// shortest holds the shortest estimates of the jobs of one shape a round
// has been shown, at most limit of them: a max-heap.
type shortest struct{ h []int64 }

func (s *shortest) reset() { s.h = s.h[:0] }

// add reports whether a job of estimate est, after the jobs added so far,
// may start: fewer than limit of them have an estimate no longer than
// est. It keeps est among the shortest when it may.
func (s *shortest) add(est int64, limit int) bool {
	h := s.h
	if len(h) >= limit {
		if h[0] <= est {
			return false
		}
		// est replaces the longest kept: sift it down from the root.
		h[0] = est
		for i := 0; ; {
			c := 2*i + 1
			if c >= len(h) {
				break
			}
			if c+1 < len(h) && h[c+1] > h[c] {
				c++
			}
			if h[i] >= h[c] {
				break
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
		return true
	}
	h = append(h, est)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] >= h[i] {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	s.h = h
	return true
}
