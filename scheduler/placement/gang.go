package placement

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// gangs is the planner seen through its jobs that span nodes (Request.Nodes
// > 1): the same state, the methods that place, shadow, preempt for and
// replay a gang kept apart from the single-node ones.
type gangs struct{ *planner }

// considerGang places pending job i, a gang of Request.Nodes nodes with
// Request.GPUs GPUs on each, all or nothing, or records why it waits. It
// follows considerGPU's rules with "a node that fits" read as "that many
// distinct nodes that fit at once": the head's reservation covers every
// node of the gang, and a job that backfills past the shadow time leaves
// all of it alone.
func (p gangs) considerGang(i int) {
	j := &p.pending[i]
	k, n := j.Request.GPUs, j.Request.nodes()
	sh := p.shapeOf(j.Request)
	if sh.nodesWith(k) < n {
		p.wait(i, WaitNeverFits, p.neverFitsGang(sh, k, n), nil)
		return
	}
	p.refresh(sh)
	h := &p.gpuHead
	end := endOf(0, j.Estimate)
	restricted := h.set && end > h.at
	if nodes := p.gangNodes(sh, k, n, restricted); nodes != nil {
		p.assignGang(i, sh, nodes, k, end, restricted)
		return
	}
	if h.set {
		if p.gangNodes(sh, k, n, false) != nil {
			p.wait(i, WaitBehind, h.behind, sh)
		} else {
			p.wait(i, WaitNoRoom, p.noRoomGang(sh, k, n), sh)
		}
		return
	}
	if j.Priority == PriorityUrgent && p.preemptGang(i, sh, k, n) {
		return
	}
	at, nodes, ranks := p.shadowGang(sh, k, n)
	if at == never {
		p.wait(i, WaitNoRoom, p.noRoomGang(sh, k, n)+"; start unknown: the GPUs it needs are held by jobs with no estimate", sh)
		return
	}
	p.setGPUHead(i, nodes, ranks, at)
	p.wait(i, WaitNoRoom, p.noRoomGang(sh, k, n)+"; first in line for "+p.gangText(nodes, ranks), sh)
}

// nodesWith counts the nodes with at least k statically feasible GPUs.
func (sh *shape) nodesWith(k int) int {
	c := 0
	for _, s := range sh.static {
		if s >= k {
			c++
		}
	}
	return c
}

// gangNodes returns the n nodes a gang of k GPUs per node goes to now,
// sorted by name, or nil when fewer than n have k usable GPUs (restricted:
// outside the head's reservation): the tightest, as bestNodeGPU ranks a
// single node (fewest usable, then fewest free, then name).
func (p gangs) gangNodes(sh *shape, k, n int, restricted bool) []int {
	var cands []int
	for ni := range p.nodes {
		if p.usable(sh, ni, restricted) >= k {
			cands = append(cands, ni)
		}
	}
	if len(cands) < n {
		return nil
	}
	slices.SortStableFunc(cands, func(a, b int) int {
		if c := cmp.Compare(p.usable(sh, a, restricted), p.usable(sh, b, restricted)); c != 0 {
			return c
		}
		return cmp.Compare(p.nodes[a].freeGPUs, p.nodes[b].freeGPUs)
	})
	cands = cands[:n]
	slices.Sort(cands)
	return cands
}

// usable is how many GPUs of shape sh node ni can give now (refresh'd).
func (p gangs) usable(sh *shape, ni int, restricted bool) int {
	if restricted {
		return sh.avail[ni]
	}
	return sh.availAll[ni]
}

// assignGang starts gang i on k GPUs of each of nodes now.
func (p gangs) assignGang(i int, sh *shape, nodes []int, k int, end int64, restricted bool) {
	a := Assignment{JobID: p.pending[i].ID, Gang: make([]Member, len(nodes))}
	for x, ni := range nodes {
		ranks := p.takeGPUs(i, sh, ni, k, end, restricted)
		a.Gang[x] = Member{Node: p.nodes[ni].name, GPUs: p.gpuIndices(ni, ranks)}
	}
	a.Node, a.GPUs = a.Gang[0].Node, a.Gang[0].GPUs
	p.plan.Assign = append(p.plan.Assign, a)
}

// shadowGang is shadow for a gang: the earliest time at which n distinct
// nodes each have k feasible GPUs free, assuming every job ends at its
// estimate; the nodes (those whose k GPUs free first, the tightest on a
// tie, then the name) sorted by name, and the ranks it would take on each.
func (p gangs) shadowGang(sh *shape, k, n int) (at int64, nodes []int, ranks [][]int) {
	type ready struct {
		ni    int
		t     int64
		count int
	}
	var rs []ready
	var times []int64
	for ni := range p.nodes {
		var t int64
		var c int
		if t, c, times = p.readyOn(sh, ni, k, times); t != never {
			rs = append(rs, ready{ni, t, c})
		}
	}
	if len(rs) < n {
		return never, nil, nil
	}
	slices.SortStableFunc(rs, func(a, b ready) int {
		return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.count, b.count), cmp.Compare(a.ni, b.ni))
	})
	rs = rs[:n]
	at = rs[n-1].t
	slices.SortFunc(rs, func(a, b ready) int { return cmp.Compare(a.ni, b.ni) })
	for _, r := range rs {
		gs := p.nodes[r.ni].gpus
		cand := make([]bool, len(gs))
		for x := range gs {
			cand[x] = sh.match[r.ni][x] && gs[x].release <= at
		}
		nodes, ranks = append(nodes, r.ni), append(ranks, pickGPUs(cand, k))
	}
	return at, nodes, ranks
}

// preemptGang is preempt for an urgent gang head: it makes room on n
// distinct nodes at once or on none. Each node's cheapest way to make room
// is found as for one node (roomOn); the n cheapest of them are taken
// (victimSet.better; nodes with room already cost nothing). Fewer than n
// nodes able to make room: nothing is stopped and it returns false.
func (p gangs) preemptGang(i int, sh *shape, k, n int) bool {
	sets := p.rooms(sh, k, p.pending[i].Priority)
	if len(sets) < n {
		return false
	}
	slices.SortStableFunc(sets, func(a, b *victimSet) int {
		switch {
		case a.better(b):
			return -1
		case b.better(a):
			return 1
		}
		return 0
	})
	sets = sets[:n]
	slices.SortFunc(sets, func(a, b *victimSet) int { return cmp.Compare(a.node, b.node) })
	p.stopFor(i, sh, k, sets)
	return true
}

// replayGang places waiting gang j (k GPUs on each of n nodes) in the
// estimate replay and returns its start: when n distinct nodes have k of
// its GPUs free; it holds them for its expected run time.
func (p gangs) replayGang(gs []gpuSim, sh *shape, k, n int, j *Job) int64 {
	type ready struct {
		ni int
		t  int64
	}
	var rs []ready
	for ni := range gs {
		if sh.static[ni] < k {
			continue
		}
		if t := gs[ni].kth(sh, ni, k); t != never {
			rs = append(rs, ready{ni, t})
		}
	}
	if len(rs) < n {
		return never
	}
	slices.SortStableFunc(rs, func(a, b ready) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.ni, b.ni)) })
	at := rs[n-1].t
	for _, r := range rs[:n] {
		s := &gs[r.ni]
		s.taken = s.taken[:0]
		for _, x := range s.order {
			if len(s.taken) == k {
				break
			}
			if sh.match[r.ni][x] {
				s.taken = append(s.taken, x)
			}
		}
		s.set(s.taken, endOf(at, j.expected()))
	}
	return at
}

// gangJoins records, for priority prio, when a new gang of 2, 4, 8, … whole
// nodes of the largest node's GPU count (up to every node that has that
// many, and that number) would start in the replay as it stands: when its
// Nodes-th node is free. Nothing when fewer than two nodes have them.
func (p gangs) gangJoins(gs []gpuSim, sh *shape, prio int) {
	k := p.maxGPUs
	var ts []int64
	for ni := range gs {
		if sh.static[ni] >= k {
			ts = append(ts, gs[ni].kth(sh, ni, k))
		}
	}
	if len(ts) < 2 {
		return
	}
	slices.Sort(ts)
	for n := 2; ; n *= 2 {
		n = min(n, len(ts))
		jn := Join{Priority: prio, GPUs: k, Nodes: n}
		if at := ts[n-1]; at != never {
			jn.At = p.now.Add(time.Duration(at))
		}
		p.plan.Joins = append(p.plan.Joins, jn)
		if n == len(ts) {
			return
		}
	}
}

// neverFitsGang explains why no n nodes, even empty, hold k GPUs of shape
// sh each.
func (p gangs) neverFitsGang(sh *shape, k, n int) string {
	return string(WaitNeverFits) + ": needs " + strconv.Itoa(n) + " nodes × " + describe(sh, k) +
		"; " + strconv.Itoa(sh.nodesWith(k)) + " of " + plural(len(p.nodes), "node") + " have that many such healthy GPUs"
}

// noRoomGang is the "no room" reason for a gang: what it needs and how
// many nodes have that many of its GPUs free now.
func (p gangs) noRoomGang(sh *shape, k, n int) string {
	free := 0
	for ni := range p.nodes {
		if sh.availAll[ni] >= k {
			free++
		}
	}
	return string(WaitNoRoom) + ": needs " + strconv.Itoa(n) + " nodes × " + describe(sh, k) + " at once; " +
		strconv.Itoa(free) + " have that many free now"
}

// gangText writes a gang's GPUs: "GPUs [0 1] on a, [0 1] on b".
func (p gangs) gangText(nodes []int, ranks [][]int) string {
	parts := make([]string, len(nodes))
	for x, ni := range nodes {
		parts[x] = fmtInts(p.gpuIndices(ni, ranks[x])) + " on " + p.nodes[ni].name
	}
	return "GPUs " + strings.Join(parts, ", ")
}
