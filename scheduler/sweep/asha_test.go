package sweep

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

var rungs3 = []int{10, 30, 90}

const (
	queued    = jobtype.StateQueued
	running   = jobtype.StateRunning
	paused    = jobtype.StatePaused
	succeeded = jobtype.StateSucceeded
	failed    = jobtype.StateFailed
	cancelled = jobtype.StateCancelled
	stopped   = jobtype.StateStopped
)

// p0 is a trial paused at rung 0 with value v at step 10.
func p0(idx int, v float64) Trial { return tr(idx, paused, 0, at(10, v)) }

// ashaCase is one snapshot given to ASHA (rungs 10, 30, 90; η = 3) and the
// actions it must give.
type ashaCase struct {
	name    string
	goal    string
	trials  []Trial
	waiting int
	want    []string
}

var ashaCases = []ashaCase{{
	name: "quota: 3 of 6 reported, the best of them goes on, the rung stays open",
	goal: Minimize,
	trials: []Trial{p0(0, 0.7), p0(1, 0.5), p0(2, 0.6),
		tr(3, running, 0, at(5, 0.1)), tr(4, queued, 0), tr(5, queued, 0)},
	want: []string{"promote t1 rung=1 stop_at=30"},
}, {
	name: "quota used up: a better late reporter waits while the rung is open",
	goal: Minimize,
	// n=6, quota 2; t0 was promoted early; t2 (best) goes on, t3 (2nd) waits.
	trials: []Trial{tr(0, running, 1, at(10, 0.5)), p0(1, 0.6), p0(2, 0.2), p0(3, 0.3),
		p0(4, 0.9), p0(5, 0.8)},
	waiting: 1,
	want:    []string{"promote t2 rung=1 stop_at=30"},
}, {
	name: "late reporter: the closed rung promotes its whole top past the quota, stops the rest",
	goal: Minimize,
	trials: []Trial{tr(0, running, 1, at(10, 0.5)), p0(1, 0.6), p0(2, 0.2), p0(3, 0.3),
		p0(4, 0.9), p0(5, 0.8)},
	want: []string{
		"stop t1 (not promoted)",
		"promote t2 rung=1 stop_at=30",
		"promote t3 rung=1 stop_at=30",
		"stop t4 (not promoted)",
		"stop t5 (not promoted)",
	},
}, {
	name: "maximize: the highest goes on",
	goal: Maximize,
	trials: []Trial{p0(0, 0.7), p0(1, 0.5), p0(2, 0.6),
		tr(3, running, 0, at(5, 0.9))},
	want: []string{"promote t0 rung=1 stop_at=30"},
}, {
	name: "ties rank by index",
	goal: Minimize,
	trials: []Trial{p0(0, 0.5), p0(1, 0.5), p0(2, 0.5),
		tr(3, running, 0)},
	want: []string{"promote t0 rung=1 stop_at=30"},
}, {
	name: "a failed trial does not report: its good value does not take the top place",
	goal: Minimize,
	trials: []Trial{p0(0, 0.5), p0(1, 0.6), p0(2, 0.7),
		tr(3, failed, 0, at(10, 0.1)), tr(4, running, 0)},
	want: []string{"promote t0 rung=1 stop_at=30"},
}, {
	name: "failed and cancelled trials do not keep a rung open",
	goal: Minimize,
	trials: []Trial{p0(0, 0.5), p0(1, 0.6), p0(2, 0.7),
		tr(3, failed, 0, at(5, 0.1)), tr(4, cancelled, 0)},
	want: []string{"promote t0 rung=1 stop_at=30", "stop t1 (not promoted)", "stop t2 (not promoted)"},
}, {
	name: "a trial failed at rung 1 still reported at rung 0 and counts as promoted from it",
	goal: Minimize,
	// n_0=4, quota 1, used by t0; the rung is open (t4 runs), so t1 waits.
	trials: []Trial{tr(0, failed, 1, at(10, 0.9), at(20, 0.8)), p0(1, 0.5), p0(2, 0.6),
		p0(3, 0.7), tr(4, running, 0)},
	want: []string{},
}, {
	name:    "waiting trials keep every rung open",
	goal:    Minimize,
	trials:  []Trial{p0(0, 0.5), p0(1, 0.6), p0(2, 0.7)},
	waiting: 2,
	want:    []string{"promote t0 rung=1 stop_at=30"},
}, {
	name:   "a queued trial at rung 0 keeps rung 0 open",
	goal:   Minimize,
	trials: []Trial{p0(0, 0.5), p0(1, 0.6), p0(2, 0.7), tr(3, queued, 0)},
	want:   []string{"promote t0 rung=1 stop_at=30"},
}, {
	name: "the last rung runs to the end (stop_at 0); rung 1 closes once rung 0 has",
	goal: Minimize,
	trials: []Trial{
		tr(0, paused, 1, at(10, 0.5), at(30, 0.40)),
		tr(1, paused, 1, at(10, 0.6), at(30, 0.30)),
		tr(2, paused, 1, at(10, 0.4), at(30, 0.45)),
		tr(3, stopped, 0, at(10, 0.9)), tr(4, stopped, 0, at(10, 0.8)),
		tr(5, stopped, 0, at(10, 0.9)), tr(6, stopped, 0, at(10, 0.9)),
		tr(7, stopped, 0, at(10, 0.9)), tr(8, stopped, 0, at(10, 0.9)),
	},
	want: []string{"stop t0 (not promoted)", "promote t1 rung=2 stop_at=0", "stop t2 (not promoted)"},
}, {
	name: "one call closes rung 0 then rung 1: the trials stopped at 0 no longer hold rung 1 open",
	goal: Minimize,
	// n_0 = 6, quota 2: t0 and t1 were promoted and paused at rung 1.
	trials: []Trial{
		tr(0, paused, 1, at(10, 0.2), at(30, 0.25)),
		tr(1, paused, 1, at(10, 0.3), at(30, 0.15)),
		p0(2, 0.4), p0(3, 0.5), p0(4, 0.6), p0(5, 0.7),
	},
	want: []string{
		"stop t0 (not promoted)", "promote t1 rung=2 stop_at=0",
		"stop t2 (not promoted)", "stop t3 (not promoted)", "stop t4 (not promoted)", "stop t5 (not promoted)",
	},
}, {
	name:   "a closed rung with fewer than η reporters still promotes its best",
	goal:   Minimize,
	trials: []Trial{p0(0, 0.6), p0(1, 0.5), tr(2, failed, 0)},
	want:   []string{"stop t0 (not promoted)", "promote t1 rung=1 stop_at=30"},
}, {
	name:   "an open rung with fewer than η reporters promotes nobody",
	goal:   Minimize,
	trials: []Trial{p0(0, 0.6), p0(1, 0.5), tr(2, running, 0)},
	want:   []string{},
}, {
	name: "a NaN ranks last; a paused trial with no value ranks after it",
	goal: Minimize,
	trials: []Trial{p0(0, math.NaN()), tr(1, paused, 0), p0(2, 3.0),
		p0(3, 4.0), p0(4, 5.0), p0(5, 6.0)},
	want: []string{
		"stop t0 (not promoted)", "stop t1 (not promoted)", "promote t2 rung=1 stop_at=30",
		"promote t3 rung=1 stop_at=30", "stop t4 (not promoted)", "stop t5 (not promoted)",
	},
}, {
	name: "succeeded trials report at every rung with their history's values",
	goal: Minimize,
	// n_0 = 3 (t3 has not reported): t0's value at 10 is 0.3 (best); quota 1, used by t0.
	trials: []Trial{tr(0, succeeded, 2, at(10, 0.3), at(30, 0.2), at(90, 0.1)),
		p0(1, 0.4), p0(2, 0.5), tr(3, running, 0, at(5, 0.1))},
	want: []string{},
}, {
	name: "a trial stopped after pausing at a rung reported there; one stopped unadmitted did not",
	goal: Minimize,
	// n_0 = 6 (t0, t1 and four paused), quota 2; t7-t9 (never ran) would make it 9.
	trials: []Trial{tr(0, stopped, 0, at(10, 0.9)), tr(1, stopped, 0, at(10, 0.95)),
		p0(2, 0.5), p0(3, 0.6), p0(4, 0.7), p0(5, 0.8), tr(6, running, 0),
		tr(7, stopped, 0), tr(8, stopped, 0), tr(9, stopped, 0)},
	want: []string{"promote t2 rung=1 stop_at=30", "promote t3 rung=1 stop_at=30"},
}, {
	name:   "a paused trial on the last rung is left alone",
	goal:   Minimize,
	trials: []Trial{tr(0, paused, 2, at(90, 0.1)), tr(1, paused, 5, at(90, 0.1))},
	want:   []string{},
}}

func TestASHA(t *testing.T) {
	for _, c := range ashaCases {
		t.Run(c.name, func(t *testing.T) {
			snapshot := cloneTrials(c.trials)
			got := brief(ASHA(rungs3, 3, c.goal, c.trials, c.waiting))
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("ASHA =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
			if fmt.Sprint(c.trials) != fmt.Sprint(snapshot) { // Sprint: NaN equals NaN
				t.Error("ASHA changed its input")
			}
		})
	}
}

func cloneTrials(ts []Trial) []Trial {
	out := make([]Trial, len(ts))
	for i, t := range ts {
		out[i] = t
		out[i].History = append([]Point(nil), t.History...)
	}
	return out
}

func TestASHAMessages(t *testing.T) {
	trials := []Trial{tr(0, running, 1, at(10, 0.5)), p0(1, 0.6), p0(2, 0.2), p0(3, 0.3),
		p0(4, 0.9), p0(5, 0.8123)}
	byID := map[string]Action{}
	for _, a := range ASHA(rungs3, 3, Minimize, trials, 0) {
		byID[a.ID] = a
	}
	want := map[string]string{
		"t1": "rung 0 (10 steps): rank 4 of 6, objective 0.6; top 2 promoted",
		"t2": "rung 0 (10 steps): rank 1 of 6, objective 0.2; promoted to rung 1 (30 steps)",
		"t5": "rung 0 (10 steps): rank 5 of 6, objective 0.8123; top 2 promoted",
	}
	for id, msg := range want {
		if got := byID[id].Message; got != msg {
			t.Errorf("%s: message %q, want %q", id, got, msg)
		}
	}
	if a := byID["t5"]; a.Index != 5 || a.Reason != jobtype.ReasonNotPromoted {
		t.Errorf("t5: index %d reason %q", a.Index, a.Reason)
	}
}

func TestASHARefusesNonsense(t *testing.T) {
	trials := []Trial{p0(0, 0.5), p0(1, 0.6), p0(2, 0.7)}
	cases := []struct {
		name  string
		rungs []int
		eta   int
		goal  string
	}{
		{"eta 1", rungs3, 1, Minimize},
		{"eta 0", rungs3, 0, Minimize},
		{"unknown goal", rungs3, 3, "lowest"},
		{"no rungs", nil, 3, Minimize},
		{"one rung", []int{90}, 3, Minimize},
		{"rungs not increasing", []int{10, 10, 90}, 3, Minimize},
		{"rungs decreasing", []int{90, 30, 10}, 3, Minimize},
		{"rung at step 0", []int{0, 30, 90}, 3, Minimize},
	}
	for _, c := range cases {
		if got := ASHA(c.rungs, c.eta, c.goal, trials, 0); got != nil {
			t.Errorf("%s: ASHA = %v, want nil", c.name, brief(got))
		}
	}
	// The same trials with sound settings do get decisions (the refusals above are not vacuous).
	if got := ASHA(rungs3, 3, Minimize, trials, 0); len(got) != 3 {
		t.Errorf("sound settings: %v", brief(got))
	}
}
