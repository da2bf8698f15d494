package placement

import (
	"time"
)

// Place decides one round: which pending jobs start now and where, which
// wait and why, and at most one preemption. It is a pure function of s: it
// reads no clock, does no I/O, does not modify s, and returns the same Plan
// for the same Snapshot whatever order s lists nodes, GPUs or running jobs
// in (given unique node names and GPU indices). See the package doc for the
// rules.
func Place(s Snapshot) Plan {
	p := &planner{
		now:     s.Now,
		pending: s.Pending,
		nodes:   indexNodes(s),
		shapes:  make(map[shapeKey]*shape),
		out:     make([]outcome, len(s.Pending)),
	}
	for _, n := range p.nodes {
		p.maxGPUs = max(p.maxGPUs, len(n.gpus))
		p.totalGPUs += len(n.gpus)
		p.maxCPU = max(p.maxCPU, n.cpuTotal)
	}
	p.gpuHead.job, p.cpuHead.job = -1, -1
	p.cpuMaxDirty = true
	for i := range p.pending {
		switch r := p.pending[i].Request; {
		case r.GPUs < 0:
			p.wait(i, WaitNeverFits, "needs a negative number of GPUs", nil)
		case r.GPUs == 0:
			p.considerCPU(i)
		case r.Nodes > 1:
			gangs{p}.considerGang(i)
		default:
			p.considerGPU(i)
		}
	}
	p.estimate()
	return p.finish()
}

// planner is one round's working state.
type planner struct {
	now       time.Time
	pending   []Job
	nodes     []nodeState // sorted by name
	maxGPUs   int         // most GPUs on one node
	totalGPUs int
	maxCPU    int // most CPU slots on one node

	gen    int // moves whenever a GPU is assigned or the GPU head is set
	shapes map[shapeKey]*shape

	gpuHead gpuHead
	cpuHead cpuHead

	cpuMax      int // most free CPU slots on one node
	cpuMaxDirty bool
	cpuReasons  map[int]string // slots → "cpu slots full" reason, reset on each CPU placement

	out  []outcome // per pending job
	plan Plan
}

// outcome is what became of one pending job.
type outcome struct {
	placed bool
	code   WaitCode
	reason string
	shape  *shape // GPU job to estimate a start for; nil for none
	cpu    bool   // CPU-only job to estimate a start for
	start  int64  // estimated start, ns after now; never: unknown
}

// gpuHead is the first GPU job that could not start, and what it holds:
// GPUs on one node, or on each node of a gang.
type gpuHead struct {
	set    bool
	job    int      // pending index
	nodes  []int    // the nodes it keeps GPUs on
	ranks  [][]int  // per entry of nodes: the ranks kept there
	kept   [][]bool // node → rank → kept for the head; nil on nodes it keeps nothing on
	at     int64    // shadow time
	behind string   // reason for the jobs it blocks
}

// keptOn is the head's kept ranks on node ni (rank → kept); nil when it
// keeps none there or there is no head.
func (h *gpuHead) keptOn(ni int) []bool {
	if !h.set {
		return nil
	}
	return h.kept[ni]
}

// considerGPU places pending job i, which needs GPUs, or records why it waits.
func (p *planner) considerGPU(i int) {
	j := &p.pending[i]
	k := j.Request.GPUs
	sh := p.shapeOf(j.Request)
	if k > sh.maxStatic {
		p.wait(i, WaitNeverFits, p.neverFitsGPU(sh, k), nil)
		return
	}
	p.refresh(sh)
	h := &p.gpuHead
	end := endOf(0, j.Estimate)
	restricted := h.set && end > h.at
	usable := sh.maxAll
	if restricted {
		usable = sh.maxAvail
	}
	if usable >= k {
		ni := p.bestNodeGPU(sh, k, restricted)
		ranks := p.takeGPUs(i, sh, ni, k, end, restricted)
		p.plan.Assign = append(p.plan.Assign, Assignment{JobID: j.ID, Node: p.nodes[ni].name, GPUs: p.gpuIndices(ni, ranks)})
		return
	}
	if h.set {
		if sh.maxAll >= k {
			p.wait(i, WaitBehind, h.behind, sh)
		} else {
			p.wait(i, WaitNoRoom, p.noRoomGPU(sh, k), sh)
		}
		return
	}
	// i is the first GPU job that cannot start: the head.
	if j.Priority == PriorityUrgent && p.preempt(i, sh, k) {
		return
	}
	at, ni, ranks := p.shadow(sh, k)
	if at == never {
		// Enough GPUs exist, but some it needs are held by jobs with no
		// estimate: no shadow time, so it reserves nothing and blocks nothing.
		p.wait(i, WaitNoRoom, p.noRoomGPU(sh, k)+"; start unknown: the GPUs it needs are held by jobs with no estimate", sh)
		return
	}
	p.setGPUHead(i, []int{ni}, [][]int{ranks}, at)
	p.wait(i, WaitNoRoom, p.noRoomGPU(sh, k)+"; first in line for GPUs "+fmtInts(p.gpuIndices(ni, ranks))+" on "+p.nodes[ni].name, sh)
}

// takeGPUs gives job i k GPUs of shape sh on node ni now, ones that leave
// the head's reservation alone when restricted, marks it placed and
// returns their ranks. The caller records the Assignment.
func (p *planner) takeGPUs(i int, sh *shape, ni, k int, end int64, restricted bool) []int {
	node := &p.nodes[ni]
	var kept []bool
	if restricted {
		kept = p.gpuHead.keptOn(ni)
	}
	cand := make([]bool, len(node.gpus))
	for r := range node.gpus {
		cand[r] = sh.match[ni][r] && node.gpus[r].free && (kept == nil || !kept[r])
	}
	ranks := pickGPUs(cand, k)
	for _, r := range ranks {
		g := &node.gpus[r]
		g.free, g.release, g.holder = false, end, p.pending[i].ID
		g.expRel = min(endOf(0, p.pending[i].expected()), end)
	}
	node.freeGPUs -= k
	p.gen++
	p.out[i].placed = true
	return ranks
}

// shadow returns the head's shadow time: the earliest time at which some
// node has k feasible GPUs free, assuming every job ends at its estimate,
// and the ranks the head would take there. Ties go to the node with the
// fewest feasible GPUs free by then (tightest), then the name. It returns
// never when no node ever has them.
func (p *planner) shadow(sh *shape, k int) (at int64, node int, ranks []int) {
	at, node = never, -1
	bestReady := 0
	var times []int64
	for ni := range p.nodes {
		var t int64
		var ready int
		if t, ready, times = p.readyOn(sh, ni, k, times); t == never {
			continue
		}
		if t < at || (t == at && ready < bestReady) {
			at, node, bestReady = t, ni, ready
		}
	}
	if node < 0 {
		return never, -1, nil
	}
	gs := p.nodes[node].gpus
	cand := make([]bool, len(gs))
	for r := range gs {
		cand[r] = sh.match[node][r] && gs[r].release <= at
	}
	return at, node, pickGPUs(cand, k)
}

// readyOn returns when node ni has k GPUs of shape sh free, assuming every
// job ends at its estimate (never when it never has), and how many such
// GPUs are free by then. times is scratch space, returned for reuse.
func (p *planner) readyOn(sh *shape, ni, k int, times []int64) (t int64, ready int, _ []int64) {
	if sh.static[ni] < k {
		return never, 0, times
	}
	times = times[:0]
	for r, g := range p.nodes[ni].gpus {
		if sh.match[ni][r] {
			times = append(times, g.release)
		}
	}
	t = kthSmallest(times, k)
	if t == never {
		return never, 0, times
	}
	for _, x := range times {
		if x <= t {
			ready++
		}
	}
	return t, ready, times
}

// setGPUHead records job i as the head, holding ranks[x] on node
// nodes[x] from at: one node, or every node of a gang.
func (p *planner) setGPUHead(i int, nodes []int, ranks [][]int, at int64) {
	h := &p.gpuHead
	h.set, h.job, h.nodes, h.ranks, h.at = true, i, nodes, ranks, at
	h.kept = make([][]bool, len(p.nodes))
	for x, ni := range nodes {
		h.kept[ni] = make([]bool, len(p.nodes[ni].gpus))
		for _, r := range ranks[x] {
			h.kept[ni][r] = true
		}
		p.plan.Reserved = append(p.plan.Reserved, Reservation{
			JobID: p.pending[i].ID, Node: p.nodes[ni].name, GPUs: p.gpuIndices(ni, ranks[x]),
			At: p.now.Add(time.Duration(at)),
		})
	}
	h.behind = string(WaitBehind) + ": job " + p.pending[i].ID + " (backfill would delay it)"
	p.gen++
}

// wait records that job i waits. est is the shape to estimate its start
// with; nil for no estimate.
func (p *planner) wait(i int, code WaitCode, reason string, est *shape) {
	p.out[i] = outcome{code: code, reason: reason, shape: est, start: never}
}

// gpuIndices maps ranks on node ni to GPU indices.
func (p *planner) gpuIndices(ni int, ranks []int) []int {
	out := make([]int, len(ranks))
	for x, r := range ranks {
		out[x] = p.nodes[ni].gpus[r].index
	}
	return out
}

// finish assembles the plan's waits, in queue order.
func (p *planner) finish() Plan {
	pos := 0
	p.plan.Waits = make([]Wait, 0, len(p.out)-len(p.plan.Assign))
	for i, o := range p.out {
		if o.placed {
			continue
		}
		pos++
		w := Wait{JobID: p.pending[i].ID, Position: pos, Code: o.code, Reason: o.reason}
		if o.start != never {
			w.EstimatedStart = p.now.Add(time.Duration(o.start))
		}
		p.plan.Waits = append(p.plan.Waits, w)
	}
	if len(p.plan.Waits) == 0 {
		p.plan.Waits = nil
	}
	return p.plan
}

// kthSmallest returns the k-th smallest of xs (1-based), reordering xs.
func kthSmallest(xs []int64, k int) int64 {
	// Node GPU counts are small: a partial selection sort is enough.
	for a := 0; a < k; a++ {
		m := a
		for b := a + 1; b < len(xs); b++ {
			if xs[b] < xs[m] {
				m = b
			}
		}
		xs[a], xs[m] = xs[m], xs[a]
	}
	return xs[k-1]
}
