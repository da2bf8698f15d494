package sim

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// week is the block of a bootstrap resample: a trace's weekly rhythm
// (weekdays, weekends) stays whole inside a block.
const week = 7 * 24 * time.Hour

// ResampleWeeks is resample b of jobs by week, a block bootstrap: the
// trace's span from its first submission is cut into weeks; as many weeks
// as it has are drawn with replacement (from a PCG seeded with seed and b),
// and each drawn week's jobs fill the slot of the week they stand in for,
// at the same offset within it. Job ids get "/b<b>w<slot>" so that a week
// drawn twice holds distinct jobs. The same (jobs, seed, b) gives the same
// resample; jobs is not modified. Fewer than two weeks: jobs as they are.
func ResampleWeeks(jobs []Job, seed uint64, b int) []Job {
	if len(jobs) == 0 {
		return nil
	}
	first := jobs[0].Submit
	last := first
	for _, j := range jobs {
		first, last = min(first, j.Submit), max(last, j.Submit)
	}
	weeks := int((last-first)/week) + 1
	if weeks < 2 {
		return slices.Clone(jobs)
	}
	byWeek := make([][]Job, weeks)
	for _, j := range jobs {
		w := int((j.Submit - first) / week)
		byWeek[w] = append(byWeek[w], j)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed<<32|uint64(b)))
	out := make([]Job, 0, len(jobs))
	for slot := range weeks {
		w := rng.IntN(weeks)
		shift := time.Duration(slot-w) * week
		for _, j := range byWeek[w] {
			j.Submit += shift
			j.ID += "/b" + strconv.Itoa(b) + "w" + strconv.Itoa(slot)
			out = append(out, j)
		}
	}
	slices.SortStableFunc(out, func(a, b Job) int { return cmp.Compare(a.Submit, b.Submit) })
	return out
}

// OptimumInterval is the central share (0.9: the 5th to the 95th
// percentile, nearest rank) of the optima of bootstrap resamples.
func OptimumInterval(optima []int, share float64) (lo, hi int) {
	if len(optima) == 0 {
		return 0, 0
	}
	s := slices.Clone(optima)
	slices.Sort(s)
	tail := (1 - share) / 2
	at := func(q float64) int {
		i := int(q*float64(len(s)) + 0.5)
		return s[min(max(i, 0), len(s)-1)]
	}
	return at(tail), at(1 - tail - 1/float64(len(s)))
}
