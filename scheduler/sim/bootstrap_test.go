package sim

import (
	"slices"
	"testing"
	"time"
)

// TestResampleWeeks: a resample holds whole weeks of the trace at their
// offsets within the week, as many weeks as the trace spans, in submit
// order, with distinct ids; the same seed and index give the same
// resample, another index another one.
func TestResampleWeeks(t *testing.T) {
	var jobs []Job
	for w := range 4 {
		for k := range w + 1 { // week w holds w+1 jobs: a week is known by its size
			jobs = append(jobs, Job{ID: string(rune('a'+w)) + string(rune('0'+k)), Submit: time.Duration(w)*week + time.Duration(k)*time.Hour, Duration: time.Hour, GPUs: 1})
		}
	}
	r := ResampleWeeks(jobs, 1, 0)
	ids := map[string]bool{}
	perSlot := make([]int, 4)
	for i, j := range r {
		if i > 0 && j.Submit < r[i-1].Submit {
			t.Fatalf("not in submit order at %d", i)
		}
		if ids[j.ID] {
			t.Fatalf("id %s twice", j.ID)
		}
		ids[j.ID] = true
		slot := int(j.Submit / week)
		if off := j.Submit - time.Duration(slot)*week; off%time.Hour != 0 || off > 3*time.Hour {
			t.Fatalf("job %s at offset %v within its week", j.ID, off)
		}
		perSlot[slot]++
	}
	for slot, n := range perSlot {
		if n < 1 || n > 4 {
			t.Fatalf("slot %d holds %d jobs; want one whole week of 1 to 4", slot, n)
		}
	}
	if again := ResampleWeeks(jobs, 1, 0); !slices.EqualFunc(r, again, func(a, b Job) bool { return a.ID == b.ID && a.Submit == b.Submit }) {
		t.Fatal("the same seed and index gave another resample")
	}
	differs := false
	for b := 1; b < 20 && !differs; b++ {
		o := ResampleWeeks(jobs, 1, b)
		differs = len(o) != len(r) || !slices.EqualFunc(r, o, func(a, b Job) bool { return a.Submit == b.Submit })
	}
	if !differs {
		t.Fatal("twenty resamples were all the same")
	}
	if jobs[0].ID != "a0" || len(jobs) != 10 {
		t.Fatal("the trace was modified")
	}
}

// TestOptimumInterval: the 5th to 95th percentile of optima by nearest
// rank.
func TestOptimumInterval(t *testing.T) {
	var optima []int
	for i := range 20 {
		optima = append(optima, 16*(i%5+4)) // 64 … 128, four each
	}
	if lo, hi := OptimumInterval(optima, 0.9); lo != 64 || hi != 128 {
		t.Fatalf("interval %d–%d; want 64–128", lo, hi)
	}
	if lo, hi := OptimumInterval([]int{96}, 0.9); lo != 96 || hi != 96 {
		t.Fatalf("one resample: %d–%d", lo, hi)
	}
}
