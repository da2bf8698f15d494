package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/waitfor"
)

// failoverSched is one `lathed scheduler` process of the failover test and
// its API's URL.
type failoverSched struct {
	d    *daemon
	base string
}

// TestScheduleFailoverE2E: one redis-server, two `lathed scheduler`
// processes (leader_ttl 2s, place_interval left at its default) and an
// @every 2s job schedule (concurrency: allow; no worker runs, so its runs
// stay queued). Three times the leader (found through /healthz) is killed
// with SIGKILL, at a different point of the 2 s between ticks each time,
// the other takes over when the lease runs out, and the killed one is
// started again. Over the whole window every tick from the first run's to
// the last run's has exactly one run under its derived id
// (jobstore.TickID): none lost, though each failover left a tick due with
// no leader, and none run twice (no job of the schedule is another tick's,
// and no process logged a tick's run as started that another had started).
// Nothing is asserted about time: how late each tick's run was stored
// (created_at − tick) is logged, for docs/benchmarks.md.
func TestScheduleFailoverE2E(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	r := newSchedE2E(t, "")
	cfg := r.roots(t) + "scheduler:\n  leader_ttl: 2s\nschedules:\n  - {name: fail2, cron: \"@every 2s\", job: job.yaml, concurrency: allow}\n"
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now() // a first pass runs the tick before it, if any
	var all []*daemon   // every process started, the killed ones too (their logs count)
	start := func() *failoverSched {
		d, base := r.scheduler(t)
		all = append(all, d)
		return &failoverSched{d, base}
	}
	ss := [2]*failoverSched{start(), start()}
	leader := func() int {
		return waitfor.Value(t, 30*time.Second, "a scheduler leading", func() int {
			for i, s := range ss {
				if isLeader(t, s.base) {
					return i
				}
			}
			return -1
		}, func(i int) bool { return i >= 0 })
	}
	type gap struct{ killed, led time.Time }
	var gaps []gap
	// Kill the leader 0.3 s, 1.1 s and 1.9 s after a tick.
	for _, phase := range []time.Duration{300 * time.Millisecond, 1100 * time.Millisecond, 1900 * time.Millisecond} {
		l := leader()
		ledAt := time.Now()
		waitfor.True(t, 20*time.Second, "two ticks run by the leader", func() bool {
			n := 0
			for tick := range r.runs(t, ss[l].base, "fail2", began, time.Now(), every) {
				if tick.After(ledAt) {
					n++
				}
			}
			return n >= 2
		})
		waitfor.True(t, 10*time.Second, fmt.Sprintf("%s past a tick", phase), func() bool {
			since := time.Since(tickFloor(time.Now(), every))
			return since >= phase && since < phase+200*time.Millisecond
		})
		killed := time.Now()
		_ = ss[l].d.cmd.Process.Kill()
		<-ss[l].d.done
		other := 1 - l
		waitfor.True(t, 20*time.Second, "the other scheduler leading", func() bool { return isLeader(t, ss[other].base) })
		gaps = append(gaps, gap{killed, ledSince(t, ss[other].d)})
		ss[l] = start()
	}
	// The last leader runs two ticks of its own.
	l := leader()
	ledAt := time.Now()
	waitfor.True(t, 20*time.Second, "two ticks after the last failover", func() bool {
		n := 0
		for tick := range r.runs(t, ss[l].base, "fail2", began, time.Now(), every) {
			if tick.After(ledAt) {
				n++
			}
		}
		return n >= 2
	})
	// The logs are read before the runs, so every run logged is listed.
	started := map[string]int{}
	re := regexp.MustCompile(`msg="schedule: run started" schedule=fail2 run_id=(\S+)`)
	for _, d := range all {
		for _, m := range re.FindAllStringSubmatch(d.output(), -1) {
			started[m[1]]++
		}
	}
	runs := r.runs(t, ss[l].base, "fail2", began, time.Now(), every)
	var first, last time.Time
	byID := map[string]bool{}
	for tick, j := range runs {
		if first.IsZero() || tick.Before(first) {
			first = tick
		}
		if tick.After(last) {
			last = tick
		}
		byID[j.ID] = true
	}
	// None lost: every tick of the window has its run.
	var steady, inGap []time.Duration
	for tick := first; !tick.After(last); tick = tick.Add(every) {
		j, ok := runs[tick]
		if !ok {
			t.Errorf("tick %s has no run (lost)", tick.Format("15:04:05.000"))
			continue
		}
		late := j.CreatedAt.Sub(tick)
		if tick.Before(began) {
			continue // due before any scheduler ran: run by the first one's first pass
		}
		dueInGap := false // due before the takeover, run after the kill
		for _, g := range gaps {
			if tick.Before(g.led) && j.CreatedAt.After(g.killed) {
				dueInGap = true
			}
		}
		if dueInGap {
			inGap = append(inGap, late)
		} else {
			steady = append(steady, late)
		}
	}
	if len(inGap) == 0 {
		t.Logf("no tick came due between a kill and the takeover seen (gaps %v)", gaps)
	}
	// None run twice: no process logged a run started that another started.
	for id, n := range started {
		if n > 1 {
			t.Errorf("run %s logged as started %d times", id, n)
		}
		if !byID[id] {
			t.Errorf("run %s started, but is no tick's run in the window", id)
		}
	}
	t.Logf("%d ticks %s..%s, each run once; %d failovers; lateness (created_at − tick): steady %s; due while no leader led %s",
		len(runs), first.Format("15:04:05"), last.Format("15:04:05"), len(gaps), lateness(steady), lateness(inGap))
}

// ledSince is when d last logged that it leads.
func ledSince(t *testing.T, d *daemon) time.Time {
	t.Helper()
	m := regexp.MustCompile(`time=(\S+) level=INFO msg=leading`).FindAllStringSubmatch(d.output(), -1)
	if len(m) == 0 {
		t.Fatalf("no leading line in the log:\n%s", d.output())
	}
	at, err := time.Parse(time.RFC3339Nano, m[len(m)-1][1])
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// lateness sums up ds: n, min, median, 90th percentile and max.
func lateness(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	return strings.Join([]string{
		fmt.Sprintf("n=%d", len(s)), "min=" + ms(s[0]) + "ms", "median=" + ms(s[len(s)/2]) + "ms",
		"p90=" + ms(s[len(s)*9/10]) + "ms", "max=" + ms(s[len(s)-1]) + "ms",
	}, " ")
}
