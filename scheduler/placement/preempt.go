package placement

import (
	"slices"
	"strings"
)

// victim is a running job that may be stopped for the urgent head.
type victim struct {
	ri   int   // index in node.running
	gain int   // feasible GPUs it would free for the head
	held int   // GPUs it holds in all: what stopping it costs
	ends int64 // expected end, ns after now
}

// victimSet is one way to make room on one node.
type victimSet struct {
	node    int
	victims []victim
	lost    int   // GPUs stopped
	minEnds int64 // soonest expected end among the victims; never if none
}

// better reports whether a makes room more cheaply than b: fewer victims,
// then fewer GPUs stopped, then victims further from their end. Equal sets
// keep the one found first (lower node name, then lower job ids).
func (a *victimSet) better(b *victimSet) bool {
	if len(a.victims) != len(b.victims) {
		return len(a.victims) < len(b.victims)
	}
	if a.lost != b.lost {
		return a.lost < b.lost
	}
	return a.minEnds > b.minEnds
}

// preempt tries to make room for urgent head i (k GPUs of shape sh) by
// stopping batch jobs. On success it records the head's reservation, the
// Preemption (none when jobs already stopping make room) and the wait, and
// returns true.
func (p *planner) preempt(i int, sh *shape, k int) bool {
	best := p.cheapestRoom(sh, k, p.pending[i].Priority)
	if best == nil {
		return false
	}
	p.stopFor(i, sh, k, []*victimSet{best})
	return true
}

// cheapestRoom returns the cheapest way (victimSet.better) to make room for
// k GPUs of shape sh on one node by stopping jobs of lower priority than
// prio, or nil when no node can make room.
func (p *planner) cheapestRoom(sh *shape, k, prio int) *victimSet {
	var best *victimSet
	for _, set := range p.rooms(sh, k, prio) {
		if best == nil || set.better(best) {
			best = set
		}
	}
	return best
}

// rooms returns, for each node that can make room for k GPUs of shape sh
// by stopping jobs of lower priority than prio, its cheapest way (roomOn),
// in node order.
func (p *planner) rooms(sh *shape, k, prio int) []*victimSet {
	var out []*victimSet
	for ni := range p.nodes {
		if sh.static[ni] < k {
			continue
		}
		set, ok := p.roomOn(ni, sh, k, prio)
		if !ok {
			continue
		}
		set.node = ni
		out = append(out, &set)
	}
	return out
}

// roomOn returns the cheapest victims on node ni that free, with the
// feasible GPUs already free or held by jobs stopping, k GPUs of shape sh;
// ok is false when the node cannot make room.
func (p *planner) roomOn(ni int, sh *shape, k, prio int) (set victimSet, ok bool) {
	node := &p.nodes[ni]
	gain := make([]int, len(node.running))
	held := make([]int, len(node.running))
	ready := 0 // feasible GPUs free now or held by jobs already stopping
	for r := range node.gpus {
		g := &node.gpus[r]
		if g.free {
			if sh.match[ni][r] {
				ready++
			}
			continue
		}
		ri, ok := node.runIdx[g.holder]
		if !ok {
			continue
		}
		held[ri]++
		if !sh.match[ni][r] {
			continue
		}
		if node.running[ri].Stopping {
			ready++
		} else {
			gain[ri]++
		}
	}
	var vs []victim
	for ri, run := range node.running {
		if gain[ri] > 0 && !run.Stopping && run.Preemptible && run.Priority == PriorityBatch && run.Priority > prio {
			vs = append(vs, victim{ri: ri, gain: gain[ri], held: held[ri], ends: after(p.now, run.EndsAt)})
		}
	}
	return chooseVictims(vs, k-ready)
}

// stopFor carries out sets (one per node: one, or a gang's) for urgent
// head i (k GPUs of shape sh on each node): it reserves the head's GPUs,
// free ones or the victims', records a Preemption per node with victims
// (none when jobs already stopping make room) and the wait.
func (p *planner) stopFor(i int, sh *shape, k int, sets []*victimSet) {
	nodes, ranks := make([]int, len(sets)), make([][]int, len(sets))
	var pre []Preemption
	var all, where []string
	for x, set := range sets {
		ids, rs := p.stopOn(sh, k, set)
		nodes[x], ranks[x] = set.node, rs
		if len(ids) > 0 {
			name := p.nodes[set.node].name
			pre = append(pre, Preemption{ForJobID: p.pending[i].ID, Node: name, Victims: ids, GPUs: p.gpuIndices(set.node, rs)})
			all = append(all, ids...)
			where = append(where, name+" for GPUs "+fmtInts(p.gpuIndices(set.node, rs)))
		}
	}
	p.setGPUHead(i, nodes, ranks, 0)
	if len(pre) == 0 {
		names := make([]string, len(nodes))
		for x, ni := range nodes {
			names[x] = p.nodes[ni].name
		}
		p.wait(i, WaitPreempting, string(WaitPreempting)+": waiting for preempted jobs to stop on "+strings.Join(names, ", "), sh)
		return
	}
	p.plan.Preempt = append(p.plan.Preempt, pre...)
	p.wait(i, WaitPreempting, string(WaitPreempting)+": stopping batch jobs "+strings.Join(all, ", ")+" on "+strings.Join(where, "; "), sh)
}

// stopOn works out set on its node for a head of k GPUs of shape sh: the
// victims' ids, sorted, and the ranks the head takes there (free ones,
// the victims' or those of jobs already stopping). Every GPU of a victim
// frees up once it stops: expected now, for the estimates of the jobs
// behind; none is given out this round, as they are still held.
func (p *planner) stopOn(sh *shape, k int, set *victimSet) (ids []string, ranks []int) {
	ni, node := set.node, &p.nodes[set.node]
	stop := make(map[string]bool, len(set.victims)) // lookups only
	for _, v := range set.victims {
		id := node.running[v.ri].JobID
		stop[id] = true
		ids = append(ids, id)
	}
	slices.Sort(ids)
	cand := make([]bool, len(node.gpus))
	for r := range node.gpus {
		g := &node.gpus[r]
		if !sh.match[ni][r] {
			continue
		}
		ri, ok := node.runIdx[g.holder]
		cand[r] = g.free || stop[g.holder] || (ok && node.running[ri].Stopping)
	}
	ranks = pickGPUs(cand, k)
	for r := range node.gpus {
		if stop[node.gpus[r].holder] {
			node.gpus[r].release, node.gpus[r].expRel = 0, 0
		}
	}
	return ids, ranks
}

// maxEnumerate bounds the victim subsets examined on one node; past it the
// choice is greedy (still the fewest victims, cost ties broken heuristically).
const maxEnumerate = 1 << 14

// chooseVictims returns the cheapest set of vs whose gains add up to need:
// the fewest victims first (exactly), then by victimSet.better. vs is in job
// id order. ok is false when all of vs together are not enough.
func chooseVictims(vs []victim, need int) (set victimSet, ok bool) {
	set.minEnds = never
	if need <= 0 {
		return set, true
	}
	// The fewest victims: the largest gains first.
	byGain := slices.Clone(vs)
	slices.SortStableFunc(byGain, largerGainFirst)
	m, sum := 0, 0
	for m < len(byGain) && sum < need {
		sum += byGain[m].gain
		m++
	}
	if sum < need {
		return set, false
	}
	if binomial(len(vs), m) > maxEnumerate {
		return makeSet(byGain[:m]), true
	}
	return bestOfSize(vs, m, need), true
}

// largerGainFirst orders victims by gain, larger first, then by GPUs held,
// fewer first, then by expected end, later first.
func largerGainFirst(a, b victim) int {
	switch {
	case a.gain != b.gain:
		return b.gain - a.gain
	case a.held != b.held:
		return a.held - b.held
	case a.ends != b.ends:
		if a.ends > b.ends {
			return -1
		}
		return 1
	}
	return 0
}

// bestOfSize returns the best (victimSet.better) of the sets of m of vs
// whose gains add up to need, trying each in lexicographic order.
func bestOfSize(vs []victim, m, need int) victimSet {
	var best victimSet
	found := false
	idx := make([]int, m)
	for x := range idx {
		idx[x] = x
	}
	pick := make([]victim, m)
	for {
		g := 0
		for x, v := range idx {
			pick[x] = vs[v]
			g += vs[v].gain
		}
		if g >= need {
			if s := makeSet(pick); !found || s.better(&best) {
				best, found = s, true
			}
		}
		if !nextCombination(idx, len(vs)) {
			return best
		}
	}
}

// nextCombination advances idx, an increasing choice of indexes below n,
// to the next in lexicographic order; false when idx was the last.
func nextCombination(idx []int, n int) bool {
	m := len(idx)
	x := m - 1
	for x >= 0 && idx[x] == n-m+x {
		x--
	}
	if x < 0 {
		return false
	}
	idx[x]++
	for y := x + 1; y < m; y++ {
		idx[y] = idx[y-1] + 1
	}
	return true
}

// makeSet copies vs into a victimSet with its costs.
func makeSet(vs []victim) victimSet {
	s := victimSet{victims: slices.Clone(vs), minEnds: never}
	for _, v := range vs {
		s.lost += v.held
		s.minEnds = min(s.minEnds, v.ends)
	}
	return s
}

// binomial returns n choose k, saturating well above maxEnumerate.
func binomial(n, k int) int {
	r := 1
	for x := 1; x <= k; x++ {
		r = r * (n - k + x) / x
		if r > maxEnumerate*4 {
			return r
		}
	}
	return r
}
