package placement

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// want describes what a table test expects of a Plan. Jobs not named are
// not checked, except that every pending job must be assigned or waiting.
type want struct {
	assign  map[string]string // job → "node [gpus]" or "node cpu=N"
	waits   map[string]wantWait
	preempt []Preemption
	// reserved, when not nil, is the Plan's reservations.
	reserved []Reservation
}

type wantWait struct {
	code   WaitCode
	reason string        // substring of Reason
	start  time.Duration // EstimatedStart − t0; -1: zero (unknown); 0: not checked unless startNow
	now    bool          // EstimatedStart must be t0
}

func TestPlace(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name string
		s    Snapshot
		want want
	}{
		{
			name: "issue: three 4-GPU jobs on one 8-GPU node",
			s: Snapshot{Nodes: []Node{h100Node("n1", 8)}, Pending: []Job{
				job("a", 1, 4, 2*h), job("b", 1, 4, 3*h), job("c", 1, 4, h)}},
			want: want{
				assign: map[string]string{"a": "n1 [0 1 2 3]", "b": "n1 [4 5 6 7]"},
				waits: map[string]wantWait{"c": {code: WaitNoRoom,
					reason: "no room: needs 4 GPUs; the largest free block on any node is 0; first in line for GPUs [0 1 2 3] on n1", start: 2 * h}},
				reserved: []Reservation{{JobID: "c", Node: "n1", GPUs: []int{0, 1, 2, 3}, At: t0.Add(2 * h)}},
			},
		},
		{
			name: "issue: urgent 8-GPU job preempts two batch 4-GPU jobs",
			s: Snapshot{Nodes: []Node{
				run(run(h100Node("n1", 8), "b1", PriorityBatch, 5*h, true, 0, 1, 2, 3), "b2", PriorityBatch, 6*h, true, 4, 5, 6, 7)},
				Pending: []Job{job("u", PriorityUrgent, 8, h), job("small", PriorityNormal, 1, time.Minute)}},
			want: want{
				waits: map[string]wantWait{
					"u":     {code: WaitPreempting, reason: "preempting: stopping batch jobs b1, b2 on n1 for GPUs [0 1 2 3 4 5 6 7]", now: true},
					"small": {code: WaitNoRoom, reason: "no room: needs 1 GPU; the largest free block on any node is 0"},
				},
				preempt:  []Preemption{{ForJobID: "u", Node: "n1", Victims: []string{"b1", "b2"}, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}},
				reserved: []Reservation{{JobID: "u", Node: "n1", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, At: t0}},
			},
		},
		{
			name: "urgent job never preempts normal or urgent jobs, nor non-preemptible batch",
			s: Snapshot{Nodes: []Node{
				run(run(run(h100Node("n1", 8), "n", PriorityNormal, 5*h, true, 0, 1, 2), "u0", PriorityUrgent, 6*h, true, 3, 4, 5), "b", PriorityBatch, 7*h, false, 6, 7)},
				Pending: []Job{job("u", PriorityUrgent, 4, h)}},
			want: want{
				waits: map[string]wantWait{"u": {code: WaitNoRoom, reason: "first in line for GPUs [0 1 2 3] on n1", start: 6 * h}},
			},
		},
		{
			name: "preemption takes the fewest victims: one 8-GPU job over two 4-GPU jobs",
			s: Snapshot{Nodes: []Node{
				run(run(h100Node("a", 8), "a1", PriorityBatch, 5*h, true, 0, 1, 2, 3), "a2", PriorityBatch, 5*h, true, 4, 5, 6, 7),
				run(h100Node("b", 8), "b1", PriorityBatch, time.Minute, true, 0, 1, 2, 3, 4, 5, 6, 7)},
				Pending: []Job{job("u", PriorityUrgent, 8, h)}},
			want: want{preempt: []Preemption{{ForJobID: "u", Node: "b", Victims: []string{"b1"}, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}},
		},
		{
			name: "preemption ties: fewest GPUs stopped, then the victim furthest from its end",
			s: Snapshot{Nodes: []Node{
				run(run(run(h100Node("a", 8), "a-big", PriorityBatch, 9*h, true, 0, 1, 2, 3, 4, 5), "a-late", PriorityBatch, 9*h, true, 6), "a-soon", PriorityBatch, time.Minute, true, 7),
			}, Pending: []Job{job("u", PriorityUrgent, 1, h)}},
			want: want{preempt: []Preemption{{ForJobID: "u", Node: "a", Victims: []string{"a-late"}, GPUs: []int{6}}}},
		},
		{
			name: "urgent head takes free GPUs and victims' and holds them; the rest stay usable",
			s: Snapshot{Nodes: []Node{run(h100Node("n1", 8), "b", PriorityBatch, 5*h, true, 0, 1, 2, 3)},
				Pending: []Job{job("u", PriorityUrgent, 6, h), job("x", PriorityNormal, 2, time.Minute), job("y", PriorityNormal, 1, time.Minute)}},
			want: want{
				preempt: []Preemption{{ForJobID: "u", Node: "n1", Victims: []string{"b"}, GPUs: []int{0, 1, 2, 3, 4, 5}}},
				assign:  map[string]string{"x": "n1 [6 7]"},
				waits:   map[string]wantWait{"y": {code: WaitBehind, reason: "behind: job u"}},
			},
		},
		{
			name: "jobs already stopping make room: no second preemption",
			s: func() Snapshot {
				n := run(run(h100Node("n1", 8), "b1", PriorityBatch, 5*h, true, 0, 1, 2, 3), "b2", PriorityBatch, 5*h, true, 4, 5, 6, 7)
				n.Running[0].Stopping, n.Running[1].Stopping = true, true
				return Snapshot{Nodes: []Node{n}, Pending: []Job{job("u", PriorityUrgent, 8, h)}}
			}(),
			want: want{waits: map[string]wantWait{"u": {code: WaitPreempting, reason: "waiting for preempted jobs to stop on n1", now: true}}},
		},
		{
			name: "waiting behind one running job starts at its EndsAt",
			s: Snapshot{Nodes: []Node{run(h100Node("n1", 8), "r", PriorityNormal, 90*time.Minute, false, 0, 1, 2, 3, 4, 5, 6, 7)},
				Pending: []Job{job("a", 1, 8, h)}},
			want: want{waits: map[string]wantWait{"a": {code: WaitNoRoom, start: 90 * time.Minute}}},
		},
		{
			name: "a running job past its estimate is expected to end now",
			s: Snapshot{Nodes: []Node{run(h100Node("n1", 2), "r", PriorityNormal, -time.Hour, false, 0, 1)},
				Pending: []Job{job("a", 1, 2, h)}},
			want: want{waits: map[string]wantWait{"a": {code: WaitNoRoom, now: true}}},
		},
		{
			name: "estimates replay the queue: the second waiting job starts after the first",
			s: Snapshot{Nodes: []Node{run(h100Node("n1", 8), "r", PriorityNormal, h, false, 0, 1, 2, 3, 4, 5, 6, 7)},
				Pending: []Job{job("a", 1, 8, 2*h), job("b", 1, 8, h), job("c", 1, 4, h)}},
			want: want{waits: map[string]wantWait{
				"a": {code: WaitNoRoom, start: h},
				"b": {code: WaitNoRoom, start: 3 * h},
				"c": {code: WaitNoRoom, start: 4 * h},
			}},
		},
		{
			name: "job too big for any node blocks nothing",
			s: Snapshot{Nodes: []Node{h100Node("n1", 8), h100Node("n2", 8)},
				Pending: []Job{job("big", 0, 16, h), job("a", 1, 8, h)}},
			want: want{
				assign: map[string]string{"a": "n1 [0 1 2 3 4 5 6 7]"},
				waits:  map[string]wantWait{"big": {code: WaitNeverFits, reason: "cannot fit anywhere: needs 16 GPUs; the largest node has 8", start: -1}},
			},
		},
		{
			name: "no GPU of the model: cannot fit anywhere, blocks nothing",
			s: Snapshot{Nodes: []Node{h100Node("n1", 8)},
				Pending: []Job{{ID: "x", Priority: 1, Request: Request{GPUs: 1, Models: []string{"A100"}}, Estimate: h}, job("a", 1, 1, h)}},
			want: want{
				assign: map[string]string{"a": "n1 [0]"},
				waits:  map[string]wantWait{"x": {code: WaitNeverFits, reason: "cannot fit anywhere: no healthy GPU matches model A100", start: -1}},
			},
		},
		{
			name: "model matches as a case-insensitive substring; memory and health are checked",
			s: Snapshot{Nodes: []Node{
				{Name: "n1", GPUs: []GPU{
					{Index: 0, Name: h100, MemoryTotalMB: 81559, Healthy: false},
					{Index: 1, Name: h100, MemoryTotalMB: 81559, ForeignUsedMB: 50000, Healthy: true},
					{Index: 2, Name: a100, MemoryTotalMB: 40960, Healthy: true},
					{Index: 3, Name: h100, MemoryTotalMB: 81559, Healthy: true},
				}}},
				Pending: []Job{{ID: "x", Priority: 1, Request: Request{GPUs: 1, MinMemoryMB: 40 * 1024, Models: []string{"h100"}}, Estimate: h},
					{ID: "y", Priority: 1, Request: Request{GPUs: 1, MinMemoryMB: 40 * 1024, Models: []string{"h100"}}, Estimate: h},
					{ID: "z", Priority: 1, Request: Request{GPUs: 1, Models: []string{"A100", "L4"}}, Estimate: h}}},
			want: want{
				assign: map[string]string{"x": "n1 [3]", "z": "n1 [2]"},
				waits:  map[string]wantWait{"y": {code: WaitNoRoom, reason: "no room: needs 1 × ≥40 GB h100; the largest free block on any node is 0"}},
			},
		},
		{
			name: "too few matching GPUs on any one node",
			s: Snapshot{Nodes: []Node{
				{Name: "n1", GPUs: []GPU{{Index: 0, Name: h100, MemoryTotalMB: 81559, Healthy: true}, {Index: 1, Name: a100, MemoryTotalMB: 40960, Healthy: true}}},
				{Name: "n2", GPUs: []GPU{{Index: 0, Name: h100, MemoryTotalMB: 81559, Healthy: true}, {Index: 1, Name: a100, MemoryTotalMB: 40960, Healthy: true}}},
			}, Pending: []Job{{ID: "x", Priority: 1, Request: Request{GPUs: 2, Models: []string{"H100"}}, Estimate: h}}},
			want: want{waits: map[string]wantWait{"x": {code: WaitNeverFits, reason: "cannot fit anywhere: needs 2 × H100; at most 1 such healthy GPUs on one node"}}},
		},
		{
			name: "best fit: the tightest node, then fewer free GPUs, then the name",
			s: Snapshot{Nodes: []Node{
				h100Node("c", 8),
				run(h100Node("b", 8), "r1", 1, h, false, 0, 1, 2, 3, 4, 5),
				run(h100Node("a", 8), "r2", 1, h, false, 0, 1, 2, 3),
			}, Pending: []Job{job("x", 1, 2, h), job("y", 1, 4, h), job("z", 1, 1, h)}},
			want: want{assign: map[string]string{"x": "b [6 7]", "y": "a [4 5 6 7]", "z": "c [0]"}},
		},
		{
			name: "best fit ties on free matching GPUs: fewer free GPUs of any kind wins",
			s: Snapshot{Nodes: []Node{
				{Name: "a", GPUs: []GPU{{Index: 0, Name: h100, MemoryTotalMB: 81559, Healthy: true}, {Index: 1, Name: a100, MemoryTotalMB: 40960, Healthy: true}}},
				{Name: "b", GPUs: []GPU{{Index: 0, Name: h100, MemoryTotalMB: 81559, Healthy: true}}},
			}, Pending: []Job{{ID: "x", Priority: 1, Request: Request{GPUs: 1, Models: []string{"H100"}}, Estimate: h}}},
			want: want{assign: map[string]string{"x": "b [0]"}},
		},
		{
			name: "GPUs: aligned blocks, holes filled first",
			s: Snapshot{Nodes: []Node{run(h100Node("n1", 8), "r", 1, h, false, 1)},
				Pending: []Job{job("two", 1, 2, h), job("one", 1, 1, h), job("four", 1, 4, h)}},
			want: want{assign: map[string]string{"two": "n1 [2 3]", "one": "n1 [0]", "four": "n1 [4 5 6 7]"}},
		},
		{
			name: "backfill: a short job takes the head's GPUs, a long one only others",
			s: Snapshot{Nodes: []Node{run(h100Node("n1", 8), "r", 1, 2*h, false, 0, 1, 2, 3, 4, 5)},
				Pending: []Job{
					job("head", 1, 8, h),
					job("long", 1, 1, 3*h),   // would hold a reserved GPU past the shadow
					job("short", 1, 2, h),    // ends before the shadow: may use them
					job("short2", 1, 1, h)}}, // nothing left
			want: want{
				assign: map[string]string{"short": "n1 [6 7]"},
				waits: map[string]wantWait{
					"head":   {code: WaitNoRoom, start: 2 * h},
					"long":   {code: WaitBehind, reason: "behind: job head (backfill would delay it)", start: 3 * h},
					"short2": {code: WaitNoRoom},
				},
				reserved: []Reservation{{JobID: "head", Node: "n1", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, At: t0.Add(2 * h)}},
			},
		},
		{
			name: "backfill: a long job on GPUs the head will not take",
			s: Snapshot{Nodes: []Node{run(h100Node("n1", 8), "r", 1, 2*h, false, 0, 1, 2, 3)},
				Pending: []Job{job("head", 1, 6, h), job("long", 1, 2, 9*h), job("long2", 1, 1, 9*h)}},
			want: want{
				assign:   map[string]string{"long": "n1 [6 7]"},
				waits:    map[string]wantWait{"long2": {code: WaitBehind}},
				reserved: []Reservation{{JobID: "head", Node: "n1", GPUs: []int{0, 1, 2, 3, 4, 5}, At: t0.Add(2 * h)}},
			},
		},
		{
			name: "a held GPU whose job is unknown: no shadow, the head blocks nothing",
			s: func() Snapshot {
				n := h100Node("n1", 2)
				n.GPUs[0].JobID = "ghost"
				return Snapshot{Nodes: []Node{n}, Pending: []Job{job("a", 1, 2, h), job("b", 1, 1, 9*h)}}
			}(),
			want: want{
				assign: map[string]string{"b": "n1 [1]"},
				waits:  map[string]wantWait{"a": {code: WaitNoRoom, reason: "start unknown", start: -1}},
			},
		},
		{
			name: "CPU-only jobs take slots, best fit, and never block GPU jobs",
			s: Snapshot{Nodes: []Node{
				{Name: "a", CPUSlots: 4, CPUSlotsUsed: 1, Running: []Running{{JobID: "c0", Priority: 1, CPUSlots: 1, EndsAt: t0.Add(h)}}},
				{Name: "b", CPUSlots: 2},
				h100Node("g", 1),
			}, Pending: []Job{cpuJob("c1", 2, h), cpuJob("c2", 3, h), job("gpu", 1, 1, h), cpuJob("c3", 1, h), cpuJob("c4", 9, h)}},
			want: want{
				assign: map[string]string{"c1": "b cpu=2", "c2": "a cpu=3", "gpu": "g [0]"},
				waits: map[string]wantWait{
					"c3": {code: WaitCPUFull, reason: "cpu slots full: needs 1 CPU slot; the most free on any node is 0; first in line on b", start: h},
					"c4": {code: WaitNeverFits, reason: "cannot fit anywhere: needs 9 CPU slots; the largest node has 4", start: -1},
				},
			},
		},
		{
			name: "CPU backfill: a long job may take the slots the CPU head leaves over",
			s: Snapshot{Nodes: []Node{
				{Name: "a", CPUSlots: 4, CPUSlotsUsed: 3, Running: []Running{
					{JobID: "r1", CPUSlots: 2, EndsAt: t0.Add(h)}, {JobID: "r2", CPUSlots: 1, EndsAt: t0.Add(5 * h)}}},
			}, Pending: []Job{cpuJob("head", 2, h), cpuJob("long", 1, 9*h)}},
			want: want{
				assign:   map[string]string{"long": "a cpu=1"},
				reserved: []Reservation{{JobID: "head", Node: "a", CPUSlots: 2, At: t0.Add(h)}},
			},
		},
		{
			name: "CPU backfill: only within the slots the CPU head leaves over",
			s: Snapshot{Nodes: []Node{
				{Name: "a", CPUSlots: 4, CPUSlotsUsed: 3, Running: []Running{
					{JobID: "r1", CPUSlots: 1, EndsAt: t0.Add(h)}, {JobID: "r2", CPUSlots: 2, EndsAt: t0.Add(5 * h)}}},
			}, Pending: []Job{cpuJob("head", 2, h), cpuJob("long", 1, 9*h), cpuJob("short", 1, time.Minute)}},
			want: want{
				assign: map[string]string{"short": "a cpu=1"},
				waits: map[string]wantWait{
					"head": {code: WaitCPUFull, start: h},
					"long": {code: WaitBehind, reason: "behind: job head"},
				},
				reserved: []Reservation{{JobID: "head", Node: "a", CPUSlots: 2, At: t0.Add(h)}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.Now = t0
			before := cloneSnapshot(tc.s)
			p := Place(tc.s)
			if !reflect.DeepEqual(before, tc.s) {
				t.Fatal("Place modified its snapshot")
			}
			checkPlan(t, tc.s, p)
			checkWant(t, p, tc.want)
		})
	}
}

func checkWant(t *testing.T, p Plan, w want) {
	t.Helper()
	for id, where := range w.assign {
		a, ok := assignOf(p, id)
		if !ok {
			wt, _ := waitOf(p, id)
			t.Errorf("%s: not assigned; waits: %s", id, wt.Reason)
			continue
		}
		got := a.Node + " " + fmtInts(a.GPUs)
		if a.CPUSlots > 0 {
			got = a.Node + " cpu=" + itoa(a.CPUSlots)
		}
		if got != where {
			t.Errorf("%s: assigned %q, want %q", id, got, where)
		}
	}
	for id, ww := range w.waits {
		wt, ok := waitOf(p, id)
		if !ok {
			a, _ := assignOf(p, id)
			t.Errorf("%s: not waiting; assigned %+v", id, a)
			continue
		}
		if wt.Code != ww.code {
			t.Errorf("%s: code %q, want %q (reason %q)", id, wt.Code, ww.code, wt.Reason)
		}
		if !strings.Contains(wt.Reason, ww.reason) {
			t.Errorf("%s: reason %q, want it to contain %q", id, wt.Reason, ww.reason)
		}
		switch {
		case ww.now && !wt.EstimatedStart.Equal(t0):
			t.Errorf("%s: estimated start %v, want now", id, wt.EstimatedStart)
		case ww.start == -1 && !wt.EstimatedStart.IsZero():
			t.Errorf("%s: estimated start %v, want unknown", id, wt.EstimatedStart)
		case ww.start > 0 && !wt.EstimatedStart.Equal(t0.Add(ww.start)):
			t.Errorf("%s: estimated start %v, want now+%v", id, wt.EstimatedStart.Sub(t0), ww.start)
		}
	}
	if w.preempt != nil && !reflect.DeepEqual(p.Preempt, w.preempt) {
		t.Errorf("preempt = %+v, want %+v", p.Preempt, w.preempt)
	}
	if w.reserved != nil && !reflect.DeepEqual(p.Reserved, w.reserved) {
		t.Errorf("reserved = %+v, want %+v", p.Reserved, w.reserved)
	}
	if t.Failed() {
		for _, a := range p.Assign {
			t.Logf("assign %+v", a)
		}
		for _, wt := range p.Waits {
			t.Logf("wait %+v", wt)
		}
	}
}

func itoa(n int) string { return fmtInts([]int{n})[1 : len(fmtInts([]int{n}))-1] }

func TestPlaceWaitPositions(t *testing.T) {
	s := Snapshot{Now: t0, Nodes: []Node{h100Node("n1", 2)}, Pending: []Job{
		job("a", 1, 1, time.Hour), job("b", 1, 4, time.Hour), job("c", 1, 1, time.Hour), job("d", 1, 2, time.Hour), job("e", 1, 1, time.Hour)}}
	p := Place(s)
	var got []string
	for _, w := range p.Waits {
		got = append(got, w.JobID+"@"+itoa(w.Position))
	}
	if want := []string{"b@1", "d@2", "e@3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

func TestPlaceDeterministicAcrossListingOrder(t *testing.T) {
	h := time.Hour
	s := Snapshot{Now: t0, Nodes: []Node{
		run(run(h100Node("c", 8), "r1", 2, 3*h, true, 0, 1), "r2", 2, 2*h, true, 4, 5, 6),
		run(h100Node("a", 4), "r3", 1, h, false, 3),
		h100Node("b", 2),
	}, Pending: []Job{job("u", 0, 8, h), job("x", 1, 2, h), job("y", 1, 1, 5*h), job("z", 2, 4, h)}}
	want := Place(s)
	r := cloneSnapshot(s)
	r.Nodes[0], r.Nodes[2] = r.Nodes[2], r.Nodes[0]
	for i := range r.Nodes {
		n := &r.Nodes[i]
		for a, b := 0, len(n.GPUs)-1; a < b; a, b = a+1, b-1 {
			n.GPUs[a], n.GPUs[b] = n.GPUs[b], n.GPUs[a]
		}
		for a, b := 0, len(n.Running)-1; a < b; a, b = a+1, b-1 {
			n.Running[a], n.Running[b] = n.Running[b], n.Running[a]
		}
	}
	if got := Place(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("plan depends on listing order:\n got %+v\nwant %+v", got, want)
	}
	if again := Place(s); !reflect.DeepEqual(again, want) {
		t.Fatal("same snapshot, different plan")
	}
}

func TestPickGPUs(t *testing.T) {
	tests := []struct {
		free string // one char per rank: 'x' candidate, '.' not
		k    int
		want []int
	}{
		{"xxxxxxxx", 1, []int{0}},
		{"xxxxxxxx", 3, []int{0, 1, 2}},
		{"xxxxxxxx", 8, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"x.xxxxxx", 1, []int{0}},          // the hole next to a busy GPU
		{"x.xxxxxx", 2, []int{2, 3}},       // a pair, not 0+2
		{"x.xxxxxx", 4, []int{4, 5, 6, 7}}, // a whole quad
		{"xx.xx.xx", 2, []int{0, 1}},
		{"x..xx..x", 2, []int{0, 3}}, // no free pair: the lowest of two equal quads
		{"..x.x.x.", 2, []int{4, 6}}, // the quad that holds two
		{"xxxxx", 4, []int{0, 1, 2, 3}},
		{"....xxxxxx", 2, []int{8, 9}}, // tightest quad-level parent
	}
	for _, tc := range tests {
		cand := make([]bool, len(tc.free))
		for i, c := range tc.free {
			cand[i] = c == 'x'
		}
		if got := pickGPUs(cand, tc.k); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("pickGPUs(%s, %d) = %v, want %v", tc.free, tc.k, got, tc.want)
		}
	}
}

// TestJoins: the plan says when a new job joining at each priority would
// start, after the waiting jobs of that priority or more urgent ones.
func TestJoins(t *testing.T) {
	now := t0
	node := run(h100Node("a", 8), "r1", PriorityNormal, 2*time.Hour, false, 0, 1, 2, 3, 4, 5)
	// r1 holds 0-5 for 2h; an urgent 2-GPU job takes 6-7 now, for 1h; a
	// normal 4-GPU job waits.
	plan := Place(Snapshot{Now: now, Nodes: []Node{node}, Pending: []Job{
		job("u", PriorityUrgent, 2, time.Hour), job("n", PriorityNormal, 4, 3*time.Hour),
	}})
	at := map[[2]int]time.Duration{}
	for _, jn := range plan.Joins {
		at[[2]int{jn.Priority, jn.GPUs}] = jn.At.Sub(now)
	}
	want := map[[2]int]time.Duration{
		// urgent: behind u (on GPUs 6-7 now, for 1h); r1 frees 0-5 at 2h.
		{0, 1}: time.Hour, {0, 2}: time.Hour, {0, 4}: 2 * time.Hour, {0, 8}: 2 * time.Hour,
		// normal: also behind n, the head, reserved on 0-3 from 2h to 5h:
		// 6-7 free at 1h, 4-5 at 2h, all 8 at 5h.
		{1, 1}: time.Hour, {1, 2}: time.Hour, {1, 4}: 2 * time.Hour, {1, 8}: 5 * time.Hour,
		{2, 4}: 2 * time.Hour, {2, 8}: 5 * time.Hour,
	}
	for k, w := range want {
		if got, ok := at[k]; !ok || got != w {
			t.Errorf("join priority %d, %d GPUs: %v (present %v); want %v", k[0], k[1], got, ok, w)
		}
	}
	if len(plan.Joins) != 12 { // 3 priorities × 1, 2, 4, 8
		t.Errorf("%d joins; want 12: %+v", len(plan.Joins), plan.Joins)
	}
	if p := Place(Snapshot{Now: now}); len(p.Joins) != 0 {
		t.Errorf("no nodes: joins %+v; want none", p.Joins)
	}
}

// TestExpectedVersusBound: estimates (EstimatedStart, Joins) replay jobs at
// their expected run times, while backfill keeps to the bounds: r1 holds
// GPU 0 with a bound of 10h but is expected to end in 1h; the head h (2
// GPUs) is expected to start in 1h, not 10h; b (1 GPU, bound 5h, expected
// 30m) backfills on GPU 1 because its bound ends before the head's shadow
// time (10h, from bounds). Without the expectations every estimate is the
// bounds' (the control).
func TestExpectedVersusBound(t *testing.T) {
	for _, expected := range []bool{true, false} {
		node := run(h100Node("a", 2), "r1", PriorityNormal, 10*time.Hour, false, 0)
		h, b := job("h", PriorityNormal, 2, 4*time.Hour), job("b", PriorityNormal, 1, 5*time.Hour)
		if expected {
			node.Running[0].ExpectedEnd = t0.Add(time.Hour)
			h.Expected, b.Expected = 2*time.Hour, 30*time.Minute
		}
		plan := Place(Snapshot{Now: t0, Nodes: []Node{node}, Pending: []Job{h, b}})
		if len(plan.Assign) != 1 || plan.Assign[0].JobID != "b" {
			t.Fatalf("expected %v: assigned %+v; want b backfilled", expected, plan.Assign)
		}
		wantStart, wantJoin := 10*time.Hour, 14*time.Hour // bounds: r1 to 10h, then h 4h
		if expected {
			wantStart, wantJoin = time.Hour, 3*time.Hour // r1 to 1h, then h 2h
		}
		if len(plan.Waits) != 1 || plan.Waits[0].EstimatedStart.Sub(t0) != wantStart {
			t.Errorf("expected %v: waits %+v; want h estimated to start in %s", expected, plan.Waits, wantStart)
		}
		for _, jn := range plan.Joins {
			if jn.Priority == PriorityNormal && jn.GPUs == 2 && jn.At.Sub(t0) != wantJoin {
				t.Errorf("expected %v: a new 2-GPU job joins at %s; want %s", expected, jn.At.Sub(t0), wantJoin)
			}
		}
	}
}
