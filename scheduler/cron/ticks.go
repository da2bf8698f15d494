package cron

import (
	"fmt"
	"time"
)

// maxLookBack bounds how far back Latest searches for a tick (robfig/cron
// itself gives up looking forward after five years).
const maxLookBack = 5 * 366 * 24 * time.Hour

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// Next is the first tick strictly after t; zero when there is none within
// five years (or the schedule was not made by Parse). An @every d
// schedule ticks at the multiples of d since the Unix epoch, so every
// scheduler, whenever it started, sees the same ticks.
func (s *Schedule) Next(t time.Time) time.Time {
	switch {
	case s.every > 0:
		d := s.every.Milliseconds()
		ms := t.UnixMilli()
		return time.UnixMilli((floorDiv(ms, d) + 1) * d).UTC()
	case s.spec != nil:
		n := s.spec.Next(t)
		if n.IsZero() {
			return n
		}
		return n.UTC()
	}
	return time.Time{}
}

// Latest is the last tick at or before t; zero when there is none within
// five years.
func (s *Schedule) Latest(t time.Time) time.Time {
	if s.every > 0 {
		d := s.every.Milliseconds()
		return time.UnixMilli(floorDiv(t.UnixMilli(), d) * d).UTC()
	}
	if s.spec == nil {
		return time.Time{}
	}
	// Search back in windows that double: a minute, two, four, … Each
	// window is walked forward with Next, so the cost is the ticks in it.
	for w := time.Minute; ; w *= 2 {
		w = min(w, maxLookBack)
		var last time.Time
		for n := s.Next(t.Add(-w)); !n.IsZero() && !n.After(t); n = s.Next(n) {
			last = n
		}
		if !last.IsZero() || w == maxLookBack {
			return last
		}
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Action is what a pass does about a schedule.
type Action int

// The actions of Due.
const (
	// None: no tick since the last one decided.
	None Action = iota
	// Run the tick.
	Run
	// SkipTick: record the tick as decided without running it (missed).
	SkipTick
)

func (a Action) String() string {
	switch a {
	case Run:
		return "run"
	case SkipTick:
		return "skip"
	}
	return "none"
}

// Decision is Due's answer.
type Decision struct {
	Action Action
	// Tick is the tick to run or record as skipped (zero with None).
	Tick time.Time
	// Passed is how many ticks after last and before Tick are passed over
	// (never run); counted up to 1000.
	Passed int
	// Why says why a tick is skipped or older ticks passed over.
	Why string
}

// Due decides a pass at now of a schedule whose last decided tick (run,
// skipped or failed) is last (zero: none yet, a schedule seen for the
// first time). Only the latest tick t with last < t ≤ now is ever
// considered, so a pass runs at most one tick:
//
//   - no such tick: None;
//   - t within StartingDeadline of now (now − t ≤ StartingDeadline): Run t
//     (older ticks after last are passed over, with either policy);
//   - t past the deadline, missed: once, and last is set (the schedule ran
//     before: this is a downtime): Run t, once;
//   - otherwise (missed: skip, or a schedule seen for the first time, which
//     missed nothing): SkipTick t.
//
// So after a downtime of five ticks `missed: once` runs one tick, never
// five, and `missed: skip` runs none of the ticks older than the deadline.
func (s *Schedule) Due(last, now time.Time) Decision {
	t := s.Latest(now)
	if t.IsZero() || !t.After(last) {
		return Decision{Action: None}
	}
	d := Decision{Tick: t, Passed: s.between(last, t, 1000)}
	late := now.Sub(t) > s.StartingDeadline
	switch {
	case !late:
		// Every tick still within starting_deadline runs, the earliest
		// first (one a pass): those that came due while no scheduler led
		// (a failover) are caught up; older ones are past the deadline.
		d.Action, d.Tick = Run, s.firstDue(last, now, t)
		d.Passed = s.between(last, d.Tick, 1000)
		if d.Passed > 0 {
			d.Why = fmt.Sprintf("%d earlier tick(s) missed: past starting_deadline %s, not run", d.Passed, s.StartingDeadline)
		}
	case s.Missed == Once && !last.IsZero():
		d.Action = Run
		d.Why = fmt.Sprintf("missed: once: the latest missed tick runs once, %s late", now.Sub(t).Round(time.Second))
		if d.Passed > 0 {
			d.Why += fmt.Sprintf(" (%d earlier tick(s) not run)", d.Passed)
		}
	default:
		d.Action = SkipTick
		d.Why = fmt.Sprintf("missed: not started within starting_deadline %s (%s late)", s.StartingDeadline, now.Sub(t).Round(time.Second))
	}
	return d
}

// firstDue is the earliest tick after last that is within
// StartingDeadline of now, latest being the latest tick (within it); on
// first sight (last zero) the latest alone, nothing before it.
func (s *Schedule) firstDue(last, now, latest time.Time) time.Time {
	if last.IsZero() {
		return latest
	}
	x := s.Next(last)
	if edge := s.Next(now.Add(-s.StartingDeadline - time.Millisecond)); x.Before(edge) {
		x = edge
	}
	if x.IsZero() || x.After(latest) {
		return latest
	}
	return x
}

// between counts the ticks strictly between a and b, up to limit; 0 when a
// is zero (nothing before the first decision counts as missed).
func (s *Schedule) between(a, b time.Time, limit int) int {
	if a.IsZero() {
		return 0
	}
	if s.every > 0 {
		d := s.every.Milliseconds()
		n := floorDiv(b.UnixMilli()-1, d) - floorDiv(a.UnixMilli(), d)
		return int(min(max(n, 0), int64(limit)))
	}
	n := 0
	for x := s.Next(a); !x.IsZero() && x.Before(b) && n < limit; x = s.Next(x) {
		n++
	}
	return n
}

// Start is what a tick does about the schedule's last run.
type Start int

// Decide's answers.
const (
	// StartRun: start the tick's run.
	StartRun Start = iota
	// SkipForbid: the last run is still going and concurrency is forbid:
	// the tick is skipped.
	SkipForbid
	// ReplaceRun: cancel the last run, then start the tick's run.
	ReplaceRun
)

func (a Start) String() string {
	switch a {
	case SkipForbid:
		return "skip (forbid)"
	case ReplaceRun:
		return "replace"
	}
	return "start"
}

// Decide applies the schedule's concurrency policy: going says whether
// the schedule's last run has not ended yet.
func (s *Schedule) Decide(going bool) Start {
	if !going {
		return StartRun
	}
	switch s.Concurrency {
	case Allow:
		return StartRun
	case Replace:
		return ReplaceRun
	}
	return SkipForbid
}
