package placement

import "strings"

// shapeKey identifies the static part of a GPU request: what makes one GPU
// feasible, whatever the count. Jobs with the same key share one shape.
type shapeKey struct {
	mem    uint64
	models string // Request.Models joined by NUL
}

// shape is the feasibility of one request shape against the round's nodes:
// the static part (healthy, memory, model), computed once, and the dynamic
// part (free now, outside the head's reservation), cached per generation.
type shape struct {
	mem    uint64
	models []string // as given, for reasons
	lower  []string // lower-cased, for matching

	match     [][]bool // node → rank → GPU is statically feasible
	static    []int    // node → statically feasible GPUs
	all       []bool   // node → every healthy GPU is statically feasible
	maxStatic int

	gen      int   // generation avail and availAll were computed at; -1: never
	avail    []int // node → feasible GPUs free now, less the head's reservation
	availAll []int // node → feasible GPUs free now
	maxAvail int
	maxAll   int

	reasonGen int            // generation of reasons
	reasons   map[int]string // GPU count → "no room" detail at reasonGen
}

// feasible reports whether g can ever serve a GPU of this shape: healthy,
// enough free memory, a matching model. Whether it is free is dynamic.
func (sh *shape) feasible(g *gpuState) bool {
	if !g.healthy || g.freeMB < sh.mem {
		return false
	}
	if len(sh.lower) == 0 {
		return true
	}
	for _, m := range sh.lower {
		if strings.Contains(g.name, m) {
			return true
		}
	}
	return false
}

// shapeOf returns the shape of r, computing its static part on first use.
func (p *planner) shapeOf(r Request) *shape {
	k := shapeKey{r.MinMemoryMB, strings.Join(r.Models, "\x00")}
	if sh, ok := p.shapes[k]; ok {
		return sh
	}
	sh := &shape{mem: r.MinMemoryMB, models: r.Models, gen: -1, reasonGen: -1}
	for _, m := range r.Models {
		sh.lower = append(sh.lower, strings.ToLower(m))
	}
	n := len(p.nodes)
	sh.match, sh.static, sh.all = make([][]bool, n), make([]int, n), make([]bool, n)
	sh.avail, sh.availAll = make([]int, n), make([]int, n)
	backing := make([]bool, p.totalGPUs) // one allocation per shape
	for ni := range p.nodes {
		gs := p.nodes[ni].gpus
		m := backing[:len(gs):len(gs)]
		backing = backing[len(gs):]
		all := true
		for r := range gs {
			m[r] = sh.feasible(&gs[r])
			if m[r] {
				sh.static[ni]++
			} else if gs[r].healthy {
				all = false
			}
		}
		sh.match[ni], sh.all[ni] = m, all
		sh.maxStatic = max(sh.maxStatic, sh.static[ni])
	}
	p.shapes[k] = sh
	return sh
}

// refresh brings the dynamic counts up to the current generation. Between
// placements the generation does not move, so once the cluster is full every
// later job of this shape costs a map lookup, not a scan of every GPU.
func (p *planner) refresh(sh *shape) {
	if sh.gen == p.gen {
		return
	}
	sh.gen, sh.maxAvail, sh.maxAll = p.gen, 0, 0
	h := &p.gpuHead
	for ni := range p.nodes {
		a, all := 0, 0
		kept := h.keptOn(ni)
		for r := range p.nodes[ni].gpus {
			if !sh.match[ni][r] || !p.nodes[ni].gpus[r].free {
				continue
			}
			all++
			if kept == nil || !kept[r] {
				a++
			}
		}
		sh.avail[ni], sh.availAll[ni] = a, all
		sh.maxAvail, sh.maxAll = max(sh.maxAvail, a), max(sh.maxAll, all)
	}
}
