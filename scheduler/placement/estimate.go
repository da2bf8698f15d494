package placement

import (
	"cmp"
	"slices"
	"sort"
	"time"
)

// gpuSim is one node's GPUs during the estimate replay.
type gpuSim struct {
	rel    []int64 // rank → expected free, ns after now; never if unhealthy
	order  []int   // ranks by (rel, rank)
	buf    []int   // set's scratch: the next order
	moved  []bool  // set's scratch: rank → given a new rel
	taken  []int   // replayGPU's scratch: the ranks a job takes
	sorted []int   // set's scratch: the moved ranks in rank order
}

// estimate fills in the estimated start of every waiting job. It replays the
// waiting jobs in queue order over the expected release times of every GPU
// and CPU slot (running jobs at their estimates, jobs assigned this round at
// now + their estimate): the head starts on its reservation, every other job
// at the earliest time some node has what it needs after the jobs replayed
// before it took theirs, and then holds it for its own estimate. It is a
// best effort, not a promise: jobs end early or late, and a later, shorter
// job may backfill ahead. Costs O(nodes) per waiting job, O(GPUs per node)
// where a node's GPUs are not all of the job's model.
func (p *planner) estimate() {
	var gs []gpuSim
	var cs []cpuSim
	prio := PriorityUrgent // joins are recorded for every priority below this
	for i := range p.out {
		o := &p.out[i]
		if o.placed {
			continue
		}
		j := &p.pending[i]
		for ; prio < j.Priority && prio <= PriorityBatch; prio++ {
			gs = p.joins(gs, prio)
		}
		switch {
		case o.shape != nil:
			if gs == nil {
				gs = p.newGPUSims()
			}
			o.start = p.replayGPU(gs, i, o.shape, j.Request.GPUs, j)
		case o.cpu:
			if cs == nil {
				cs = make([]cpuSim, len(p.nodes))
				for ni := range p.nodes {
					cs[ni] = newCPUSim(&p.nodes[ni])
				}
			}
			o.start = p.replayCPU(cs, i, max(j.Request.CPUSlots, 1), j)
		}
	}
	for ; prio <= PriorityBatch; prio++ {
		gs = p.joins(gs, prio)
	}
}

// joins records, for priority prio, when a new job of 1, 2, 4, … GPUs (up
// to the largest node's count) would start in the replay as it stands:
// after every waiting job replayed so far, which are those of priority
// prio or more urgent. It returns gs, made when it was nil.
func (p *planner) joins(gs []gpuSim, prio int) []gpuSim {
	if p.maxGPUs == 0 {
		return gs
	}
	if gs == nil {
		gs = p.newGPUSims()
	}
	sh := p.shapeOf(Request{})
	for k := 1; ; k *= 2 {
		k = min(k, p.maxGPUs)
		at := never
		for ni := range gs {
			if sh.static[ni] >= k {
				at = min(at, gs[ni].kth(sh, ni, k))
			}
		}
		jn := Join{Priority: prio, GPUs: k}
		if at != never {
			jn.At = p.now.Add(time.Duration(at))
		}
		p.plan.Joins = append(p.plan.Joins, jn)
		if k == p.maxGPUs {
			gangs{p}.gangJoins(gs, sh, prio)
			return gs
		}
	}
}

func (p *planner) newGPUSims() []gpuSim {
	gs := make([]gpuSim, len(p.nodes))
	for ni := range p.nodes {
		n := &p.nodes[ni]
		s := gpuSim{rel: make([]int64, len(n.gpus)), order: make([]int, len(n.gpus))}
		for r := range n.gpus {
			s.rel[r], s.order[r] = n.gpus[r].expRel, r
		}
		// From scratch: O(n log n), not the insertion sort's n² (a node of
		// 256 GPUs in a simulation).
		slices.SortFunc(s.order, func(a, b int) int {
			if c := cmp.Compare(s.rel[a], s.rel[b]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		gs[ni] = s
	}
	return gs
}

// set gives ranks (distinct) the release time end and restores order: the
// other ranks keep theirs, and ranks, in rank order, go in where (end,
// rank) sorts. It costs a binary search per rank and one copy of the
// order, where re-sorting cost comparisons of every rank with every moved
// one (a node of 256 GPUs in a simulation, replayed once per waiting job
// of a long queue every round).
func (s *gpuSim) set(ranks []int, end int64) {
	if s.moved == nil {
		s.moved, s.buf = make([]bool, len(s.rel)), make([]int, 0, len(s.rel))
	}
	for _, r := range ranks {
		s.rel[r], s.moved[r] = end, true
	}
	rest, found := s.order[:0], 0 // the unmoved ranks, still in order (filtered in place)
	for x, r := range s.order {
		if found == len(ranks) {
			// The rest is unmoved (a job takes the first GPUs in order).
			rest = append(rest, s.order[x:]...)
			break
		}
		if s.moved[r] {
			found++
		} else {
			rest = append(rest, r)
		}
	}
	in := append(s.sorted[:0], ranks...)
	slices.Sort(in)
	s.sorted = in
	out, from := s.buf[:0], 0
	for _, r := range in {
		s.moved[r] = false
		at := from + sort.Search(len(rest)-from, func(x int) bool { return !s.less(rest[from+x], r) })
		out = append(append(out, rest[from:at]...), r)
		from = at
	}
	out = append(out, rest[from:]...)
	s.order, s.buf = out, s.order[:0]
}

func (s *gpuSim) less(a, b int) bool {
	if c := cmp.Compare(s.rel[a], s.rel[b]); c != 0 {
		return c < 0
	}
	return a < b
}

// kth returns when k GPUs of shape sh are free on node ni in the replay.
func (s *gpuSim) kth(sh *shape, ni, k int) int64 {
	if sh.all[ni] {
		// Every healthy GPU is feasible and unhealthy ones sort last.
		return s.rel[s.order[k-1]]
	}
	n := 0
	for _, r := range s.order {
		if sh.match[ni][r] {
			if n++; n == k {
				return s.rel[r]
			}
		}
	}
	return never
}

// replayGPU places waiting job i in the replay and returns its start.
func (p *planner) replayGPU(gs []gpuSim, i int, sh *shape, k int, j *Job) int64 {
	if h := &p.gpuHead; h.set && h.job == i {
		// It starts on its reservation: when the GPUs reserved, on every
		// node of a gang, are expected free (no later than the shadow
		// time, which counts bounds).
		at := int64(0)
		for x, ni := range h.nodes {
			for _, r := range h.ranks[x] {
				at = max(at, gs[ni].rel[r])
			}
		}
		at = min(at, h.at)
		for x, ni := range h.nodes {
			gs[ni].set(h.ranks[x], endOf(at, j.expected()))
		}
		return at
	}
	if n := j.Request.nodes(); n > 1 {
		return gangs{p}.replayGang(gs, sh, k, n, j)
	}
	at, best := never, -1
	for ni := range gs {
		if sh.static[ni] < k {
			continue
		}
		if t := gs[ni].kth(sh, ni, k); t < at {
			at, best = t, ni
		}
	}
	if best < 0 {
		return never
	}
	s := &gs[best]
	s.taken = s.taken[:0]
	for _, r := range s.order {
		if len(s.taken) == k {
			break
		}
		if sh.match[best][r] {
			s.taken = append(s.taken, r)
		}
	}
	s.set(s.taken, endOf(at, j.expected()))
	return at
}

// replayCPU places waiting CPU-only job i (c slots) in the replay and
// returns its start.
func (p *planner) replayCPU(cs []cpuSim, i, c int, j *Job) int64 {
	at, best := never, -1
	if h := &p.cpuHead; h.set && h.job == i {
		at, best = h.at, h.node
	} else {
		for ni := range cs {
			if p.nodes[ni].cpuTotal < c {
				continue
			}
			if t := slotsBy(0, cs[ni].rel, c); t < at {
				at, best = t, ni
			}
		}
	}
	if best < 0 || at == never {
		return never
	}
	s := &cs[best]
	s.rel = addSlots(takeSlots(s.rel, c), endOf(at, j.Estimate), c)
	return at
}
