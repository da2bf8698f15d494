package placement

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// gang returns a pending job of n nodes × gpus GPUs of any model.
func gang(id string, prio, n, gpus int, est time.Duration) Job {
	return Job{ID: id, Priority: prio, Request: Request{GPUs: gpus, Nodes: n}, Estimate: est}
}

// TestGangAllOrNothing: a gang starts only when enough distinct nodes each
// have its GPUs free at once; with one node short it holds nothing, not
// even the nodes that have room (no partial hold), and a job of one node
// behind it still starts where the gang is not reserved.
func TestGangAllOrNothing(t *testing.T) {
	s := Snapshot{Now: t0, Nodes: []Node{
		h100Node("a", 8),
		run(h100Node("b", 8), "r1", PriorityNormal, time.Hour, false, 0, 1, 2, 3),
		h100Node("c", 4),
	}, Pending: []Job{gang("g", PriorityNormal, 2, 8, 2*time.Hour), job("small", PriorityNormal, 2, 3*time.Hour)}}
	p := Place(s)
	if a, ok := assignOf(p, "g"); ok {
		t.Fatalf("gang assigned with one node of 8 free: %+v", a)
	}
	w, _ := waitOf(p, "g")
	if w.Code != WaitNoRoom || !w.EstimatedStart.Equal(t0.Add(time.Hour)) {
		t.Errorf("gang wait %+v; want no room, start when r1 ends", w)
	}
	var reserved []string
	for _, rv := range p.Reserved {
		if rv.JobID == "g" && len(rv.GPUs) == 8 {
			reserved = append(reserved, rv.Node)
		}
	}
	if !slices.Equal(reserved, []string{"a", "b"}) {
		t.Errorf("gang reserves 8 GPUs on %v; want a and b: %+v", reserved, p.Reserved)
	}
	// The small job runs past the gang's start: not on a nor b.
	if a, ok := assignOf(p, "small"); !ok || a.Node != "c" {
		t.Errorf("small: %+v %v; want it on c, outside the gang's reservation", a, ok)
	}

	// Once r1 is gone, the gang starts on both nodes at once.
	s.Nodes[1] = h100Node("b", 8)
	p = Place(s)
	a, ok := assignOf(p, "g")
	if !ok || len(a.Gang) != 2 || a.Gang[0].Node != "a" || a.Gang[1].Node != "b" || a.Node != "a" ||
		!slices.Equal(a.GPUs, a.Gang[0].GPUs) || len(a.Gang[0].GPUs) != 8 || len(a.Gang[1].GPUs) != 8 {
		t.Fatalf("gang: %+v %v; want 8 GPUs on each of a and b", a, ok)
	}
}

// TestGangNeverFits: fewer nodes than the gang spans, even empty, is a
// "cannot fit anywhere" that blocks nothing.
func TestGangNeverFits(t *testing.T) {
	s := Snapshot{Now: t0, Nodes: []Node{h100Node("a", 8), h100Node("b", 4)},
		Pending: []Job{gang("g", PriorityNormal, 2, 8, time.Hour), job("j", PriorityNormal, 8, 3*time.Hour)}}
	p := Place(s)
	w, _ := waitOf(p, "g")
	if w.Code != WaitNeverFits || !strings.Contains(w.Reason, "needs 2 nodes × 8 GPUs; 1 of 2 nodes") {
		t.Errorf("gang: %+v; want cannot fit anywhere naming 1 of 2 nodes", w)
	}
	if _, ok := assignOf(p, "j"); !ok {
		t.Errorf("a job behind a gang that never fits did not start: %+v", p)
	}
}

// TestGangBackfillSafe: behind a gang head, a job that would run past the
// gang's start may use no reserved GPU on any of the gang's nodes, while
// one that ends by then may.
func TestGangBackfillSafe(t *testing.T) {
	s := Snapshot{Now: t0, Nodes: []Node{
		run(h100Node("a", 8), "ra", PriorityNormal, time.Hour, false, 0, 1, 2, 3),
		run(h100Node("b", 8), "rb", PriorityNormal, 2*time.Hour, false, 0, 1, 2, 3),
	}, Pending: []Job{
		gang("g", PriorityNormal, 2, 8, time.Hour),
		job("long", PriorityNormal, 1, 5*time.Hour),
		job("short", PriorityNormal, 1, 90*time.Minute),
	}}
	p := Place(s)
	w, _ := waitOf(p, "g")
	if !w.EstimatedStart.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("gang starts %v; want when rb ends, 2 h", w.EstimatedStart)
	}
	if w, _ := waitOf(p, "long"); w.Code != WaitBehind {
		t.Errorf("long: %+v; want it behind the gang (its only GPUs are reserved on a or b)", w)
	}
	if _, ok := assignOf(p, "short"); !ok {
		t.Errorf("short (ends before the gang's start) did not backfill: %+v", p.Waits)
	}
	checkGangPlan(t, s, p)
}

// TestGangPreemptAllOrNone: an urgent gang stops batch jobs on as many
// nodes as it spans, or on none: with only one node's jobs preemptible,
// nothing is stopped.
func TestGangPreemptAllOrNone(t *testing.T) {
	nodes := func(bPreemptible bool) []Node {
		return []Node{
			run(h100Node("a", 8), "ba", PriorityBatch, 5*time.Hour, true, 0, 1, 2, 3, 4, 5, 6, 7),
			run(h100Node("b", 8), "bb", PriorityBatch, 5*time.Hour, bPreemptible, 0, 1, 2, 3, 4, 5, 6, 7),
		}
	}
	s := Snapshot{Now: t0, Nodes: nodes(false), Pending: []Job{gang("u", PriorityUrgent, 2, 8, time.Hour)}}
	if p := Place(s); len(p.Preempt) != 0 {
		t.Errorf("preempted %+v with only one node able to make room; want none", p.Preempt)
	}
	s.Nodes = nodes(true)
	p := Place(s)
	var stopped []string
	for _, pr := range p.Preempt {
		if pr.ForJobID != "u" || len(pr.GPUs) != 8 {
			t.Errorf("preemption %+v", pr)
		}
		stopped = append(stopped, pr.Node+":"+strings.Join(pr.Victims, ","))
	}
	if !slices.Equal(stopped, []string{"a:ba", "b:bb"}) {
		t.Errorf("stopped %v; want ba on a and bb on b", stopped)
	}
	if w, _ := waitOf(p, "u"); w.Code != WaitPreempting || !strings.Contains(w.Reason, "ba, bb") {
		t.Errorf("u: %+v", w)
	}
}

// TestGangProperties runs random snapshots with gangs in the queue and
// checks checkGangPlan on each, and that the plan does not depend on the
// order the snapshot lists things in.
func TestGangProperties(t *testing.T) {
	n, r := propertyRuns(2000, 20261207)
	stats := map[string]int{}
	for i := range n {
		s := randomSnapshot(r)
		for x := range r.Intn(4) {
			g := gang(fmt.Sprintf("g%d", x), r.Intn(3), 2+r.Intn(2), []int{1, 2, 4, 8}[r.Intn(4)], time.Duration(1+r.Intn(12))*30*time.Minute)
			at := r.Intn(len(s.Pending) + 1)
			s.Pending = slices.Insert(s.Pending, at, g)
		}
		slices.SortStableFunc(s.Pending, func(a, b Job) int { return a.Priority - b.Priority })
		p := placeChecked(t, r, i, s, checkGangPlan)
		for _, a := range p.Assign {
			if len(a.Gang) > 0 {
				stats["gang assigned"]++
			}
		}
		for _, pr := range p.Preempt {
			if strings.HasPrefix(pr.ForJobID, "g") {
				stats["gang preempts"]++
			}
		}
		if rv, ok := gpuReservation(p); ok && strings.HasPrefix(rv.JobID, "g") {
			stats["gang head"]++
		}
	}
	t.Logf("over %d snapshots: %v", n, stats)
	for _, k := range []string{"gang assigned", "gang preempts", "gang head"} {
		if stats[k] == 0 {
			t.Errorf("the generator never produced %q", k)
		}
	}
}

// checkGangPlan checks what the package promises of gangs: every gang
// assigned gets its GPUs on exactly Nodes distinct nodes, GPUs on each,
// all free and feasible, none given twice (no partial hold); the head's
// reservation covers as many nodes as it spans; and the assignments, run
// as jobs, do not delay the head past its reservation (backfill safety).
func checkGangPlan(t *testing.T, s Snapshot, p Plan) {
	t.Helper()
	jobs := jobsByID(s)
	gpus := map[string]GPU{}
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			gpus[fmt.Sprint(n.Name, "/", g.Index)] = g
		}
	}
	given := map[string]string{}
	for _, a := range p.Assign {
		j := jobs[a.JobID]
		members := a.Gang
		if j.Request.nodes() == 1 {
			if members != nil {
				t.Errorf("%s: one-node job with a gang %+v", a.JobID, members)
			}
			members = []Member{{a.Node, a.GPUs}}
		} else if len(members) != j.Request.nodes() || a.Node != members[0].Node || !slices.Equal(a.GPUs, members[0].GPUs) {
			t.Fatalf("%s: partial or malformed gang %+v; want %d nodes", a.JobID, a, j.Request.nodes())
		}
		seen := map[string]bool{}
		for _, m := range members {
			if seen[m.Node] {
				t.Errorf("%s: node %s twice", a.JobID, m.Node)
			}
			seen[m.Node] = true
			if j.Request.GPUs > 0 && len(m.GPUs) != j.Request.GPUs {
				t.Errorf("%s: %d GPUs on %s, want %d", a.JobID, len(m.GPUs), m.Node, j.Request.GPUs)
			}
			for _, gi := range m.GPUs {
				key := fmt.Sprint(m.Node, "/", gi)
				g := gpus[key]
				if g.JobID != "" || !staticOK(g, j.Request) || given[key] != "" {
					t.Errorf("%s: GPU %s not free, not feasible, or given to %s too", a.JobID, key, given[key])
				}
				given[key] = a.JobID
			}
		}
	}
	checkGangHead(t, s, p, jobs)
}

// checkGangHead checks the GPU head's reservation: one per node it spans,
// and no later than its start with every assignment of the plan running.
func checkGangHead(t *testing.T, s Snapshot, p Plan, jobs map[string]Job) {
	t.Helper()
	rv, ok := gpuReservation(p)
	if !ok {
		return
	}
	head := jobs[rv.JobID]
	nodes := 0
	for _, r := range p.Reserved {
		if r.JobID == head.ID && len(r.GPUs) > 0 {
			nodes++
			if !r.At.Equal(rv.At) {
				t.Errorf("%s: reservations at %v and %v", head.ID, rv.At, r.At)
			}
		}
	}
	if nodes != head.Request.nodes() {
		t.Errorf("%s: reserved on %d nodes, spans %d", head.ID, nodes, head.Request.nodes())
	}
	if len(p.Preempt) > 0 {
		checkGangPreempt(t, s, p, head)
		return
	}
	if head.Priority == PriorityUrgent {
		return // it reserves from now, on GPUs of jobs still stopping
	}
	if at := shadowOf(s, p.Assign, head); at.IsZero() || at.After(rv.At) {
		t.Errorf("%s: with the plan's assignments running it starts %v, after its reservation %v: backfill delayed it", head.ID, at, rv.At)
	}
}

// checkGangPreempt checks the plan's preemptions: all for the head, which
// is urgent, of preemptible batch jobs on the node named, and on every
// node the head reserves, each reserved GPU is free now, held by a victim
// there or by a job already stopping: room on all its nodes, or none.
func checkGangPreempt(t *testing.T, s Snapshot, p Plan, head Job) {
	t.Helper()
	if head.Priority != PriorityUrgent {
		t.Errorf("%s (priority %d) preempts", head.ID, head.Priority)
	}
	victims := map[string]bool{}
	for _, pr := range p.Preempt {
		if pr.ForJobID != head.ID {
			t.Errorf("preemption %+v is not for the head %s", pr, head.ID)
		}
		for _, v := range pr.Victims {
			victims[pr.Node+"/"+v] = true
		}
	}
	for _, n := range s.Nodes {
		run := map[string]Running{}
		for _, r := range n.Running {
			run[r.JobID] = r
		}
		for v := range victims {
			if id, ok := strings.CutPrefix(v, n.Name+"/"); ok {
				if r := run[id]; r.Priority != PriorityBatch || !r.Preemptible || r.Stopping {
					t.Errorf("victim %s on %s: %+v", id, n.Name, r)
				}
			}
		}
		for _, rv := range p.Reserved {
			if rv.JobID != head.ID || rv.Node != n.Name {
				continue
			}
			for _, g := range n.GPUs {
				if slices.Contains(rv.GPUs, g.Index) && g.JobID != "" && !victims[n.Name+"/"+g.JobID] && !run[g.JobID].Stopping {
					t.Errorf("%s reserves GPU %d on %s, held by %s, which is not stopped", head.ID, g.Index, n.Name, g.JobID)
				}
			}
		}
	}
}

// TestGangJoins: after the joins of one node come those of gangs of 2, 4,
// … whole nodes (and every node that has them): when that many nodes are
// free in the replay.
func TestGangJoins(t *testing.T) {
	plan := Place(Snapshot{Now: t0, Nodes: []Node{
		h100Node("a", 8),
		run(h100Node("b", 8), "r1", PriorityNormal, 2*time.Hour, false, 0, 1, 2, 3, 4, 5, 6, 7),
		run(h100Node("c", 8), "r2", PriorityNormal, time.Hour, false, 0, 1, 2, 3),
		h100Node("d", 4),
	}})
	got := map[[2]int]time.Duration{}
	for _, jn := range plan.Joins {
		if jn.Priority == PriorityNormal && jn.Nodes > 1 {
			if jn.GPUs != 8 {
				t.Errorf("gang join %+v; want whole nodes of 8", jn)
			}
			got[[2]int{jn.Nodes, jn.GPUs}] = jn.At.Sub(t0)
		}
	}
	want := map[[2]int]time.Duration{{2, 8}: time.Hour, {3, 8}: 2 * time.Hour}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gang joins %v; want %v (a now, c at 1h, b at 2h; d has 4)", got, want)
	}
	one := Place(Snapshot{Now: t0, Nodes: []Node{h100Node("a", 8), h100Node("b", 4)}})
	for _, jn := range one.Joins {
		if jn.Nodes > 1 {
			t.Errorf("one node of 8: gang join %+v; want none", jn)
		}
	}
}
