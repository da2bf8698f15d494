package placement

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPlaceProperties checks the invariants of checkPlan, and that the plan
// does not depend on listing order, on random snapshots from a fixed seed.
func TestPlaceProperties(t *testing.T) {
	n, r := propertyRuns(3000, 20250301)
	stats := map[string]int{}
	for i := range n {
		s := randomSnapshot(r)
		p := placeChecked(t, r, i, s, checkPlan)
		stats["assigned"] += len(p.Assign)
		stats["preempt"] += len(p.Preempt)
		stats["reserved"] += len(p.Reserved)
		for _, w := range p.Waits {
			stats[string(w.Code)]++
		}
		for _, a := range p.Assign {
			if rv, ok := gpuReservation(p); ok && len(a.GPUs) > 0 && indexOf(s, a.JobID) > indexOf(s, rv.JobID) {
				stats["backfilled"]++
			}
		}
	}
	t.Logf("outcomes over %d snapshots: %v", n, stats)
	for _, k := range []string{"assigned", "preempt", "backfilled", string(WaitBehind), string(WaitNeverFits), string(WaitCPUFull), string(WaitPreempting)} {
		if stats[k] == 0 {
			t.Errorf("the generator never produced %q: the properties are not exercised", k)
		}
	}
}

// randomSnapshot makes a small cluster with mixed models, unhealthy GPUs,
// foreign memory use, running jobs of every priority (some past their
// estimate, some stopping, some unknown), CPU slots, and a queue.
func randomSnapshot(r *rand.Rand) Snapshot {
	type kind struct {
		name string
		mem  uint64
	}
	kinds := []kind{{h100, 81559}, {a100, 40960}, {"NVIDIA L4", 23034}}
	s := Snapshot{Now: t0}
	nNodes := 1 + r.Intn(5)
	names := r.Perm(26)
	jid := 0
	for n := range nNodes {
		nd := Node{Name: "node-" + string(rune('a'+names[n]))}
		ng := r.Intn(9)
		if r.Intn(20) == 0 {
			ng = 16
		}
		k := kinds[r.Intn(len(kinds))]
		for g := range ng {
			kk := k
			if r.Intn(10) == 0 {
				kk = kinds[r.Intn(len(kinds))]
			}
			gpu := GPU{Index: g, Name: kk.name, MemoryTotalMB: kk.mem, Healthy: r.Intn(12) > 0}
			if r.Intn(5) == 0 {
				gpu.ForeignUsedMB = uint64(r.Intn(int(kk.mem)))
			}
			nd.GPUs = append(nd.GPUs, gpu)
		}
		// Running GPU jobs over runs of held GPUs.
		for g := 0; g < ng; {
			if r.Intn(2) == 0 {
				g++
				continue
			}
			size := 1 + r.Intn(min(4, ng-g))
			if r.Intn(15) == 0 {
				for x := range size {
					nd.GPUs[g+x].JobID = "ghost"
				}
				g += size
				continue
			}
			jid++
			run := Running{JobID: fmt.Sprintf("r%03d", jid), Priority: r.Intn(3), Preemptible: r.Intn(3) > 0,
				EndsAt: t0.Add(time.Duration(r.Intn(12)-2) * 30 * time.Minute), Stopping: r.Intn(10) == 0}
			for x := range size {
				nd.GPUs[g+x].JobID = run.JobID
				run.GPUs = append(run.GPUs, g+x)
			}
			nd.Running = append(nd.Running, run)
			g += size
		}
		nd.CPUSlots = r.Intn(5)
		for nd.CPUSlotsUsed < nd.CPUSlots && r.Intn(2) == 0 {
			jid++
			c := 1 + r.Intn(nd.CPUSlots-nd.CPUSlotsUsed)
			nd.Running = append(nd.Running, Running{JobID: fmt.Sprintf("r%03d", jid), Priority: r.Intn(3), CPUSlots: c,
				EndsAt: t0.Add(time.Duration(r.Intn(12)-2) * 30 * time.Minute)})
			nd.CPUSlotsUsed += c
		}
		s.Nodes = append(s.Nodes, nd)
	}
	modelSets := [][]string{nil, nil, nil, nil, {"H100"}, {"a100"}, {"A100", "H100"}, {"L4"}, {"B200"}}
	mems := []uint64{0, 0, 0, 0, 24 * 1024, 40 * 1024, 80 * 1024}
	sizes := []int{1, 1, 1, 1, 2, 2, 2, 3, 4, 4, 8, 16}
	for x := range r.Intn(25) {
		j := Job{ID: fmt.Sprintf("j%02d", x), Priority: r.Intn(3), Estimate: time.Duration(1+r.Intn(12)) * 30 * time.Minute}
		if r.Intn(20) == 0 {
			j.Estimate = 0
		}
		if r.Intn(5) == 0 {
			j.Request.CPUSlots = r.Intn(4)
		} else {
			j.Request = Request{GPUs: sizes[r.Intn(len(sizes))], MinMemoryMB: mems[r.Intn(len(mems))], Models: modelSets[r.Intn(len(modelSets))]}
		}
		s.Pending = append(s.Pending, j)
	}
	slices.SortStableFunc(s.Pending, func(a, b Job) int { return a.Priority - b.Priority })
	return s
}

// shuffled lists s's nodes, GPUs and running jobs in another order.
func shuffled(r *rand.Rand, s Snapshot) Snapshot {
	out := cloneSnapshot(s)
	r.Shuffle(len(out.Nodes), func(a, b int) { out.Nodes[a], out.Nodes[b] = out.Nodes[b], out.Nodes[a] })
	for i := range out.Nodes {
		n := &out.Nodes[i]
		r.Shuffle(len(n.GPUs), func(a, b int) { n.GPUs[a], n.GPUs[b] = n.GPUs[b], n.GPUs[a] })
		r.Shuffle(len(n.Running), func(a, b int) { n.Running[a], n.Running[b] = n.Running[b], n.Running[a] })
	}
	return out
}

// staticOK is rule 1 without the "free" part, written out again.
func staticOK(g GPU, req Request) bool {
	if !g.Healthy {
		return false
	}
	free := uint64(0)
	if g.MemoryTotalMB > g.ForeignUsedMB {
		free = g.MemoryTotalMB - g.ForeignUsedMB
	}
	if free < req.MinMemoryMB {
		return false
	}
	if len(req.Models) == 0 {
		return true
	}
	for _, m := range req.Models {
		if strings.Contains(strings.ToLower(g.Name), strings.ToLower(m)) {
			return true
		}
	}
	return false
}

func indexOf(s Snapshot, id string) int {
	return slices.IndexFunc(s.Pending, func(j Job) bool { return j.ID == id })
}

func gpuReservation(p Plan) (Reservation, bool) {
	for _, rv := range p.Reserved {
		if len(rv.GPUs) > 0 {
			return rv, true
		}
	}
	return Reservation{}, false
}

func cpuReservation(p Plan) (Reservation, bool) {
	for _, rv := range p.Reserved {
		if rv.CPUSlots > 0 {
			return rv, true
		}
	}
	return Reservation{}, false
}

// assignedBefore returns the assignments of jobs before pending index i.
func assignedBefore(s Snapshot, p Plan, i int) []Assignment {
	var out []Assignment
	for _, a := range p.Assign {
		if indexOf(s, a.JobID) < i {
			out = append(out, a)
		}
	}
	return out
}

// shadowOf returns the estimated start Place gives j alone on s, as a
// normal-priority job (no preemption): its shadow time.
func shadowOf(s Snapshot, as []Assignment, j Job) time.Time {
	j.Priority = PriorityNormal
	p := Place(apply(s, as, j))
	if len(p.Waits) != 1 {
		return time.Time{}
	}
	return p.Waits[0].EstimatedStart
}

// minVictims is rule 4's fewest victims by brute force over every subset:
// -1 when no set makes room for j.
func minVictims(s Snapshot, j Job) int {
	best := -1
	for _, n := range s.Nodes {
		run := map[string]Running{}
		for _, r := range n.Running {
			run[r.JobID] = r
		}
		ready := 0
		gain := map[string]int{}
		for _, g := range n.GPUs {
			if !staticOK(g, j.Request) {
				continue
			}
			r, known := run[g.JobID]
			switch {
			case g.JobID == "" || (known && r.Stopping):
				ready++
			case known && r.Priority == PriorityBatch && r.Preemptible && j.Priority < PriorityBatch:
				gain[g.JobID]++
			}
		}
		var vs []int
		for _, g := range gain {
			vs = append(vs, g)
		}
		for mask := 0; mask < 1<<len(vs); mask++ {
			sum, cnt := ready, 0
			for b := range vs {
				if mask&(1<<b) != 0 {
					sum += vs[b]
					cnt++
				}
			}
			if sum >= j.Request.GPUs && (best < 0 || cnt < best) {
				best = cnt
			}
		}
	}
	return best
}

// checkPlan checks every rule the package doc promises that can be checked
// from outside.
func checkPlan(t *testing.T, s Snapshot, p Plan) {
	t.Helper()
	jobs := jobsByID(s)
	nodes := map[string]Node{}
	for _, n := range s.Nodes {
		nodes[n.Name] = n
	}

	// Every job once, in queue order; positions 1..n.
	ai, wi := 0, 0
	for _, j := range s.Pending {
		switch {
		case ai < len(p.Assign) && p.Assign[ai].JobID == j.ID:
			ai++
		case wi < len(p.Waits) && p.Waits[wi].JobID == j.ID:
			if p.Waits[wi].Position != wi+1 {
				t.Errorf("%s: position %d, want %d", j.ID, p.Waits[wi].Position, wi+1)
			}
			if !strings.HasPrefix(p.Waits[wi].Reason, string(p.Waits[wi].Code)+": ") {
				t.Errorf("%s: reason %q does not start with its code %q", j.ID, p.Waits[wi].Reason, p.Waits[wi].Code)
			}
			wi++
		default:
			t.Fatalf("%s: neither assigned nor waiting, or out of order", j.ID)
		}
	}
	if ai != len(p.Assign) || wi != len(p.Waits) {
		t.Fatalf("plan names jobs that are not pending")
	}

	// Assignments: only feasible, free GPUs, never one twice, CPU slots within free.
	used := map[string]bool{}
	slotsUsed := map[string]int{}
	for _, a := range p.Assign {
		j := jobs[a.JobID]
		n, ok := nodes[a.Node]
		if !ok {
			t.Fatalf("%s: assigned to unknown node %q", a.JobID, a.Node)
		}
		if j.Request.GPUs == 0 {
			if len(a.GPUs) != 0 || a.CPUSlots != max(1, j.Request.CPUSlots) {
				t.Errorf("%s: CPU-only job assigned %+v", a.JobID, a)
			}
			slotsUsed[a.Node] += a.CPUSlots
			continue
		}
		if len(a.GPUs) != j.Request.GPUs || a.CPUSlots != 0 || !slices.IsSorted(a.GPUs) {
			t.Errorf("%s: needs %d GPUs, assigned %+v", a.JobID, j.Request.GPUs, a)
		}
		for _, idx := range a.GPUs {
			key := a.Node + "/" + itoa(idx)
			if used[key] {
				t.Errorf("%s: GPU %s given twice", a.JobID, key)
			}
			used[key] = true
			g := n.GPUs[slices.IndexFunc(n.GPUs, func(g GPU) bool { return g.Index == idx })]
			if !staticOK(g, j.Request) || g.JobID != "" {
				t.Errorf("%s: GPU %s not feasible: %+v", a.JobID, key, g)
			}
		}
	}
	for name, c := range slotsUsed {
		n := nodes[name]
		sum := 0
		for _, r := range n.Running {
			sum += r.CPUSlots
		}
		if c > n.CPUSlots-max(n.CPUSlotsUsed, sum) {
			t.Errorf("node %s: %d CPU slots assigned, %d free", name, c, n.CPUSlots-n.CPUSlotsUsed)
		}
	}

	rv, hasHead := gpuReservation(p)
	head := indexOf(s, rv.JobID)
	preempting := hasHead && len(p.Preempt) > 0 || hasHead && strings.HasPrefix(waitReason(p, rv.JobID), string(WaitPreempting))
	final := apply(s, p.Assign)

	for i, j := range s.Pending {
		w, waiting := waitOf(p, j.ID)
		if !waiting {
			// Strict order: a GPU job after the head starts only around it.
			if hasHead && j.Request.GPUs > 0 && i > head {
				a, _ := assignOf(p, j.ID)
				endsBefore := j.Estimate > 0 && !s.Now.Add(j.Estimate).After(rv.At)
				disjoint := a.Node != rv.Node || !slices.ContainsFunc(a.GPUs, func(x int) bool { return slices.Contains(rv.GPUs, x) })
				if !endsBefore && !disjoint {
					t.Errorf("%s: backfilled onto the head's GPUs %v and runs past its shadow time", j.ID, rv.GPUs)
				}
			}
			continue
		}
		if !w.EstimatedStart.IsZero() && w.EstimatedStart.Before(s.Now) {
			t.Errorf("%s: estimated start before now", j.ID)
		}
		if j.Request.GPUs == 0 {
			c := max(1, j.Request.CPUSlots)
			most := 0
			for _, n := range s.Nodes {
				most = max(most, n.CPUSlots)
			}
			if (w.Code == WaitNeverFits) != (c > most) {
				t.Errorf("%s: code %q, but the largest node has %d slots for %d", j.ID, w.Code, most, c)
			}
			continue
		}
		// Never fits exactly when no node could ever hold it.
		fits := false
		for _, n := range s.Nodes {
			k := 0
			for _, g := range n.GPUs {
				if staticOK(g, j.Request) {
					k++
				}
			}
			fits = fits || (j.Request.GPUs > 0 && k >= j.Request.GPUs)
		}
		if (w.Code == WaitNeverFits) != !fits {
			t.Errorf("%s: code %q, but fits on some node when empty: %v", j.ID, w.Code, fits)
		}
		if w.Code == WaitNeverFits {
			if !w.EstimatedStart.IsZero() {
				t.Errorf("%s: cannot fit, yet has an estimated start", j.ID)
			}
			continue
		}
		// Only the head reserves; every job before it waits for lack of room
		// with no shadow time.
		if !hasHead || i < head {
			if !strings.Contains(w.Reason, "start unknown") {
				t.Errorf("%s: waits ahead of the head (or with no head) but has a known start: %q", j.ID, w.Reason)
			}
			if j.Priority == PriorityUrgent {
				if m := minVictims(apply(s, assignedBefore(s, p, i)), j); m >= 0 {
					t.Errorf("%s: urgent, no preemption, but %d victims would make room", j.ID, m)
				}
			}
		}
		if i == head && !w.EstimatedStart.Equal(rv.At) {
			t.Errorf("head %s: estimated start %v, reservation at %v", j.ID, w.EstimatedStart, rv.At)
		}
		// Greedy: in the final state it still does not fit where it may go.
		restricted := hasHead && i > head && (j.Estimate <= 0 || s.Now.Add(j.Estimate).After(rv.At))
		for _, n := range final.Nodes {
			k := 0
			for _, g := range n.GPUs {
				if g.JobID == "" && staticOK(g, j.Request) && !(restricted && n.Name == rv.Node && slices.Contains(rv.GPUs, g.Index)) {
					k++
				}
			}
			if k >= j.Request.GPUs {
				t.Errorf("%s: waits (%q) but %d usable GPUs are free on %s", j.ID, w.Reason, k, n.Name)
			}
		}
	}

	// The head's reservation: feasible GPUs; backfill never delays it.
	if hasHead {
		hj := s.Pending[head]
		n := nodes[rv.Node]
		for _, idx := range rv.GPUs {
			g := n.GPUs[slices.IndexFunc(n.GPUs, func(g GPU) bool { return g.Index == idx })]
			if !staticOK(g, hj.Request) {
				t.Errorf("head %s: reserved GPU %d is not feasible", hj.ID, idx)
			}
		}
		if len(rv.GPUs) != hj.Request.GPUs {
			t.Errorf("head %s: reserved %v for %d GPUs", hj.ID, rv.GPUs, hj.Request.GPUs)
		}
		if !preempting {
			without := shadowOf(s, assignedBefore(s, p, head), hj)
			with := shadowOf(s, p.Assign, hj)
			if !without.Equal(rv.At) || !with.Equal(rv.At) {
				t.Errorf("head %s: shadow %v without backfill, %v with, reserved at %v", hj.ID, without, with, rv.At)
			}
		}
		if hj.Priority == PriorityUrgent {
			m := minVictims(apply(s, assignedBefore(s, p, head)), hj)
			switch {
			case len(p.Preempt) == 1 && len(p.Preempt[0].Victims) != m:
				t.Errorf("head %s: %d victims, the fewest is %d", hj.ID, len(p.Preempt[0].Victims), m)
			case len(p.Preempt) == 0 && preempting && m != 0:
				t.Errorf("head %s: waits for stopping jobs, but the fewest victims is %d", hj.ID, m)
			case !preempting && m >= 0:
				t.Errorf("head %s: urgent and %d victims would make room, but no preemption", hj.ID, m)
			}
		}
	}
	if len(p.Preempt) > 1 {
		t.Errorf("%d preemptions in one round", len(p.Preempt))
	}
	for _, pr := range p.Preempt {
		if !hasHead || pr.ForJobID != rv.JobID || !rv.At.Equal(s.Now) || !reflect.DeepEqual(pr.GPUs, rv.GPUs) || pr.Node != rv.Node {
			t.Errorf("preemption %+v does not match the head's reservation %+v", pr, rv)
		}
		if jobs[pr.ForJobID].Priority != PriorityUrgent || len(pr.Victims) == 0 {
			t.Errorf("preemption %+v: not for an urgent job, or no victims", pr)
		}
		n := nodes[pr.Node]
		for _, v := range pr.Victims {
			x := slices.IndexFunc(n.Running, func(r Running) bool { return r.JobID == v })
			if x < 0 {
				t.Errorf("victim %s is not running on %s", v, pr.Node)
				continue
			}
			if r := n.Running[x]; r.Priority != PriorityBatch || !r.Preemptible || r.Stopping {
				t.Errorf("victim %+v is not a preemptible batch job", r)
			}
		}
		for _, idx := range pr.GPUs {
			g := n.GPUs[slices.IndexFunc(n.GPUs, func(g GPU) bool { return g.Index == idx })]
			stopping := slices.ContainsFunc(n.Running, func(r Running) bool { return r.JobID == g.JobID && r.Stopping })
			if g.JobID != "" && !slices.Contains(pr.Victims, g.JobID) && !stopping {
				t.Errorf("preemption GPU %d is held by %s, not a victim", idx, g.JobID)
			}
		}
	}

	// The CPU head: backfill never delays it either.
	if crv, ok := cpuReservation(p); ok {
		ci := indexOf(s, crv.JobID)
		without := shadowOf(s, assignedBefore(s, p, ci), s.Pending[ci])
		with := shadowOf(s, p.Assign, s.Pending[ci])
		if !without.Equal(crv.At) || !with.Equal(crv.At) {
			t.Errorf("CPU head %s: shadow %v without backfill, %v with, reserved at %v", crv.JobID, without, with, crv.At)
		}
	}
}

func waitReason(p Plan, id string) string {
	w, _ := waitOf(p, id)
	return w.Reason
}

// placeChecked places s, runs check on the plan as subtest case<i>, checks
// that the plan does not depend on the order s lists things in, and stops
// the test on a failure with the snapshot logged. It returns the plan.
func placeChecked(t *testing.T, r *rand.Rand, i int, s Snapshot, check func(*testing.T, Snapshot, Plan)) Plan {
	t.Helper()
	p := Place(s)
	ok := t.Run(fmt.Sprintf("case%d", i), func(t *testing.T) {
		check(t, s, p)
		if got := Place(shuffled(r, s)); !reflect.DeepEqual(got, p) {
			t.Errorf("plan depends on listing order:\n got %+v\nwant %+v", got, p)
		}
	})
	if !ok {
		t.Logf("snapshot: %+v", s)
		t.FailNow()
	}
	return p
}

// propertyRuns is how many random snapshots a property test checks (a
// tenth with -short) and its generator, from seed.
func propertyRuns(n int, seed int64) (int, *rand.Rand) {
	if testing.Short() {
		n /= 10
	}
	return n, rand.New(rand.NewSource(seed))
}
