package sim

import "github.com/lathe-ml/lathe/internal/jobspec"

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
func (sm *simulation) spillable(in *Job) bool {
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
// waits to be re-decided. Otherwise placement can start nothing (a job's
// GPUs are on one node, all free GPUs together are too few for any), and
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

// placeClass is what placement decides a simulated waiting GPU job by
// when no job may preempt: its shape (GPU count and model, numbered by
// setInert) and its run time estimate (its spec sets no GPU memory, and
// a GPU job takes no CPU slot).
type placeClass struct {
	shape int
	est   int64
}

// roundPending appends the ids of the pending jobs a round must see to
// out, in queue order, their run time estimates refreshed (refresh). A
// round sees every pending job, except in an inert simulation with no job
// that may preempt (no urgent job waiting, no preempted job to re-decide)
// where it sees only those that could change what placement decides (the
// rest would wait, and what they would add to the pool's pressure and
// joins changes no routing decision, mayStart):
//
//   - F GPUs are free in all: a job of k ≤ F GPUs may start. Jobs of one
//     class (k, model, estimate) are decided alike: once one cannot
//     start, no later one can (GPUs are only taken in a round, and the
//     head's reservation limits them alike), and at most F/k of them
//     start. The first F/k+1 of each class are seen, held jobs aside
//     (they wait for their routing, and start nothing).
//   - A job of more than F GPUs cannot start; the first of them (of each
//     count and model) may be the head, the first job that cannot start,
//     whose reservation limits the jobs after it.
//   - A job of no GPUs is always seen.
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
	sm.tally.reset(sm.shapes)
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
			if !sm.tally.add(placeClass{shape: sj.shape}, 1) {
				continue
			}
			sm.refresh(sj)
		default:
			sm.refresh(sj)
			if !sm.tally.add(placeClass{shape: sj.shape, est: int64(sj.job.Spec.MaxRuntime)}, free/k+1) {
				continue
			}
		}
		out = append(out, sj.in.ID)
	}
	return out
}

// classTally counts the jobs of each placeClass a round has seen. Most
// jobs of a shape share one estimate (the learned mean of their GPU
// count): the first estimate of each shape is counted in a slice, the
// others in a map.
type classTally struct {
	first []struct {
		est int64
		n   int
	}
	rest map[placeClass]int
}

// reset empties the tally for shapes numbered 1 to n.
func (t *classTally) reset(n int) {
	if len(t.first) != n+1 {
		t.first = make([]struct {
			est int64
			n   int
		}, n+1)
	}
	clear(t.first)
	clear(t.rest)
}

// add counts one more job of class c and reports whether it is among the
// first limit of c.
func (t *classTally) add(c placeClass, limit int) bool {
	f := &t.first[c.shape]
	if f.n == 0 || f.est == c.est {
		if f.n >= limit {
			return false
		}
		f.est = c.est
		f.n++
		return true
	}
	if t.rest == nil {
		t.rest = map[placeClass]int{}
	}
	if t.rest[c] >= limit {
		return false
	}
	t.rest[c]++
	return true
}
