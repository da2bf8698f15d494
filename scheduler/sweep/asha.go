package sweep

import (
	"fmt"
	"sort"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// ASHA decides promotions and stops for the paused trials of an ASHA sweep
// (asynchronous successive halving, Li et al., MLSys 2020). rungs are the
// rungs' steps (Rungs), eta is η, waiting the number of trials not admitted
// yet (they may or may not be in trials as well, as queued at rung 0).
//
// Who reported at rung k (k below the last rung): a trial paused at k, a
// trial whose Rung is above k (promoted past k, whatever it does now), a
// succeeded trial (it ran every rung), and a trial stopped at k whose
// history reaches rungs[k]. A failed or cancelled trial does not report at
// its own rung. Each reporter's value at k is ValueAt(History, rungs[k]); a
// reporter without one ranks last, as does a NaN.
//
// With n_k reporters at k, ranked by goal (ties by index), a trial paused
// at k is promoted to k+1 when it ranks in the top ⌊n_k/η⌋ and fewer than
// ⌊n_k/η⌋ trials have been promoted from k (trials with Rung > k, and the
// promotions of this call, best first): it does not wait for the rung to
// fill. Rung k is closed when no trial can report at it any more (waiting
// is 0 and every trial that has not ended reported at k); then every paused
// trial in the top ⌊n_k/η⌋ is promoted even past the quota (a better trial
// that reported late still goes on; early promotions are ASHA's price for
// not waiting), and the others paused at k end stopped
// (jobtype.ReasonNotPromoted). A closed rung with fewer than η reporters
// promotes its best one, so a sweep always trains a trial to the end.
//
// Decisions are taken rung by rung from the bottom, each seeing the ones
// below it (a trial stopped at rung 0 no longer keeps rung 1 open), so one
// call does all that the snapshot allows. Actions are ordered by index;
// trials is not changed. Nonsense settings (an unknown goal, η < 2, rungs
// not positive and strictly increasing) give no action, as do paused
// trials whose Rung is the last one or beyond.
func ASHA(rungs []int, eta int, goal string, trials []Trial, waiting int) []Action {
	sc, ok := newScorer(goal)
	if !ok || eta < 2 || !validRungs(rungs) || len(rungs) < 2 {
		return nil
	}
	l := ladder{rungs: rungs, eta: eta, sc: sc, waiting: waiting}
	l.trials = make([]Trial, len(trials))
	copy(l.trials, trials)
	for i := range l.trials {
		l.trials[i].Rung = max(l.trials[i].Rung, 0)
	}
	var acts []Action
	for k := 0; k < len(rungs)-1; k++ {
		acts = append(acts, l.decide(k)...)
	}
	return sortActions(acts)
}

// ladder is one ASHA call's working state: a copy of the trials on which
// each rung's decisions are applied before the next rung is looked at.
type ladder struct {
	rungs   []int
	eta     int
	sc      scorer
	waiting int
	trials  []Trial
}

// report is one trial's result at a rung.
type report struct {
	pos   int // in ladder.trials
	loss  float64
	value float64
	ok    bool // false: no value at the rung (ranks last)
}

// reportedAt reports whether t reported at rung k.
func (l *ladder) reportedAt(t Trial, k int) bool {
	switch {
	case t.State == jobtype.StateSucceeded || t.Rung > k:
		return true
	case t.Rung < k:
		return false
	case t.State == jobtype.StatePaused:
		return true
	case t.State == jobtype.StateStopped:
		return Reached(t.History) >= l.rungs[k]
	}
	return false
}

// reports ranks the trials that reported at rung k, best first.
func (l *ladder) reports(k int) []report {
	var reps []report
	for i, t := range l.trials {
		if !l.reportedAt(t, k) {
			continue
		}
		r := report{pos: i}
		if v, ok := ValueAt(t.History, l.rungs[k]); ok {
			r.value, r.loss, r.ok = v, l.sc.loss(v), true
		}
		reps = append(reps, r)
	}
	sort.SliceStable(reps, func(i, j int) bool {
		a, b := reps[i], reps[j]
		if a.ok != b.ok {
			return a.ok
		}
		if a.ok && a.loss != b.loss {
			return a.loss < b.loss
		}
		return l.trials[a.pos].Index < l.trials[b.pos].Index
	})
	return reps
}

// closed reports whether no trial can still report at rung k.
func (l *ladder) closed(k int) bool {
	if l.waiting > 0 {
		return false
	}
	for _, t := range l.trials {
		if !t.State.Terminal() && !l.reportedAt(t, k) {
			return false
		}
	}
	return true
}

// decide promotes and stops the trials paused at rung k, and applies its
// decisions to l.trials.
func (l *ladder) decide(k int) []Action {
	reps := l.reports(k)
	quota := len(reps) / l.eta
	promoted := 0
	for _, r := range reps {
		if l.trials[r.pos].Rung > k {
			promoted++
		}
	}
	closed := l.closed(k)
	top := quota
	if closed && len(reps) > 0 {
		top = max(top, 1)
	}
	var acts []Action
	for rank, r := range reps {
		t := &l.trials[r.pos]
		if t.State != jobtype.StatePaused || t.Rung != k {
			continue
		}
		switch {
		case rank < top && (closed || promoted < quota):
			acts = append(acts, l.promote(t, k, rank, len(reps), r))
			promoted++
		case closed:
			acts = append(acts, l.stop(t, k, rank, len(reps), top, r))
		}
	}
	return acts
}

// promote moves t (paused at k) on to rung k+1.
func (l *ladder) promote(t *Trial, k, rank, n int, r report) Action {
	next := k + 1
	limit := l.rungs[next]
	if next == len(l.rungs)-1 {
		limit = 0
	}
	msg := fmt.Sprintf("%s: rank %d of %d, objective %s; promoted to rung %d (%d steps)",
		l.rungName(k), rank+1, n, valueText(r), next, l.rungs[next])
	t.State, t.Rung, t.StopAtStep = jobtype.StateQueued, next, limit
	return Action{Kind: Promote, ID: t.ID, Index: t.Index, Rung: next, StopAtStep: limit, Message: msg}
}

// stop ends t (paused at k, not promoted when k closed).
func (l *ladder) stop(t *Trial, k, rank, n, top int, r report) Action {
	msg := fmt.Sprintf("%s: rank %d of %d, objective %s; top %d promoted",
		l.rungName(k), rank+1, n, valueText(r), top)
	t.State = jobtype.StateStopped
	return Action{Kind: Stop, ID: t.ID, Index: t.Index, Reason: jobtype.ReasonNotPromoted, Message: msg}
}

func (l *ladder) rungName(k int) string {
	return fmt.Sprintf("rung %d (%d steps)", k, l.rungs[k])
}

func valueText(r report) string {
	if !r.ok {
		return "none"
	}
	return fmt.Sprintf("%.4g", r.value)
}
