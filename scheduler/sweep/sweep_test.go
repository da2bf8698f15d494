package sweep

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// tr builds a trial: id "t<idx>".
func tr(idx int, st jobtype.State, rung int, pts ...Point) Trial {
	return Trial{ID: fmt.Sprintf("t%d", idx), Index: idx, State: st, Rung: rung, History: pts}
}

func at(step int, v float64) Point { return Point{Step: step, Value: v} }

// brief writes actions one a line, without messages, for table tests.
func brief(acts []Action) []string {
	out := []string{}
	for _, a := range acts {
		switch a.Kind {
		case Promote:
			out = append(out, fmt.Sprintf("promote %s rung=%d stop_at=%d", a.ID, a.Rung, a.StopAtStep))
		default:
			out = append(out, fmt.Sprintf("%s %s (%s)", a.Kind, a.ID, a.Reason))
		}
	}
	return out
}

func TestRungs(t *testing.T) {
	cases := []struct {
		min, max, eta int
		want          []int
	}{
		{10, 90, 3, []int{10, 30, 90}},
		{10, 100, 3, []int{10, 30, 90, 100}},
		{10, 80, 3, []int{10, 30, 80}},
		{1, 16, 2, []int{1, 2, 4, 8, 16}},
		{100, 1000, 4, []int{100, 400, 1000}},
		{10, 11, 3, []int{10, 11}},
		// Nonsense: a single rung (an ordinary run) or nothing.
		{10, 10, 3, []int{10}},
		{20, 10, 3, []int{10}},
		{0, 90, 3, []int{90}},
		{-5, 90, 3, []int{90}},
		{10, 90, 1, []int{90}},
		{10, 90, 0, []int{90}},
		{10, 0, 3, nil},
		{10, -1, 3, nil},
		// No overflow near the top of int.
		{1, math.MaxInt, 1 << 31, []int{1, 1 << 31, 1 << 62, math.MaxInt}},
	}
	for _, c := range cases {
		got := Rungs(c.min, c.max, c.eta)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Rungs(%d, %d, %d) = %v, want %v", c.min, c.max, c.eta, got, c.want)
		}
	}
}

func TestHistoryHelpers(t *testing.T) {
	// Attempt 2 resumed from step 20 and evaluated 30 again: the later point wins.
	h := []Point{at(10, 3), at(20, 2), at(30, 1.5), at(30, 1.4), at(40, 1.2)}
	if v, ok := Objective(h); !ok || v != 1.2 {
		t.Errorf("Objective = %v, %v; want 1.2, true", v, ok)
	}
	if _, ok := Objective(nil); ok {
		t.Error("Objective(nil) ok = true")
	}
	for _, c := range []struct {
		step int
		want float64
		ok   bool
	}{{5, 0, false}, {10, 3, true}, {29, 2, true}, {30, 1.4, true}, {35, 1.4, true}, {100, 1.2, true}} {
		if v, ok := ValueAt(h, c.step); v != c.want || ok != c.ok {
			t.Errorf("ValueAt(%d) = %v, %v; want %v, %v", c.step, v, ok, c.want, c.ok)
		}
	}
	if got := Reached(h); got != 40 {
		t.Errorf("Reached = %d, want 40", got)
	}
	if got := Reached([]Point{at(30, 1), at(20, 1)}); got != 30 {
		t.Errorf("Reached of unsorted history = %d, want 30", got)
	}
	trials := []Trial{{History: h}, {History: []Point{at(90, 1)}}, {}}
	if got := StepsRun(trials); got != 130 {
		t.Errorf("StepsRun = %d, want 130", got)
	}
}

func TestRank(t *testing.T) {
	q, r, p, s := jobtype.StateQueued, jobtype.StateRunning, jobtype.StatePaused, jobtype.StateSucceeded
	trials := []Trial{
		tr(0, q, 0),                              // no history: last
		tr(1, p, 1, at(10, 0.9), at(30, 0.7)),    // rung 1
		tr(2, s, 2, at(10, 0.8), at(90, 0.5)),    // rung 2, 0.5
		tr(3, r, 0, at(10, 0.1)),                 // rung 0, best value at rung 0
		tr(4, s, 2, at(10, 0.9), at(90, 0.4)),    // rung 2, 0.4: the best
		tr(5, p, 1, at(10, 0.9), at(30, 0.6)),    // rung 1, better than t1
		tr(6, p, 1, at(10, 0.9), at(30, 0.7)),    // ties t1: by index
		tr(7, r, 0, at(10, math.NaN())),          // NaN: after t3 at rung 0
		tr(8, q, 0),                              // no history
		tr(9, s, 2, at(10, 0.9), at(90, 0.4)),    // ties t4
		tr(10, r, 0, at(10, 0.2), at(20, 0.3)),   // last value 0.3
		tr(11, r, 0, at(10, 0.25), at(20, 0.25)), // 0.25 before t10's 0.3
	}
	ids := func(ts []Trial) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return strings.Join(out, " ")
	}
	cases := []struct{ goal, want string }{
		{Minimize, "t4 t9 t2 t5 t1 t6 t3 t11 t10 t7 t0 t8"},
		{Maximize, "t2 t4 t9 t1 t6 t5 t10 t11 t3 t7 t0 t8"},
		{"", "t2 t4 t9 t1 t5 t6 t3 t7 t10 t11 t0 t8"},
	}
	for _, c := range cases {
		before := ids(trials)
		got := ids(Rank(c.goal, trials))
		if got != c.want {
			t.Errorf("Rank(%q) =\n  %s\nwant\n  %s", c.goal, got, c.want)
		}
		if ids(trials) != before {
			t.Errorf("Rank(%q) changed its input", c.goal)
		}
	}
	if got := Rank(Minimize, nil); len(got) != 0 {
		t.Errorf("Rank(nil) = %v", got)
	}
}
