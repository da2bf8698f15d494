package placement

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// never is a time (nanoseconds after Snapshot.Now) that does not come: what
// a GPU held by a job without an estimate is expected to free up at.
const never = int64(math.MaxInt64)

// gpuState is one GPU during a round. Its rank is its position on the node
// after sorting by Index.
type gpuState struct {
	index   int
	name    string // lower-cased, for model matching
	freeMB  uint64
	healthy bool
	holder  string // job id; "" when free
	free    bool   // healthy, not held, not assigned this round
	release int64  // when it is sure to be free (the holder's bound), ns after Now; never if unhealthy
	expRel  int64  // when it is expected free, for the estimate replay (Job.Expected)
}

// nodeState is one node during a round.
type nodeState struct {
	name     string
	gpus     []gpuState
	freeGPUs int // healthy GPUs free now
	running  []Running
	runIdx   map[string]int // job id → index in running; used for lookups only
	cpuTotal int
	cpuFree  int
	cpuRel   []slots // CPU slots expected to free up, by time
}

// slots is n CPU slots expected free at at (ns after Now).
type slots struct {
	at int64
	n  int
}

// after is t as nanoseconds after now, clamped at 0: a job past its
// estimate is expected to end now.
func after(now, t time.Time) int64 {
	d := t.Sub(now) // saturates
	if d < 0 {
		return 0
	}
	return int64(d)
}

// endOf is start+est, or never when est is unknown or the sum overflows.
func endOf(start int64, est time.Duration) int64 {
	if est <= 0 || start == never || start > never-int64(est) {
		return never
	}
	return start + int64(est)
}

// indexNodes copies the snapshot's nodes into round state: nodes by name,
// GPUs by index, running jobs by id, and each GPU's expected release time.
func indexNodes(s Snapshot) []nodeState {
	nodes := make([]nodeState, len(s.Nodes))
	for i, n := range s.Nodes {
		ns := &nodes[i]
		ns.name = n.Name
		ns.indexRunning(n.Running)
		ns.indexGPUs(n.GPUs, s.Now)
		ns.indexCPU(n, s.Now)
	}
	slices.SortStableFunc(nodes, func(a, b nodeState) int { return strings.Compare(a.name, b.name) })
	return nodes
}

// indexRunning sets the node's running jobs, sorted by id, and runIdx: each
// id's first place among them.
func (ns *nodeState) indexRunning(running []Running) {
	ns.running = slices.Clone(running)
	slices.SortStableFunc(ns.running, func(a, b Running) int { return strings.Compare(a.JobID, b.JobID) })
	ns.runIdx = make(map[string]int, len(ns.running))
	for ri, r := range ns.running {
		if _, dup := ns.runIdx[r.JobID]; !dup {
			ns.runIdx[r.JobID] = ri
		}
	}
}

// indexGPUs sets the node's GPUs, sorted by index, each with its free
// memory and when it is expected to be released; it counts the free ones.
// It needs ns.running and ns.runIdx (indexRunning).
func (ns *nodeState) indexGPUs(gpus []GPU, now time.Time) {
	ns.gpus = make([]gpuState, len(gpus))
	lastName, lastLower := "", ""
	for gi, g := range gpus {
		if g.Name != lastName || gi == 0 {
			// A node's GPUs mostly share one name: lower it once.
			lastName, lastLower = g.Name, strings.ToLower(g.Name)
		}
		st := gpuState{index: g.Index, name: lastLower, healthy: g.Healthy, holder: g.JobID, release: never}
		if g.MemoryTotalMB > g.ForeignUsedMB {
			st.freeMB = g.MemoryTotalMB - g.ForeignUsedMB
		}
		if g.Healthy {
			switch ri, ok := ns.runIdx[g.JobID]; {
			case g.JobID == "":
				st.free, st.release = true, 0
				ns.freeGPUs++
			case !ok:
				// Held by a job we know nothing about: no estimate.
			case ns.running[ri].Stopping:
				st.release = 0
			default:
				st.release = after(now, ns.running[ri].EndsAt)
			}
		}
		st.expRel = st.release
		if ri, ok := ns.runIdx[g.JobID]; ok && g.Healthy && g.JobID != "" && !ns.running[ri].Stopping {
			if e := ns.running[ri].ExpectedEnd; !e.IsZero() {
				st.expRel = min(after(now, e), st.release)
			}
		}
		ns.gpus[gi] = st
	}
	slices.SortStableFunc(ns.gpus, func(a, b gpuState) int { return cmp.Compare(a.index, b.index) })
}

// indexCPU sets the node's CPU slots: running jobs free theirs at their
// estimate; slots in use that no running job accounts for never free;
// over-commitment is paid back by the first slots that free. It needs
// ns.running (indexRunning).
func (ns *nodeState) indexCPU(n Node, now time.Time) {
	sum := 0
	for _, r := range ns.running {
		if r.CPUSlots <= 0 {
			continue
		}
		sum += r.CPUSlots
		at := after(now, r.EndsAt)
		if r.Stopping {
			at = 0
		}
		ns.cpuRel = append(ns.cpuRel, slots{at, r.CPUSlots})
	}
	used := max(n.CPUSlotsUsed, sum)
	if used > sum {
		ns.cpuRel = append(ns.cpuRel, slots{never, used - sum})
	}
	slices.SortStableFunc(ns.cpuRel, func(a, b slots) int { return cmp.Compare(a.at, b.at) })
	ns.cpuTotal = max(n.CPUSlots, 0)
	ns.cpuFree = ns.cpuTotal - used
	if ns.cpuFree < 0 {
		ns.cpuRel = takeSlots(ns.cpuRel, -ns.cpuFree)
		ns.cpuFree = 0
	}
}

// takeSlots removes the n earliest slots from rel.
func takeSlots(rel []slots, n int) []slots {
	for n > 0 && len(rel) > 0 {
		if rel[0].n > n {
			rel[0].n -= n
			return rel
		}
		n -= rel[0].n
		rel = rel[1:]
	}
	return rel
}

// addSlots inserts n slots freeing at at, keeping rel sorted.
func addSlots(rel []slots, at int64, n int) []slots {
	i, found := slices.BinarySearchFunc(rel, at, func(s slots, t int64) int { return cmp.Compare(s.at, t) })
	if found {
		rel[i].n += n
		return rel
	}
	return slices.Insert(rel, i, slots{at, n})
}

// slotsBy returns the earliest time at which need slots are free, given
// free now and rel; never if they never are.
func slotsBy(free int, rel []slots, need int) int64 {
	if free >= need {
		return 0
	}
	for _, s := range rel {
		free += s.n
		if free >= need {
			return s.at
		}
	}
	return never
}

// slotsAt returns how many slots are free at t, given free now and rel.
func slotsAt(free int, rel []slots, t int64) int {
	for _, s := range rel {
		if s.at > t {
			break
		}
		free += s.n
	}
	return free
}
