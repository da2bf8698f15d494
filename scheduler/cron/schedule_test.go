package cron

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, e Entry) Schedule {
	t.Helper()
	if e.Name == "" {
		e.Name = "s"
	}
	if e.Job == "" && e.Sweep == "" {
		e.Job = "job.yaml"
	}
	ss, err := Parse([]Entry{e}, "/etc/lathe")
	if err != nil {
		t.Fatal(err)
	}
	return ss[0]
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseDefaultsAndPaths(t *testing.T) {
	ss, err := Parse([]Entry{
		{Name: "nightly-lr", Cron: "0 2 * * *", Job: "jobs/lr.yaml"},
		{Name: "sw", Cron: "@daily", Sweep: "/abs/sweep.yaml", Timezone: "Europe/Berlin", Concurrency: "replace",
			Missed: "once", StartingDeadline: "10m", Team: "nlp"},
	}, "/etc/lathe")
	if err != nil {
		t.Fatal(err)
	}
	a, b := ss[0], ss[1]
	if a.Kind != KindJob || a.File != "/etc/lathe/jobs/lr.yaml" || a.Timezone != "UTC" || a.Concurrency != Forbid ||
		a.Missed != Skip || a.StartingDeadline != DefaultStartingDeadline {
		t.Fatalf("defaults: %+v", a)
	}
	if b.Kind != KindSweep || b.File != "/abs/sweep.yaml" || b.Concurrency != Replace || b.Missed != Once ||
		b.StartingDeadline != 10*time.Minute || b.Team != "nlp" || b.Location().String() != "Europe/Berlin" {
		t.Fatalf("set fields: %+v", b)
	}
}

// TestParseNamesEveryBadField: one call reports every bad field, by its
// path and value.
func TestParseNamesEveryBadField(t *testing.T) {
	_, err := Parse([]Entry{
		{Name: "ok", Cron: "@hourly", Job: "a.yaml"},
		{Name: "Bad_Name", Cron: "61 * * * *", Timezone: "Mars/Olympus", Job: "a", Sweep: "b", Concurrency: "sometimes",
			Missed: "all", StartingDeadline: "soon"},
		{Name: "ok", Cron: "CRON_TZ=Europe/Berlin 0 2 * * *"},
		{Name: "e", Cron: "@every 500ms", Job: "x", StartingDeadline: "0s"},
		{Name: "f", Cron: "", Job: "x"},
		{Name: "g", Cron: "0 0 30 2 *", Job: "x"},
	}, "")
	var se *Error
	if !errors.As(err, &se) {
		t.Fatalf("want *Error, got %v", err)
	}
	want := []string{
		`schedules[1].name: "Bad_Name"`, `schedules[1].timezone: "Mars/Olympus"`, `schedules[1].cron: "61 * * * *"`,
		`schedules[1].sweep: "b": give sweep or job, not both`, `schedules[1].concurrency: "sometimes"`,
		`schedules[1].missed: "all"`, `schedules[1].starting_deadline: "soon"`,
		`schedules[2].cron: "CRON_TZ=Europe/Berlin 0 2 * * *": set the zone with timezone:`,
		`schedules[2].job: "": give the file`, `schedules[2].name: "ok": used by schedules[0]`,
		`schedules[3].cron: "@every 500ms": @every wants whole seconds`, `schedules[3].starting_deadline: "0s": must be at least 1s`,
		`schedules[4].cron: "": empty`,
		`schedules[5].cron: "0 0 30 2 *": never comes`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	if len(se.Fields) != len(want) {
		t.Errorf("%d field errors, want %d:\n%s", len(se.Fields), len(want), msg)
	}
}

func TestNextAndLatest(t *testing.T) {
	cases := []struct {
		name, cron, tz, from, next, latest string
	}{
		{"5 fields UTC", "0 2 * * *", "", "2026-03-10T12:00:00Z", "2026-03-11T02:00:00Z", "2026-03-10T02:00:00Z"},
		{"5 fields Berlin (CET, UTC+1)", "0 2 * * *", "Europe/Berlin", "2026-03-10T12:00:00Z", "2026-03-11T01:00:00Z", "2026-03-10T01:00:00Z"},
		{"Berlin summer (CEST, UTC+2)", "0 2 * * *", "Europe/Berlin", "2026-07-10T12:00:00Z", "2026-07-11T00:00:00Z", "2026-07-10T00:00:00Z"},
		{"@hourly", "@hourly", "", "2026-03-10T12:30:00Z", "2026-03-10T13:00:00Z", "2026-03-10T12:00:00Z"},
		{"@daily New York", "@daily", "America/New_York", "2026-03-10T12:00:00Z", "2026-03-11T04:00:00Z", "2026-03-10T04:00:00Z"},
		{"@every aligned to the epoch", "@every 10s", "", "2026-03-10T12:00:03Z", "2026-03-10T12:00:10Z", "2026-03-10T12:00:00Z"},
		{"on a tick: next is the one after, latest itself", "*/15 * * * *", "", "2026-03-10T12:15:00Z", "2026-03-10T12:30:00Z", "2026-03-10T12:15:00Z"},
		{"weekdays", "30 9 * * 1-5", "", "2026-03-07T12:00:00Z", "2026-03-09T09:30:00Z", "2026-03-06T09:30:00Z"}, // Sat → Mon; Fri
		{"yearly, far back", "0 0 1 1 *", "", "2026-03-10T12:00:00Z", "2027-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustParse(t, Entry{Cron: c.cron, Timezone: c.tz})
			if got := s.Next(at(c.from)); !got.Equal(at(c.next)) {
				t.Errorf("Next(%s) = %s, want %s", c.from, got, c.next)
			}
			if got := s.Latest(at(c.from)); !got.Equal(at(c.latest)) {
				t.Errorf("Latest(%s) = %s, want %s", c.from, got, c.latest)
			}
		})
	}
}

// TestEveryIsTheSameForEveryScheduler: @every's ticks do not depend on
// when a scheduler asks (robfig's own ConstantDelaySchedule counts from
// the time it is given).
func TestEveryIsTheSameForEveryScheduler(t *testing.T) {
	s := mustParse(t, Entry{Cron: "@every 10s"})
	base := at("2026-03-10T12:00:00Z")
	for off := time.Duration(0); off < 10*time.Second; off += 700 * time.Millisecond {
		if got := s.Next(base.Add(off)); !got.Equal(base.Add(10 * time.Second)) {
			t.Fatalf("Next(base+%s) = %s", off, got)
		}
	}
}

func TestDue(t *testing.T) {
	every2 := Entry{Cron: "@every 2s", StartingDeadline: "1s"}
	once2 := every2
	once2.Missed = "once"
	nightly := Entry{Cron: "0 2 * * *"}
	nightlyOnce := Entry{Cron: "0 2 * * *", Missed: "once"}
	t0 := at("2026-03-10T12:00:00Z")
	cases := []struct {
		name       string
		e          Entry
		last, now  time.Time
		action     Action
		tick       time.Time
		passed     int
		whyContain string
	}{
		{"nothing since last", every2, t0, t0.Add(1500 * time.Millisecond), None, time.Time{}, 0, ""},
		{"the next tick, on time", every2, t0, t0.Add(2100 * time.Millisecond), Run, t0.Add(2 * time.Second), 0, ""},
		{"first sight, latest tick just passed: run", every2, time.Time{}, t0.Add(500 * time.Millisecond), Run, t0, 0, ""},
		{"first sight, latest tick past the deadline: skip, no catching up", nightlyOnce, time.Time{}, at("2026-03-10T12:00:00Z"),
			SkipTick, at("2026-03-10T02:00:00Z"), 0, "starting_deadline"},
		{"skip after a 5-tick downtime: none of them", every2, t0, t0.Add(11500 * time.Millisecond), SkipTick, t0.Add(10 * time.Second), 4, "missed"},
		{"once after a 5-tick downtime: one (the latest)", once2, t0, t0.Add(11500 * time.Millisecond), Run, t0.Add(10 * time.Second), 4, "missed: once"},
		{"late within the deadline: the one within it runs, older ones past it do not", every2, t0, t0.Add(6500 * time.Millisecond), Run, t0.Add(6 * time.Second), 2, "past starting_deadline"},
		{"a failover within the deadline: the earliest missed tick first", Entry{Cron: "@every 2s"}, t0, t0.Add(6500 * time.Millisecond), Run, t0.Add(2 * time.Second), 0, ""},
		{"… then the next", Entry{Cron: "@every 2s"}, t0.Add(2 * time.Second), t0.Add(6600 * time.Millisecond), Run, t0.Add(4 * time.Second), 0, ""},
		{"nightly, scheduler back at 02:30: within the 1h default", nightly, at("2026-03-09T02:00:00Z"), at("2026-03-10T02:30:00Z"), Run, at("2026-03-10T02:00:00Z"), 0, ""},
		{"nightly skip, back at 09:00", nightly, at("2026-03-05T02:00:00Z"), at("2026-03-10T09:00:00Z"), SkipTick, at("2026-03-10T02:00:00Z"), 4, "late"},
		{"nightly once, back at 09:00 after 5 nights", nightlyOnce, at("2026-03-05T02:00:00Z"), at("2026-03-10T09:00:00Z"), Run, at("2026-03-10T02:00:00Z"), 4, "7h0m0s late"},
		{"the tick decided already", nightlyOnce, at("2026-03-10T02:00:00Z"), at("2026-03-10T09:00:00Z"), None, time.Time{}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustParse(t, c.e)
			d := s.Due(c.last, c.now)
			if d.Action != c.action || !d.Tick.Equal(c.tick) || d.Passed != c.passed || !strings.Contains(d.Why, c.whyContain) {
				t.Fatalf("Due = %s %s passed %d %q; want %s %s passed %d %q", d.Action, d.Tick, d.Passed, d.Why, c.action, c.tick, c.passed, c.whyContain)
			}
		})
	}
}

// TestDowntimeRunsOnceNotFive walks passes every 300ms with a fake clock
// through a 5-tick downtime of @every 2s (no passes in it) and counts what
// is run: once runs one tick on return, skip none of the missed ones.
func TestDowntimeRunsOnceNotFive(t *testing.T) {
	for _, c := range []struct {
		missed string
		want   int
	}{{"once", 1}, {"skip", 0}} {
		t.Run(c.missed, func(t *testing.T) {
			s := mustParse(t, Entry{Cron: "@every 2s", Missed: c.missed, StartingDeadline: "1s"})
			t0 := at("2026-03-10T12:00:00Z")
			var last time.Time
			runs := map[time.Time]int{}
			downFrom, downTo := t0.Add(4500*time.Millisecond), t0.Add(15500*time.Millisecond) // ticks 6, 8, 10, 12, 14 missed
			for now := t0; now.Before(t0.Add(20 * time.Second)); now = now.Add(300 * time.Millisecond) {
				if now.After(downFrom) && now.Before(downTo) {
					continue
				}
				d := s.Due(last, now)
				if d.Action == Run {
					runs[d.Tick]++
				}
				if d.Action != None {
					last = d.Tick
				}
			}
			missed := 0
			for tick, n := range runs {
				if n != 1 {
					t.Errorf("tick %s ran %d times", tick, n)
				}
				if tick.After(downFrom) && tick.Before(downTo) {
					missed++
				}
			}
			if missed != c.want {
				t.Fatalf("missed: %s ran %d of the 5 missed ticks, want %d (runs %v)", c.missed, missed, c.want, runs)
			}
			// The ticks outside the downtime all ran: 0, 2, 4, 16, 18.
			for _, sec := range []int{0, 2, 4, 16, 18} {
				if runs[t0.Add(time.Duration(sec)*time.Second)] != 1 {
					t.Errorf("tick +%ds did not run: %v", sec, runs)
				}
			}
		})
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		conc  string
		going bool
		want  Start
	}{
		{"forbid", false, StartRun}, {"forbid", true, SkipForbid}, {"", true, SkipForbid},
		{"replace", false, StartRun}, {"replace", true, ReplaceRun},
		{"allow", false, StartRun}, {"allow", true, StartRun},
	} {
		s := mustParse(t, Entry{Cron: "@hourly", Concurrency: c.conc})
		if got := s.Decide(c.going); got != c.want {
			t.Errorf("%q going=%v: %s, want %s", c.conc, c.going, got, c.want)
		}
	}
}
