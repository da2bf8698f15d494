package sweep

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// peers are three trials that reached step 200 (ended ones count too):
// their values at step 100 are 1.0, 1.1 and 1.2 (median 1.1), at step 40
// (their point at 25) 2.0, 2.1 and 2.2.
func peers() []Trial {
	return []Trial{
		tr(0, succeeded, 0, at(25, 2.0), at(50, 1.5), at(100, 1.0), at(200, 0.8)),
		tr(1, stopped, 0, at(25, 2.1), at(50, 1.6), at(100, 1.1), at(200, 0.9)),
		tr(2, running, 0, at(25, 2.2), at(50, 1.7), at(100, 1.2), at(200, 1.0)),
	}
}

func TestMedian(t *testing.T) {
	stop := "request stop t9 (median)"
	cases := []struct {
		name             string
		goal             string
		grace, minTrials int
		extra            []Trial // added to peers()
		want             []string
	}{
		{"a diverging trial is stopped", Minimize, 50, 3,
			[]Trial{tr(9, running, 0, at(50, 2.0), at(100, 3.0))}, []string{stop}},
		{"the median trial itself is not stopped", Minimize, 50, 3,
			[]Trial{tr(9, running, 0, at(100, 1.1))}, []string{}},
		{"a trial just worse than the median is stopped", Minimize, 50, 3,
			[]Trial{tr(9, running, 0, at(100, 1.1001))}, []string{stop}},
		{"even count: the mean of the two middle ones (1.15)", Minimize, 50, 4,
			[]Trial{tr(8, succeeded, 0, at(100, 1.3)), tr(9, running, 0, at(100, 1.15))}, []string{}},
		{"even count: worse than 1.15 is stopped", Minimize, 50, 4,
			[]Trial{tr(8, succeeded, 0, at(100, 1.3)), tr(9, running, 0, at(100, 1.16))}, []string{stop}},
		{"grace: a step below it is never judged", Minimize, 50, 3,
			[]Trial{tr(9, running, 0, at(40, 9.9))}, []string{}},
		{"grace: at the grace step it is", Minimize, 40, 3,
			[]Trial{tr(9, running, 0, at(40, 9.9))}, []string{stop}},
		{"minTrials: too few others reached the step", Minimize, 50, 4,
			[]Trial{tr(9, running, 0, at(100, 3.0))}, []string{}},
		{"a trial that has not reached the step does not count", Minimize, 50, 4,
			[]Trial{tr(7, running, 0, at(90, 0.1)), tr(9, running, 0, at(100, 3.0))}, []string{}},
		{"another's value at s is its last point at or before s", Minimize, 50, 4,
			// t7's value at 100 is 5.0 (from 90), not 0.1 (110): the others are
			// 1.0 1.1 1.2 5.0, median 1.15, so t9 (1.14) goes on.
			[]Trial{tr(7, running, 0, at(90, 5.0), at(110, 0.1)), tr(9, running, 0, at(100, 1.14))},
			[]string{}},
		{"only running trials are asked to stop", Minimize, 50, 3,
			[]Trial{tr(9, paused, 0, at(100, 3.0)), tr(10, queued, 0, at(100, 3.0)),
				tr(11, jobtype.StateDispatched, 0, at(100, 3.0)), tr(12, succeeded, 0, at(100, 3.0))},
			[]string{}},
		{"a trial already asked to stop is not asked again", Minimize, 50, 3,
			[]Trial{{ID: "t9", Index: 9, State: running, History: []Point{at(100, 3.0)},
				StopRequested: jobtype.ReasonMedianStopping}}, []string{}},
		{"maximize: the low one is stopped", Maximize, 50, 3,
			[]Trial{tr(9, running, 0, at(100, 0.5))}, []string{stop}},
		{"a NaN is the worst", Minimize, 50, 3,
			[]Trial{tr(9, running, 0, at(100, math.NaN()))}, []string{stop}},
		{"unknown goal: nothing", "best", 50, 3,
			[]Trial{tr(9, running, 0, at(100, 3.0))}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			trials := append(peers(), c.extra...)
			acts := Median(c.grace, c.minTrials, c.goal, trials)
			got := brief(acts)
			if c.want == nil {
				if acts != nil {
					t.Fatalf("Median = %v, want nil", got)
				}
				return
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Median =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

func TestMedianNeedsAnother(t *testing.T) {
	alone := []Trial{tr(0, running, 0, at(10, 5))}
	if got := Median(0, 0, Minimize, alone); len(got) != 0 {
		t.Errorf("a trial alone: %v", brief(got))
	}
	// minTrials 0 counts as 1: one better other is enough.
	two := append(alone, tr(1, succeeded, 0, at(10, 1)))
	if got := brief(Median(0, 0, Minimize, two)); !reflect.DeepEqual(got, []string{"request stop t0 (median)"}) {
		t.Errorf("with one other: %v", got)
	}
}

func TestMedianMessage(t *testing.T) {
	trials := append(peers(), tr(9, running, 0, at(50, 2.0), at(100, 3.0)))
	acts := Median(50, 3, Minimize, trials)
	if len(acts) != 1 {
		t.Fatalf("Median = %v, want one action", brief(acts))
	}
	want := "step 100: objective 3 is worse than the median 1.1 of 3 other trials at that step"
	if a := acts[0]; a.Message != want || a.Index != 9 || a.ID != "t9" {
		t.Errorf("action %+v, want message %q", a, want)
	}
	// Maximize: the median is written in the goal's units, not negated.
	trials = append(peers(), tr(9, running, 0, at(100, 0.5)))
	for _, a := range Median(50, 3, Maximize, trials) {
		if a.ID == "t9" && !strings.Contains(a.Message, "the median 1.1 of 3") {
			t.Errorf("maximize message %q", a.Message)
		}
	}
}
