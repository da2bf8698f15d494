package placement

// bestNodeGPU returns the node a k-GPU job of shape sh goes to now, or -1:
// among nodes with at least k usable GPUs, the one with the fewest usable
// (tightest), then the fewest free GPUs of any kind, then the name. Nodes
// are sorted by name, so the first of equals wins.
func (p *planner) bestNodeGPU(sh *shape, k int, restricted bool) int {
	best, bestN := -1, 0
	for ni := range p.nodes {
		n := sh.availAll[ni]
		if restricted {
			n = sh.avail[ni]
		}
		if n < k {
			continue
		}
		if best < 0 || n < bestN || (n == bestN && p.nodes[ni].freeGPUs < p.nodes[best].freeGPUs) {
			best, bestN = ni, n
		}
	}
	return best
}

// pickGPUs chooses k of the candidate ranks (cand[r] true) and returns them
// ascending; the caller guarantees at least k candidates.
//
// It treats the ranks as a buddy allocator does: aligned power-of-two blocks
// (pairs 0-1, 2-3, quads 0-3, 4-7, …). It takes the smallest block size that
// can hold k, and among those blocks the one with the fewest candidates
// (tightest), breaking ties by the fewest candidates in the enclosing block,
// then its enclosing block, and so on; then the lowest rank. Inside the block
// it takes the lowest ranks. On an empty node that is the lowest indices;
// on a used node it keeps a job inside one pair or quad, which is how GPUs
// are wired (NVLink bridges on pairs of PCIe cards, a PCIe switch per pair,
// a CPU socket per half of an 8-GPU box), and it fills holes before breaking
// into whole free blocks, which keeps those for larger jobs.
func pickGPUs(cand []bool, k int) []int {
	n := len(cand)
	pre := make([]int, n+1)
	for r, c := range cand {
		pre[r+1] = pre[r]
		if c {
			pre[r+1]++
		}
	}
	count := func(lo, size int) int { return pre[min(lo+size, n)] - pre[min(lo, n)] }
	top := ceilPow2(n)
	for size := ceilPow2(k); size <= top; size <<= 1 {
		best := -1
		for lo := 0; lo < n; lo += size {
			if count(lo, size) < k {
				continue
			}
			if best < 0 || tighter(count, lo, best, size, top) {
				best = lo
			}
		}
		if best < 0 {
			continue
		}
		out := make([]int, 0, k)
		for r := best; len(out) < k; r++ {
			if cand[r] {
				out = append(out, r)
			}
		}
		return out
	}
	panic("placement: pickGPUs called with fewer than k candidates")
}

// tighter reports whether the block at a is a tighter fit than the block at
// b (both of size): fewer candidates in it, else in its parent, and so on.
func tighter(count func(lo, size int) int, a, b, size, top int) bool {
	for s := size; s <= top; s <<= 1 {
		ca, cb := count(a/s*s, s), count(b/s*s, s)
		if ca != cb {
			return ca < cb
		}
	}
	return false
}

// ceilPow2 returns the smallest power of two ≥ n (1 for n ≤ 1).
func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
