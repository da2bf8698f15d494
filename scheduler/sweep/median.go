package sweep

import (
	"fmt"
	"math"
	"sort"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Median decides median stopping for the running trials of a grid or
// random sweep (the median stopping rule, Golovin et al., "Google Vizier",
// KDD 2017). For each running trial whose latest point (the last of its
// History) is at step s ≥ grace: the other trials' values at s are each
// one's ValueAt(History, s), counting only trials whose history reaches a
// step ≥ s, in any state (ended trials count too). When at least minTrials
// of them (and at least one) are there and the trial's value is strictly
// worse than their median (the mean of the two middle ones for an even
// count), it is asked to stop (RequestStop, jobtype.ReasonMedianStopping).
// A NaN is the worst value there is. A trial already asked to stop
// (StopRequested) is not asked again. Actions are ordered by index; an
// unknown goal gives none.
func Median(grace, minTrials int, goal string, trials []Trial) []Action {
	sc, ok := newScorer(goal)
	if !ok {
		return nil
	}
	minTrials = max(minTrials, 1)
	var acts []Action
	for i, t := range trials {
		if t.State != jobtype.StateRunning || t.StopRequested != "" || len(t.History) == 0 {
			continue
		}
		last := t.History[len(t.History)-1]
		if last.Step < grace {
			continue
		}
		peers := peerLosses(sc, trials, i, last.Step)
		if len(peers) < minTrials {
			continue
		}
		med := medianOf(peers)
		if math.IsNaN(med) || sc.loss(last.Value) <= med { // NaN: +Inf and -Inf peers, no median
			continue
		}
		acts = append(acts, Action{
			Kind: RequestStop, ID: t.ID, Index: t.Index, Reason: jobtype.ReasonMedianStopping,
			Message: fmt.Sprintf("step %d: objective %.4g is worse than the median %.4g of %d other trials at that step",
				last.Step, last.Value, sc.value(med), len(peers)),
		})
	}
	return sortActions(acts)
}

// peerLosses returns the losses at step of every trial but trials[self]
// whose history reaches step and has a point at or before it.
func peerLosses(sc scorer, trials []Trial, self, step int) []float64 {
	var losses []float64
	for j, o := range trials {
		if j == self || Reached(o.History) < step {
			continue
		}
		if v, ok := ValueAt(o.History, step); ok {
			losses = append(losses, sc.loss(v))
		}
	}
	return losses
}

// medianOf returns the median of xs (not empty); xs is sorted in place.
func medianOf(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
