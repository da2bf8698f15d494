// Package sweep holds the sweep duty's pure decisions (docs/sweeps.md):
// ASHA's rungs, promotions and stops (asynchronous successive halving, Li
// et al., MLSys 2020), median stopping, and the leaderboard order. It
// reads what the store says about each trial and returns actions; the
// scheduler's sweep duty applies them with the store's compare-and-set
// scripts. No Redis, no clock.
package sweep

import (
	"errors"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// ErrNotBuilt marks what is not written yet.
var ErrNotBuilt = errors.New("sweep: not built yet (issue #13)")

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
	// value at its rung's end.
	History []Point
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
	Rung       int // Promote: the rung it goes to
	StopAtStep int // Promote: that rung's step limit (0: the last rung, run to the end)
	Reason     string
	Message    string
}

// Rungs are the step counts of ASHA's rungs: min, min·η, min·η², … up to
// and always ending with max.
func Rungs(minSteps, maxSteps, eta int) []int { return nil }

// ASHA decides promotions and stops for the paused trials of an ASHA
// sweep: a trial paused at rung k is promoted when it ranks in the top
// ⌊n_k/η⌋ of the n_k trials that reported at rung k (asynchronous: it does
// not wait for the rung to fill); when no trial can report at rung k any
// more (every trial reached it or ended, none waits to be admitted), the
// trials still paused there end stopped (jobtype.ReasonNotPromoted).
// waiting is the number of trials not admitted yet.
func ASHA(rungs []int, eta int, goal string, trials []Trial, waiting int) []Action { return nil }

// Median decides median stopping for the running trials of a grid or
// random sweep: a trial whose objective at its latest step s ≥ grace is
// worse than the median of the other trials' values at s (each one's
// latest point at or before s, counting only trials that reached s) is
// asked to stop, when at least minTrials others reached s.
func Median(grace, minTrials int, goal string, trials []Trial) []Action { return nil }

// Rank orders trials best first: trials with an objective before those
// without; among them, the higher rung first (ASHA), then the better final
// value by goal; ties by index.
func Rank(goal string, trials []Trial) []Trial { return nil }
