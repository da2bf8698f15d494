package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

// TestConfigSchedules: the schedules: section loads with its files
// resolved against the config's folder; an unknown key, a bad field and a
// missing file are errors naming the schedule.
func TestConfigSchedules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(`{"name":"n","base_model":"tiny-char","dataset":"file:///d"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(body string) string {
		p := filepath.Join(dir, "lathe.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("schedules:\n  - {name: nightly-lr, cron: \"0 2 * * *\", timezone: Europe/Berlin, job: job.yaml, team: nlp}\n")
	fc, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(fc.schedules) != 1 || fc.schedules[0].File != filepath.Join(dir, "job.yaml") || fc.schedules[0].Team != "nlp" {
		t.Fatalf("schedules: %+v", fc.schedules)
	}
	if ss, err := loadSchedules(p); err != nil || len(ss) != 1 || ss[0].Name != "nightly-lr" {
		t.Fatalf("loadSchedules: %v %+v", err, ss)
	}
	for body, want := range map[string][]string{
		"schedules:\n  - {name: a, cron: \"@hourly\", job: job.yaml, colour: red}\n": {"colour"},
		"schedules:\n  - {name: a, cron: \"@hourly\", job: gone.yaml}\n":             {"schedules[0].job", "gone.yaml"},
		"schedules:\n  - {name: A, cron: \"99 * * * *\", job: job.yaml, missed: all}\n": {
			`schedules[0].name: "A"`, `schedules[0].cron: "99 * * * *"`, `schedules[0].missed: "all"`},
	} {
		p := write(body)
		for _, load := range []func(string) error{
			func(p string) error { _, err := loadConfig(p); return err },
			func(p string) error { _, err := loadSchedules(p); return err },
		} {
			err := load(p)
			if err == nil {
				t.Fatalf("%s: loaded", body)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error lacks %q: %v", body, w, err)
				}
			}
		}
	}
}

// schedRig is a Redis, a data dir, a folder with a job file and a config,
// and the lathed and lathe binaries, for the schedule end-to-end tests. No
// worker runs: the scheduled jobs stay queued, which is "still going". The
// job and sweep files are in dir, not the data dir: lathed reads no
// schedule file there (it is lathed's own, never data).
type schedRig struct {
	lathed, lathe, data, dir, cfg string
	rs                            *redistest.Server
}

func newSchedE2E(t *testing.T, schedules string) *schedRig {
	t.Helper()
	lathed, lathe := binaries(t)
	r := &schedRig{lathed: lathed, lathe: lathe, data: t.TempDir(), dir: t.TempDir(), rs: redistest.StartWith(t, redistest.Options{AOF: true})}
	job := `{"name":"scheduled","base_model":"tiny-char","dataset":"file://` + repoRoot(t) + `/configs/examples/data/tiny-train.jsonl"}`
	if err := os.WriteFile(filepath.Join(r.dir, "job.yaml"), []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	r.cfg = filepath.Join(r.dir, "lathe.yaml")
	r.writeConfig(t, schedules)
	return r
}

func (r *schedRig) writeConfig(t *testing.T, schedules string) {
	t.Helper()
	body := r.roots(t) + "scheduler:\n  leader_ttl: 2s\n  place_interval: 100ms\nschedules:\n" + schedules
	if err := os.WriteFile(r.cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// roots is the config's jobs: section: the data dir (the default
// output), the rig's folder (the schedule files) and the repository (the
// demo dataset).
func (r *schedRig) roots(t *testing.T) string {
	return "jobs:\n  allowed_roots: [" + r.data + ", " + r.dir + ", " + repoRoot(t) + "]\n"
}

// scheduler starts `lathed scheduler` on a free port and returns it and its URL.
func (r *schedRig) scheduler(t *testing.T) (*daemon, string) {
	t.Helper()
	port := strconv.Itoa(redistest.FreePort(t))
	d := startDaemon(t, r.lathed, "scheduler", "--config", r.cfg, "--redis-url", r.rs.URL(), "--listen", "127.0.0.1:"+port, "--data-dir", r.data)
	base := "http://127.0.0.1:" + port
	waitHTTP(t, base, d)
	return d, base
}

// runs lists, through lathe list -o json, the jobs of schedule name by
// their tick, from from to to: a job whose id is no tick's derived id
// fails the test. The run of a tick after to that came due while the list
// was read (to is often the time just before) is left out, not an error.
func (r *schedRig) runs(t *testing.T, base, name string, from, to time.Time, every time.Duration) map[time.Time]jobtype.Job {
	t.Helper()
	out, errOut, code := cli(t, r.lathe, base, "list", "-o", "json", "--limit", "1000")
	listed := time.Now()
	if code != 0 {
		t.Fatalf("lathe list: exit %d: %s", code, errOut)
	}
	var l wire.JobList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	byID := map[string]jobtype.Job{}
	for _, j := range l.Jobs {
		if j.Submitter == "schedule:"+name {
			byID[j.ID] = *j
		}
	}
	runs := map[time.Time]jobtype.Job{}
	for tick := tickFloor(from, every); !tick.After(listed); tick = tick.Add(every) {
		if j, ok := byID[jobstore.TickID("j-", name, tick)]; ok {
			if !tick.After(to) {
				runs[tick] = j
			}
			delete(byID, j.ID)
		}
	}
	for id := range byID {
		t.Errorf("schedule %s: job %s is the run of no tick between %s and %s", name, id, from, to)
	}
	return runs
}

// schedules reads lathe schedules -o json.
func (r *schedRig) schedules(t *testing.T, base string) map[string]wire.ScheduleInfo {
	t.Helper()
	m, _ := r.schedulesAs(t, base, "")
	return m
}

// schedulesAs reads lathe schedules -o json with LATHE_TOKEN=token (""
// for this process's environment), and returns it by name with the raw
// output.
func (r *schedRig) schedulesAs(t *testing.T, base, token string) (map[string]wire.ScheduleInfo, string) {
	t.Helper()
	var out, errOut string
	var code int
	if token == "" {
		out, errOut, code = cli(t, r.lathe, base, "schedules", "-o", "json")
	} else {
		out, errOut, code = cliAs(t, r.lathe, base, token, "schedules", "-o", "json")
	}
	if code != 0 {
		t.Fatalf("lathe schedules: exit %d: %s", code, errOut)
	}
	var l wire.ScheduleList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("lathe schedules -o json: %v\n%s", err, out)
	}
	m := map[string]wire.ScheduleInfo{}
	for _, s := range l.Schedules {
		m[s.Name] = s
	}
	return m, out
}

// TestSchedulesTwoSchedulersE2E: two `lathed scheduler` processes on one
// Redis, started 3 s apart, run an @every 10s job schedule (allow) for 65 s;
// the leader is SIGKILLed midway. Every tick of the window has exactly one
// run, under its derived id, and no job of the schedule is another's. A
// forbid schedule (@every 2s) ran once: its run stays queued, so every
// later tick is skipped, saying why. Then a SIGHUP loads a new schedule,
// and a bad config on a second SIGHUP keeps it.
func TestSchedulesTwoSchedulersE2E(t *testing.T) {
	t.Parallel()
	r := newSchedE2E(t, "  - {name: every10, cron: \"@every 10s\", job: job.yaml, concurrency: allow}\n"+
		"  - {name: forbid2, cron: \"@every 2s\", job: job.yaml}\n")
	start := time.Now()
	a, baseA := r.scheduler(t)
	waitfor.True(t, 30*time.Second, "3 s after the first scheduler started", func() bool { return time.Since(start) >= 3*time.Second })
	b, baseB := r.scheduler(t)
	// Kill the leader once it started some runs.
	waitfor.True(t, 40*time.Second, "two runs of every10", func() bool { return len(r.runs(t, baseA, "every10", start, time.Now(), 10*time.Second)) >= 2 })
	survivor, victim := baseB, a
	if !isLeader(t, baseA) {
		survivor, victim = baseA, b
	}
	_ = victim.cmd.Process.Kill()
	<-victim.done
	end := start.Add(65 * time.Second)
	waitfor.True(t, 90*time.Second, "the 65 s window", func() bool { return time.Now().After(end) })
	runs := r.runs(t, survivor, "every10", start, end, 10*time.Second)
	first := tickFloor(start, 10*time.Second)
	if _, ok := runs[first]; !ok {
		first = first.Add(10 * time.Second) // the first pass came after the next tick
	}
	last := tickFloor(end.Add(-3*time.Second), 10*time.Second)
	n := 0
	for tick := first; !tick.After(last); tick = tick.Add(10 * time.Second) {
		j, ok := runs[tick]
		if !ok {
			t.Errorf("tick %s has no run (runs %v)", tick.Format(time.TimeOnly), keys(runs))
			continue
		}
		n++
		if j.State != jobtype.StateQueued || j.Team != "" {
			t.Errorf("run %s of tick %s: %s team %q", j.ID, tick.Format(time.TimeOnly), j.State, j.Team)
		}
	}
	if n < 6 {
		t.Errorf("%d ticks in a 65 s window of @every 10s", n)
	}
	forbid := r.runs(t, survivor, "forbid2", start, end, 2*time.Second)
	info := r.schedules(t, survivor)
	if len(forbid) != 1 || info["forbid2"].Outcome != "skipped" || !strings.Contains(info["forbid2"].Message, "forbid") ||
		info["forbid2"].LastRunState != "queued" {
		t.Errorf("forbid2: %d runs, %+v", len(forbid), info["forbid2"])
	}
	if e := info["every10"]; e.NextTick == nil || e.LastTick == nil || e.Outcome != "started" || e.Kind != "job" {
		t.Errorf("every10: %+v", e)
	}
	out, _, code := cli(t, r.lathe, survivor, "schedules")
	if code != 0 || !strings.Contains(out, "every10") || !strings.Contains(out, "concurrency: forbid") {
		t.Errorf("lathe schedules: exit %d\n%s", code, out)
	}
	r.checkReload(t, survivor, a, b)
}

// checkReload: SIGHUP loads a changed schedules: section; a bad one is
// refused and the schedules in force stay.
func (r *schedRig) checkReload(t *testing.T, base string, ds ...*daemon) {
	t.Helper()
	hup := func() {
		for _, d := range ds {
			select {
			case <-d.done:
			default:
				_ = d.cmd.Process.Signal(syscall.SIGHUP)
			}
		}
	}
	r.writeConfig(t, "  - {name: every10, cron: \"@every 10s\", job: job.yaml, concurrency: allow}\n"+
		"  - {name: hourly, cron: \"@hourly\", job: job.yaml}\n")
	hup()
	waitfor.True(t, 20*time.Second, "the reloaded schedules", func() bool {
		m := r.schedules(t, base)
		_, ok := m["hourly"]
		return ok && len(m) == 2
	})
	r.writeConfig(t, "  - {name: BAD, cron: \"@hourly\", job: job.yaml}\n")
	hup()
	waitfor.True(t, 20*time.Second, "the bad reload logged", func() bool {
		for _, d := range ds {
			if strings.Contains(d.output(), "schedules not reloaded") {
				return true
			}
		}
		return false
	})
	if m := r.schedules(t, base); len(m) != 2 {
		t.Fatalf("after a bad reload: %v", m)
	}
}

func keys(m map[time.Time]jobtype.Job) []string {
	var out []string
	for k := range m {
		out = append(out, k.Format(time.TimeOnly))
	}
	return out
}

// TestSchedulesMissedOnceE2E: @every 6s with starting_deadline 2s, one
// `lathed scheduler`; it is stopped for five ticks and started again 2.3 s
// after the fifth (so that tick is past its deadline, and the next is 3.7 s
// away: time for the new process's first pass). missed: once ran one of the five missed ticks (the latest), not
// five; missed: skip none of them. Ticks before and after ran.
func TestSchedulesMissedOnceE2E(t *testing.T) {
	t.Parallel()
	const every = 6 * time.Second
	r := newSchedE2E(t, "  - {name: once6, cron: \"@every 6s\", job: job.yaml, missed: once, starting_deadline: 2s, concurrency: allow}\n"+
		"  - {name: skip6, cron: \"@every 6s\", job: job.yaml, missed: skip, starting_deadline: 2s, concurrency: allow}\n")
	start := time.Now()
	d, base := r.scheduler(t)
	waitfor.True(t, 30*time.Second, "two runs of each", func() bool {
		return len(r.runs(t, base, "once6", start, time.Now(), every)) >= 2 && len(r.runs(t, base, "skip6", start, time.Now(), every)) >= 2
	})
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.done
	stopped := time.Now()
	lastBefore := tickFloor(stopped, every)
	restart := lastBefore.Add(5*every + 2300*time.Millisecond)
	waitfor.True(t, 45*time.Second, "five ticks of downtime", func() bool { return time.Now().After(restart) })
	_, base = r.scheduler(t)
	waitfor.True(t, 30*time.Second, "two more ticks", func() bool { return time.Now().After(restart.Add(2 * every)) })
	end := time.Now()
	for name, want := range map[string]int{"once6": 1, "skip6": 0} {
		runs := r.runs(t, base, name, start, end, every)
		missed := 0
		for tick := range runs {
			if tick.After(stopped) && tick.Before(restart) {
				missed++
			}
		}
		if missed != want {
			t.Errorf("%s ran %d of the 5 missed ticks, want %d (runs %v)", name, missed, want, keys(runs))
		}
		if name == "once6" {
			if _, ok := runs[lastBefore.Add(5*every)]; !ok {
				t.Errorf("once6 did not run the latest missed tick %s", lastBefore.Add(5*every).Format(time.TimeOnly))
			}
		}
		for _, tick := range []time.Time{lastBefore, lastBefore.Add(6 * every), lastBefore.Add(7 * every)} {
			if _, ok := runs[tick]; !ok && tick.Before(end.Add(-time.Second)) {
				t.Errorf("%s: tick %s (outside the downtime) did not run (runs %v)", name, tick.Format(time.TimeOnly), keys(runs))
			}
		}
	}
}

// tickFloor is the last multiple of every since the Unix epoch at or
// before t: an @every schedule's tick (time.Truncate counts from year 1).
func tickFloor(t time.Time, every time.Duration) time.Time {
	d := every.Milliseconds()
	return time.UnixMilli(t.UnixMilli() / d * d)
}

// TestNightlyExampleConfigLoads: configs/examples/nightly.yaml is a
// config lathed loads, with its one sweep schedule's file resolved.
func TestNightlyExampleConfigLoads(t *testing.T) {
	p := filepath.Join(repoRoot(t), "configs", "examples", "nightly.yaml")
	fc, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(fc.schedules) != 1 || fc.schedules[0].Kind != "sweep" || fc.schedules[0].File != filepath.Join(filepath.Dir(p), "sweep-grid.yaml") {
		t.Fatalf("schedules: %+v", fc.schedules)
	}
}
