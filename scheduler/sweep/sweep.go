// Package sweep holds the sweep duty's pure decisions (docs/sweeps.md):
// ASHA's rungs, promotions and stops (asynchronous successive halving, Li
// et al., MLSys 2020), median stopping (Golovin et al., Google Vizier), and
// the leaderboard order. It reads what the store says about each trial and
// returns actions; the scheduler's sweep duty applies them with the store's
// compare-and-set scripts. No Redis, no clock, no randomness: the same
// trials always give the same actions, in the same order (by trial index).
//
// Bad input never panics. ASHA and Median return no action when their
// settings are nonsense (an unknown goal, η < 2, rungs not strictly
// increasing), since a decision that stops trials must not rest on a
// misread setting; Rungs returns nil or a single rung (see its doc).
package sweep

import (
	"math"
	"sort"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Goals.
const (
	Minimize = "minimize"
	Maximize = "maximize"
)

// Point is one objective value of a trial at a step.
type Point struct {
	Step  int
	Value float64
}

// Trial is what the duty knows about one trial.
type Trial struct {
	ID    string
	Index int
	State jobtype.State
	// Rung is the last ASHA rung the trial reached or runs toward
	// (TrialInfo.Rung), StopAtStep its attempt's step limit.
	Rung       int
	StopAtStep int
	// History is the trial's objective, step by step (its eval lines),
	// oldest first; the last point of a paused or succeeded trial is its
	// value at its rung's end. A step may appear twice (an attempt that
	// resumed from an earlier checkpoint evaluates it again): the later
	// point wins.
	History []Point
	// StopRequested is TrialInfo.StopRequested: a running trial the sweep
	// already asked to stop, which Median does not ask again.
	StopRequested string
}

// ActionKind is what the duty does to a trial.
type ActionKind string

// The actions.
const (
	Promote     ActionKind = "promote"      // a paused trial goes on to Rung (store.Promote)
	Stop        ActionKind = "stop"         // a paused trial ends stopped (store.Stop)
	RequestStop ActionKind = "request stop" // a running trial is asked to stop (store.Stop)
)

// Action is one decision about one trial.
type Action struct {
	Kind       ActionKind
	ID         string
	Index      int // the trial's index (actions are ordered by it)
	Rung       int // Promote: the rung it goes to
	StopAtStep int // Promote: that rung's step limit (0: the last rung, run to the end)
	Reason     string
	Message    string
}

// Rungs are the step counts of ASHA's rungs: min, min·η, min·η², … while
// below max, and always ending with max (Rungs(10, 90, 3) = [10 30 90],
// Rungs(10, 100, 3) = [10 30 90 100]).
//
// Nonsense gives what is still safe to run: nil when maxSteps < 1 (no run
// at all); a single rung [maxSteps] (an ordinary run, nothing paused) when
// minSteps < 1, minSteps ≥ maxSteps or eta < 2. A product that would pass
// maxSteps is never computed, so huge inputs do not overflow.
func Rungs(minSteps, maxSteps, eta int) []int {
	if maxSteps < 1 {
		return nil
	}
	if minSteps < 1 || minSteps >= maxSteps || eta < 2 {
		return []int{maxSteps}
	}
	var rungs []int
	for r := minSteps; r < maxSteps; r *= eta {
		rungs = append(rungs, r)
		if r > maxSteps/eta { // r·η > maxSteps: the next one is maxSteps itself
			break
		}
	}
	return append(rungs, maxSteps)
}

// validRungs reports whether rungs are positive and strictly increasing.
func validRungs(rungs []int) bool {
	if len(rungs) == 0 || rungs[0] < 1 {
		return false
	}
	for i := 1; i < len(rungs); i++ {
		if rungs[i] <= rungs[i-1] {
			return false
		}
	}
	return true
}

// Objective returns a history's last value (the trial's latest objective);
// false when the history is empty.
func Objective(history []Point) (float64, bool) {
	if len(history) == 0 {
		return 0, false
	}
	return history[len(history)-1].Value, true
}

// ValueAt returns a history's value at step: its last point (in history
// order) whose Step ≤ step; false when no point is that early.
func ValueAt(history []Point, step int) (float64, bool) {
	v, ok := 0.0, false
	for _, p := range history {
		if p.Step <= step {
			v, ok = p.Value, true
		}
	}
	return v, ok
}

// Reached returns the furthest step a history reports (0 when empty).
func Reached(history []Point) int {
	furthest := 0
	for _, p := range history {
		furthest = max(furthest, p.Step)
	}
	return furthest
}

// StepsRun is the training the trials have done: the sum of each one's
// furthest reported step (Reached). It assumes each attempt resumed where
// the previous one ended (ASHA's promotions do); steps trained again after
// a crash resumed from an older checkpoint are not counted.
func StepsRun(trials []Trial) int {
	total := 0
	for _, t := range trials {
		total += Reached(t.History)
	}
	return total
}

// scorer turns values into losses: lower is better whatever the goal, and
// NaN (a diverged run) is the worst there is.
type scorer struct{ sign float64 }

func newScorer(goal string) (scorer, bool) {
	switch goal {
	case Minimize:
		return scorer{sign: 1}, true
	case Maximize:
		return scorer{sign: -1}, true
	}
	return scorer{}, false
}

func (s scorer) loss(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return s.sign * v
}

// value turns a loss back into the goal's units (for messages).
func (s scorer) value(loss float64) float64 { return s.sign * loss }

// sortActions orders actions by trial index (then id), the package's one
// output order.
func sortActions(acts []Action) []Action {
	sort.SliceStable(acts, func(i, j int) bool {
		if acts[i].Index != acts[j].Index {
			return acts[i].Index < acts[j].Index
		}
		return acts[i].ID < acts[j].ID
	})
	return acts
}

// Rank orders trials best first: trials with an objective before those
// without; among them, the higher rung first (ASHA), then the better last
// value (Objective) by goal, a NaN last; ties by index. With a goal that is
// neither Minimize nor Maximize values are not compared (rung, then
// index). It returns a new slice; trials is not changed.
func Rank(goal string, trials []Trial) []Trial {
	sc, byValue := newScorer(goal)
	out := make([]Trial, len(trials))
	copy(out, trials)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		av, aok := Objective(a.History)
		bv, bok := Objective(b.History)
		if aok != bok {
			return aok
		}
		if a.Rung != b.Rung {
			return a.Rung > b.Rung
		}
		if aok && byValue {
			if la, lb := sc.loss(av), sc.loss(bv); la != lb {
				return la < lb
			}
		}
		return a.Index < b.Index
	})
	return out
}
