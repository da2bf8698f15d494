package sweep

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The simulation drives ASHA the way the sweep duty does, over a simulated
// pool of workers: no store, no trainer. Each trial's objective is a
// stand-in for an eval loss, f(lr, step) = (log10(lr)+2.5)² + 1 + 5/√step,
// with 27 learning rates log-spaced over [1e-4, 1e-1] (the best, 10^-2.5,
// is one of them) and handed to the trials' indexes in a seeded random
// order (a random search draws them so). A segment of a trial (start of
// its rung to the rung's end) takes its steps × a seeded random factor in
// [0.5, 1.5) of simulated time, so trials report in a random but
// reproducible order. Free workers take promoted trials first, then admit
// the next waiting trial (max_parallel = workers).

const (
	simTrials   = 27
	simWorkers  = 4
	simEta      = 3
	simMin      = 10
	simMax      = 90
	simEvalStep = 10
)

func simLoss(lr float64, step int) float64 {
	d := math.Log10(lr) + 2.5
	return d*d + 1 + 5/math.Sqrt(float64(step))
}

// segment is one attempt on a worker.
type segment struct {
	pos    int // trial
	from   int // step it resumes from
	finish float64
}

type pool struct {
	t       *testing.T
	rng     *rand.Rand
	rungs   []int
	lr      []float64
	trials  []Trial
	fail    map[int]int // trial → rung during which its attempt fails
	next    int         // next trial to admit
	busy    []segment
	now     float64
	reasons map[int]string // trial → the stop message
}

func newPool(t *testing.T, seed int64, fail map[int]int) *pool {
	p := &pool{t: t, rng: rand.New(rand.NewSource(seed)), rungs: Rungs(simMin, simMax, simEta),
		fail: fail, reasons: map[int]string{}}
	perm := p.rng.Perm(simTrials)
	for i := 0; i < simTrials; i++ {
		p.lr = append(p.lr, math.Pow(10, -4+3*float64(perm[i])/float64(simTrials-1)))
		p.trials = append(p.trials, Trial{ID: fmt.Sprintf("j-%05d", i), Index: i,
			State: jobtype.StateQueued, StopAtStep: p.rungs[0]})
	}
	return p
}

// waiting is how many trials are not admitted yet.
func (p *pool) waiting() int { return simTrials - p.next }

// fill starts work on every free worker: a promoted trial first, else the
// next waiting one.
func (p *pool) fill() {
	for len(p.busy) < simWorkers {
		pos := -1
		for i, t := range p.trials {
			if i < p.next && t.State == jobtype.StateQueued {
				pos = i
				break
			}
		}
		if pos < 0 && p.next < simTrials {
			pos = p.next
			p.next++
		}
		if pos < 0 {
			return
		}
		p.start(pos)
	}
}

func (p *pool) start(pos int) {
	t := &p.trials[pos]
	t.State = jobtype.StateRunning
	from := Reached(t.History)
	steps := p.rungs[t.Rung] - from
	p.busy = append(p.busy, segment{pos: pos, from: from,
		finish: p.now + float64(steps)*(0.5+p.rng.Float64())})
}

// finishNext ends the segment that finishes first: its eval points are
// appended and the trial pauses at its rung, succeeds on the last, or
// fails half-way when p.fail says so.
func (p *pool) finishNext() {
	sort.SliceStable(p.busy, func(i, j int) bool { return p.busy[i].finish < p.busy[j].finish })
	seg := p.busy[0]
	p.busy = p.busy[1:]
	p.now = seg.finish
	t := &p.trials[seg.pos]
	end := p.rungs[t.Rung]
	failing := false
	if r, ok := p.fail[seg.pos]; ok && r == t.Rung {
		end, failing = seg.from+(end-seg.from)/2, true
	}
	for s := seg.from + simEvalStep; s <= end; s += simEvalStep {
		t.History = append(t.History, Point{Step: s, Value: simLoss(p.lr[seg.pos], s)})
	}
	switch {
	case failing:
		t.State = jobtype.StateFailed
	case t.Rung == len(p.rungs)-1:
		t.State = jobtype.StateSucceeded
	default:
		t.State = jobtype.StatePaused
	}
}

// apply does what the duty does with ASHA's actions.
func (p *pool) apply(acts []Action) {
	for _, a := range acts {
		t := &p.trials[a.Index]
		if t.State != jobtype.StatePaused {
			p.t.Fatalf("%s %s: the trial is %s, not paused", a.Kind, a.ID, t.State)
		}
		switch a.Kind {
		case Promote:
			t.State, t.Rung, t.StopAtStep = jobtype.StateQueued, a.Rung, a.StopAtStep
		case Stop:
			t.State = jobtype.StateStopped
			p.reasons[a.Index] = a.Reason + ": " + a.Message
		default:
			p.t.Fatalf("ASHA asked for %s of %s", a.Kind, a.ID)
		}
	}
}

// run drives the pool until nothing runs or can start.
func (p *pool) run() {
	for events := 0; ; events++ {
		p.fill()
		if len(p.busy) == 0 {
			return
		}
		if events > 10*simTrials*len(p.rungs) {
			p.t.Fatalf("no end after %d events", events)
		}
		p.finishNext()
		p.apply(ASHA(p.rungs, simEta, Minimize, p.trials, p.waiting()))
	}
}

// simResult is one simulated sweep's figures.
type simResult struct {
	steps, reachedEnd int
}

// check asserts what a finished sweep must show and returns its figures.
func (p *pool) check() simResult {
	t := p.t
	t.Helper()
	bestFull := -1
	for i := range p.trials {
		if p.failed(i) {
			continue
		}
		if bestFull < 0 || simLoss(p.lr[i], simMax) < simLoss(p.lr[bestFull], simMax) {
			bestFull = i
		}
	}
	top := Rank(Minimize, p.trials)[0]
	if top.Index != bestFull || top.State != jobtype.StateSucceeded {
		t.Errorf("best found: trial %d (%s, lr %.3g), best of the full grid: trial %d (lr %.3g)",
			top.Index, top.State, p.lr[top.Index], bestFull, p.lr[bestFull])
	}
	res := simResult{steps: StepsRun(p.trials)}
	for i, tr := range p.trials {
		switch tr.State {
		case jobtype.StateSucceeded:
			res.reachedEnd++
		case jobtype.StateStopped:
			if !strings.HasPrefix(p.reasons[i], jobtype.ReasonNotPromoted+": rung ") {
				t.Errorf("trial %d stopped with %q", i, p.reasons[i])
			}
		case jobtype.StateFailed:
			if !p.failed(i) {
				t.Errorf("trial %d failed unasked", i)
			}
		default:
			t.Errorf("trial %d ended %s at rung %d, not succeeded or stopped", i, tr.State, tr.Rung)
		}
	}
	p.checkTopPromoted()
	return res
}

func (p *pool) failed(i int) bool {
	_, ok := p.fail[i]
	return ok && p.trials[i].State == jobtype.StateFailed
}

// checkTopPromoted asserts ASHA's guarantee: at every rung below the last,
// the top ⌊n/η⌋ of the trials that reported there (at least one) went on.
func (p *pool) checkTopPromoted() {
	for k, steps := range p.rungs[:len(p.rungs)-1] {
		var reps []int
		for i, tr := range p.trials {
			if Reached(tr.History) >= steps {
				reps = append(reps, i)
			}
		}
		sort.SliceStable(reps, func(a, b int) bool {
			va, _ := ValueAt(p.trials[reps[a]].History, steps)
			vb, _ := ValueAt(p.trials[reps[b]].History, steps)
			return va < vb
		})
		for _, i := range reps[:max(len(reps)/simEta, 1)] {
			if tr := p.trials[i]; tr.Rung <= k {
				p.t.Errorf("rung %d: trial %d is in the top %d of %d but stayed at rung %d (%s)",
					k, i, max(len(reps)/simEta, 1), len(reps), tr.Rung, tr.State)
			}
		}
	}
}

// TestASHASimulation runs 27 trials through ASHA (η=3, rungs 10, 30, 90)
// on 4 simulated workers, for 20 seeds (each its own learning-rate order
// and completion order), and checks every sweep: the best trial found is
// the best of running all 27 to the end, at most 40% of the full grid's
// steps ran, every trial ends succeeded or stopped (not promoted, with a
// message naming its rung), and each rung's top third went on.
func TestASHASimulation(t *testing.T) {
	full := simTrials * simMax
	sync := 0 // synchronous successive halving, for comparison
	for k, n := 0, simTrials; k < len(Rungs(simMin, simMax, simEta)); k, n = k+1, n/simEta {
		prev := 0
		if k > 0 {
			prev = Rungs(simMin, simMax, simEta)[k-1]
		}
		sync += n * (Rungs(simMin, simMax, simEta)[k] - prev)
	}
	var all []int
	for seed := int64(1); seed <= 20; seed++ {
		p := newPool(t, seed, nil)
		p.run()
		res := p.check()
		if res.steps > full*40/100 {
			t.Errorf("seed %d: %d steps run, more than 40%% of the full grid's %d", seed, res.steps, full)
		}
		all = append(all, res.steps)
		t.Logf("seed %2d: %4d steps (%.1f%% of the grid), %d trials ran to the end",
			seed, res.steps, 100*float64(res.steps)/float64(full), res.reachedEnd)
	}
	sort.Ints(all)
	sum := 0
	for _, s := range all {
		sum += s
	}
	mean := float64(sum) / float64(len(all))
	t.Logf("ASHA, %d trials, %d workers, rungs %v, eta %d, %d seeds: steps min %d, mean %.0f, max %d of %d for the full grid "+
		"(%.1f%%, %.1f%%, %.1f%%): a saving of %.1f%% on average; synchronous successive halving would run %d (%.1f%%)",
		simTrials, simWorkers, Rungs(simMin, simMax, simEta), simEta, len(all), all[0], mean, all[len(all)-1], full,
		100*float64(all[0])/float64(full), 100*mean/float64(full), 100*float64(all[len(all)-1])/float64(full),
		100-100*mean/float64(full), sync, 100*float64(sync)/float64(full))
}

// TestASHASimulationWithFailures is the simulation with three trials
// failing: the second best at rung 1 (after it was promoted), and two at
// rung 0. Failures neither keep a rung open nor take a promotion's place,
// and the best trial is still found.
func TestASHASimulationWithFailures(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		p := newPool(t, seed, nil)
		// By learning rate: the best is 10^-2.5 (rank 13 of 0..26).
		byLR := make([]int, simTrials)
		for i, lr := range p.lr {
			byLR[int(math.Round((math.Log10(lr)+4)*float64(simTrials-1)/3))] = i
		}
		p.fail = map[int]int{byLR[12]: 1, byLR[0]: 0, byLR[20]: 0}
		p.run()
		res := p.check()
		failedCount := 0
		for i := range p.fail {
			if p.trials[i].State == jobtype.StateFailed {
				failedCount++
			}
		}
		if failedCount != 3 {
			t.Errorf("seed %d: %d trials failed, want 3", seed, failedCount)
		}
		t.Logf("seed %2d: %4d steps, %d trials ran to the end, 3 failed", seed, res.steps, res.reachedEnd)
	}
}
