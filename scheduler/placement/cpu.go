package placement

import (
	"slices"
	"strconv"
	"time"
)

// cpuHead is the first CPU-only job that could not start, and what it holds:
// its slots on node from at; extra more slots free there by at may still go
// to jobs that run past at.
type cpuHead struct {
	set    bool
	job    int
	node   int
	at     int64
	extra  int
	behind string
}

// considerCPU places CPU-only pending job i on free CPU slots, or records why
// it waits. CPU slots and GPUs are separate resources: a CPU-only job never
// waits behind a GPU job, nor the other way round.
func (p *planner) considerCPU(i int) {
	j := &p.pending[i]
	c := max(j.Request.CPUSlots, 1)
	if c > p.maxCPU {
		p.wait(i, WaitNeverFits, string(WaitNeverFits)+": needs "+plural(c, "CPU slot")+"; the largest node has "+strconv.Itoa(p.maxCPU), nil)
		return
	}
	h := &p.cpuHead
	end := endOf(0, j.Estimate)
	restricted := h.set && end > h.at
	if best := p.bestFitCPU(c, restricted); best >= 0 {
		n := &p.nodes[best]
		n.cpuFree -= c
		n.cpuRel = addSlots(n.cpuRel, end, c)
		if restricted && best == h.node {
			h.extra -= c
		}
		p.cpuMaxDirty, p.cpuReasons = true, nil
		p.out[i].placed = true
		p.plan.Assign = append(p.plan.Assign, Assignment{JobID: j.ID, Node: n.name, CPUSlots: c})
		return
	}
	if h.set {
		if c <= p.maxCPUFree() {
			p.wait(i, WaitBehind, h.behind, nil)
		} else {
			p.wait(i, WaitCPUFull, p.cpuFullReason(c), nil)
		}
		p.out[i].cpu = true
		return
	}
	p.reserveCPU(i, c)
}

// bestFitCPU returns the node with the fewest free CPU slots that still has
// c, or -1. restricted: the CPU head's node gives only its extra slots
// (the job would run past the head's start).
func (p *planner) bestFitCPU(c int, restricted bool) int {
	best := -1
	if c > p.maxCPUFree() {
		return best
	}
	h := &p.cpuHead
	for ni := range p.nodes {
		n := &p.nodes[ni]
		if n.cpuFree < c || (restricted && ni == h.node && c > h.extra) {
			continue
		}
		if best < 0 || n.cpuFree < p.nodes[best].cpuFree {
			best = ni
		}
	}
	return best
}

// reserveCPU makes job i, the first CPU-only job that cannot start, the CPU
// head: it reserves c slots on the node where they free first.
func (p *planner) reserveCPU(i, c int) {
	j := &p.pending[i]
	h := &p.cpuHead
	at, ni, bestReady := p.earliestCPU(c)
	if ni < 0 {
		p.wait(i, WaitCPUFull, p.cpuFullReason(c)+"; start unknown: the slots are held by jobs with no estimate", nil)
		p.out[i].cpu = true
		return
	}
	*h = cpuHead{set: true, job: i, node: ni, at: at, extra: bestReady - c,
		behind: string(WaitBehind) + ": job " + j.ID + " (backfill would delay it)"}
	p.plan.Reserved = append(p.plan.Reserved, Reservation{JobID: j.ID, Node: p.nodes[ni].name, CPUSlots: c, At: p.now.Add(time.Duration(at))})
	p.wait(i, WaitCPUFull, p.cpuFullReason(c)+"; first in line on "+p.nodes[ni].name, nil)
	p.out[i].cpu = true
}

// earliestCPU returns the node (ni) where c CPU slots free first, when
// (at), and how many are free by then (ready); among nodes tied on at, the
// one with the fewest ready. ni is -1 when no node's slots have an estimate.
func (p *planner) earliestCPU(c int) (at int64, ni, ready int) {
	at, ni = never, -1
	for x := range p.nodes {
		n := &p.nodes[x]
		if n.cpuTotal < c {
			continue
		}
		t := slotsBy(n.cpuFree, n.cpuRel, c)
		if t == never {
			continue
		}
		if r := slotsAt(n.cpuFree, n.cpuRel, t); t < at || (t == at && r < ready) {
			at, ni, ready = t, x, r
		}
	}
	return at, ni, ready
}

// maxCPUFree returns the most free CPU slots on one node, recomputed only
// after a CPU placement.
func (p *planner) maxCPUFree() int {
	if p.cpuMaxDirty {
		p.cpuMax = 0
		for ni := range p.nodes {
			p.cpuMax = max(p.cpuMax, p.nodes[ni].cpuFree)
		}
		p.cpuMaxDirty = false
	}
	return p.cpuMax
}

// cpuFullReason is the "cpu slots full" reason for a job that needs c slots,
// cached until the next CPU placement.
func (p *planner) cpuFullReason(c int) string {
	if r, ok := p.cpuReasons[c]; ok {
		return r
	}
	r := string(WaitCPUFull) + ": needs " + plural(c, "CPU slot") + "; the most free on any node is " + strconv.Itoa(p.maxCPUFree())
	if p.cpuReasons == nil {
		p.cpuReasons = make(map[int]string)
	}
	p.cpuReasons[c] = r
	return r
}

// cpuSim is one node's CPU slots during the estimate replay: free now at 0,
// then what frees up later, sorted by time.
type cpuSim struct{ rel []slots }

func newCPUSim(n *nodeState) cpuSim {
	rel := make([]slots, 0, len(n.cpuRel)+1)
	if n.cpuFree > 0 {
		rel = append(rel, slots{0, n.cpuFree})
	}
	return cpuSim{rel: append(rel, slices.Clone(n.cpuRel)...)}
}
