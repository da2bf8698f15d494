package scheduler

import (
	"time"
)

// refJob is a job for the clairvoyant reference.
type refJob struct {
	submit, dur time.Duration
	gpus        int
}

// refOutcome is what the reference did with one job.
type refOutcome struct {
	wait   time.Duration
	rented bool
}

// clairvoyant is the reference policy of issue #15, for tests only:
// conservative backfilling over a pool of owned GPUs (any job of at most
// owned GPUs fits; no nodes), knowing every job's duration in advance. Jobs
// are taken in submit order; each gets the earliest start at or after its
// submit at which its GPUs are free for its whole duration, given every
// reservation made before it (so no job delays an earlier one); a job whose
// start would be later than maxWait after its submit is rented at submit
// instead (wait 0). It is the best a policy that never reorders and never
// preempts could do with perfect knowledge, not a lower bound on every
// policy.
func clairvoyant(jobs []refJob, owned int, maxWait time.Duration) []refOutcome {
	// prof is a step function of the GPUs in use: prof[k] holds from
	// times[k] until times[k+1] (the last forever). It starts at 0 in use.
	times := []time.Duration{0}
	used := []int{0}
	out := make([]refOutcome, len(jobs))
	// split makes t a breakpoint and returns its index.
	split := func(t time.Duration) int {
		lo, hi := 0, len(times)
		for lo < hi {
			m := (lo + hi) / 2
			if times[m] <= t {
				lo = m + 1
			} else {
				hi = m
			}
		}
		k := lo - 1 // times[k] <= t
		if times[k] == t {
			return k
		}
		times = append(times, 0)
		used = append(used, 0)
		copy(times[k+2:], times[k+1:])
		copy(used[k+2:], used[k+1:])
		times[k+1], used[k+1] = t, used[k]
		return k + 1
	}
	first := 0 // breakpoints before first are in the past of every later submit
	for i, j := range jobs {
		if j.gpus > owned {
			out[i] = refOutcome{rented: true}
			continue
		}
		for first+1 < len(times) && times[first+1] <= j.submit {
			first++
		}
		// Find the earliest start: candidate starts are submit and the
		// breakpoints after it.
		start := time.Duration(-1)
		for k := first; k < len(times); k++ {
			t := max(times[k], j.submit)
			if t-j.submit > maxWait {
				break
			}
			ok := true
			for m := k; m < len(times) && times[m] < t+j.dur; m++ {
				if used[m]+j.gpus > owned {
					ok = false
					break
				}
			}
			if ok {
				start = t
				break
			}
		}
		if start < 0 {
			out[i] = refOutcome{rented: true}
			continue
		}
		out[i] = refOutcome{wait: start - j.submit}
		if j.dur <= 0 {
			continue
		}
		a := split(start)
		b := split(start + j.dur)
		for m := a; m < b; m++ {
			used[m] += j.gpus
		}
	}
	return out
}
