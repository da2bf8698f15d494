package placement

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// benchSnapshot is 10,000 pending jobs (1, 2, 4 and 8 GPUs, urgent, normal
// and batch, some with a model or a memory floor, about one in eight
// CPU-only) for 64 nodes × 8 H100s with 8 CPU slots each. With busy, every
// GPU and half the slots are held by running jobs ending over the next ten
// hours, about a third of them preemptible batch jobs.
func benchSnapshot(busy bool) Snapshot {
	r := rand.New(rand.NewSource(1))
	s := Snapshot{Now: t0}
	for n := range 64 {
		nd := h100Node(fmt.Sprintf("gpu-%02d", n), 8)
		nd.CPUSlots = 8
		if busy {
			for g := 0; g < 8; {
				size := []int{1, 2, 4, 8}[r.Intn(4)]
				size = min(size, 8-g)
				idx := make([]int, size)
				for x := range idx {
					idx[x] = g + x
				}
				nd = run(nd, fmt.Sprintf("run-%02d-%d", n, g), r.Intn(3), time.Duration(1+r.Intn(600))*time.Minute, r.Intn(2) == 0, idx...)
				g += size
			}
			nd.Running = append(nd.Running, Running{JobID: fmt.Sprintf("cpu-%02d", n), Priority: 1, CPUSlots: 4, EndsAt: t0.Add(time.Duration(1+r.Intn(600)) * time.Minute)})
			nd.CPUSlotsUsed = 4
		}
		s.Nodes = append(s.Nodes, nd)
	}
	for i := range 10000 {
		j := Job{ID: fmt.Sprintf("job-%05d", i), Priority: []int{0, 1, 1, 1, 2, 2, 2, 2, 2, 2}[r.Intn(10)],
			Estimate: time.Duration(10+r.Intn(24*60)) * time.Minute}
		switch x := r.Intn(16); {
		case x < 2:
			j.Request.CPUSlots = 1 + r.Intn(2)
		case x < 4:
			j.Request = Request{GPUs: []int{1, 2, 4, 8}[r.Intn(4)], Models: []string{"H100"}}
		case x < 6:
			j.Request = Request{GPUs: []int{1, 2, 4, 8}[r.Intn(4)], MinMemoryMB: 40 * 1024}
		default:
			j.Request = Request{GPUs: []int{1, 1, 2, 2, 4, 8}[r.Intn(6)]}
		}
		s.Pending = append(s.Pending, j)
	}
	slices.SortStableFunc(s.Pending, func(a, b Job) int { return a.Priority - b.Priority })
	return s
}

// BenchmarkPlace10kOn64x8 places 10,000 pending jobs onto 64 idle 8-GPU
// nodes: a few hundred start, the rest wait with reasons and estimates.
func BenchmarkPlace10kOn64x8(b *testing.B) {
	benchPlace(b, benchSnapshot(false))
}

// BenchmarkPlace10kOn64x8Busy is the same queue on a full pool: nothing
// fits, an urgent job preempts, and every job gets a reason and an estimate.
func BenchmarkPlace10kOn64x8Busy(b *testing.B) {
	benchPlace(b, benchSnapshot(true))
}

func benchPlace(b *testing.B, s Snapshot) {
	p := Place(s)
	b.Logf("%d assigned, %d waiting, %d preempted", len(p.Assign), len(p.Waits), len(p.Preempt))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		Place(s)
	}
}
