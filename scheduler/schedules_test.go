package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/cron"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// Schedule duty tests: a real redis-server, Schedulers made with New but
// not started (no leader loop): the test runs their schedule duties
// itself, at the instants of a fake clock, so ticks and downtimes take no
// real time. Two Schedulers sharing the store run their passes at once,
// as two leaders overlapping would.

type schedRig struct {
	ctx   context.Context
	store *jobstore.Store
	ss    []*Scheduler
	logs  []*lockedBuf
	dir   string
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

const schedJob = `{"name":"nightly","base_model":"tiny-char","dataset":"file:///data/train.jsonl"}`

// newSchedRig makes n Schedulers over one store, running entries (their
// job: paths relative to the rig's folder, which holds job.yaml).
func newSchedRig(t *testing.T, n int, entries ...cron.Entry) *schedRig {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	r := &schedRig{ctx: context.Background(), store: jobstore.New(rdb, jobstore.Config{}), dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(r.dir, "job.yaml"), []byte(schedJob), 0o644); err != nil {
		t.Fatal(err)
	}
	ss, err := cron.Parse(entries, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		lg := &lockedBuf{}
		s := New(rdb, r.store, Config{ID: fmt.Sprintf("s%d", i), Schedules: ss, Logger: slog.New(slog.NewTextHandler(lg, nil)),
			Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}})
		r.ss = append(r.ss, s)
		r.logs = append(r.logs, lg)
	}
	return r
}

// passAt runs every Scheduler's schedule duty at now, all at once.
func (r *schedRig) passAt(now time.Time) {
	var wg sync.WaitGroup
	for _, s := range r.ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scheduleRunnerOf(s, func() time.Time { return now }).run(r.ctx)
		}()
	}
	wg.Wait()
}

// scheduleRunnerOf is s's schedule duty, on the clock now (nil: time.Now).
func scheduleRunnerOf(s *Scheduler, now func() time.Time) *scheduleRunner {
	return newScheduleRunner(scheduleRunnerParams{Store: s.store, Log: s.log, Schedules: s.Schedules, Defaults: s.cfg.Defaults,
		Admit: admitterOf(s), SawRedis: s.SawRedis, Now: now})
}

// runs lists the jobs of schedule name by tick: each job id must be the
// tick's derived id.
func (r *schedRig) runs(t *testing.T, name string, from, to time.Time, every time.Duration) map[time.Time]*jobtype.Job {
	t.Helper()
	jobs, _, err := r.store.List(r.ctx, "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*jobtype.Job{}
	for _, j := range jobs {
		if j.Submitter == "schedule:"+name {
			byID[j.ID] = j
		}
	}
	out := map[time.Time]*jobtype.Job{}
	for tick := from; !tick.After(to); tick = tick.Add(every) {
		if j := byID[jobstore.TickID("j-", name, tick)]; j != nil {
			out[tick] = j
			delete(byID, j.ID)
		}
	}
	for id, j := range byID {
		t.Errorf("job %s (%s, submitter %s) is no tick's run", id, j.Name, j.Submitter)
	}
	return out
}

func (r *schedRig) state(t *testing.T, name string) jobstore.ScheduleState {
	t.Helper()
	st, err := r.store.ScheduleStateOf(r.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

// TestScheduleOneRunPerTickTwoSchedulers: two Schedulers pass at the same
// instants every 700ms through 30 ticks of @every 2s (allow, so every
// tick runs): every tick has its run, under its derived id, submitted as
// the schedule for its team, and only one of the two stored it.
func TestScheduleOneRunPerTickTwoSchedulers(t *testing.T) {
	r := newSchedRig(t, 2, cron.Entry{Name: "nightly", Cron: "@every 2s", Job: "job.yaml", Concurrency: "allow", Team: "nlp"})
	end := t0.Add(60 * time.Second)
	for now := t0.Add(100 * time.Millisecond); now.Before(end); now = now.Add(700 * time.Millisecond) {
		r.passAt(now)
	}
	runs := r.runs(t, "nightly", t0, end, 2*time.Second)
	for tick := t0; tick.Before(end); tick = tick.Add(2 * time.Second) {
		j := runs[tick]
		if j == nil {
			t.Errorf("tick %s has no run", tick.Format(time.TimeOnly))
			continue
		}
		if j.Submitter != "schedule:nightly" || j.Team != "nlp" || j.State != jobtype.StateQueued || j.Route == nil {
			t.Errorf("run %s: submitter %q team %q state %s route %v", j.ID, j.Submitter, j.Team, j.State, j.Route)
		}
	}
	started := map[string]int{}
	for _, lg := range r.logs {
		for _, line := range strings.Split(lg.String(), "\n") {
			if strings.Contains(line, `msg="schedule: run started"`) {
				started[field(line, "run_id")]++
			}
		}
	}
	if len(started) != 30 {
		t.Errorf("%d runs started, want 30", len(started))
	}
	for id, n := range started {
		if n != 1 {
			t.Errorf("run %s started %d times", id, n)
		}
	}
}

// field reads key=value from a slog text line.
func field(line, key string) string {
	_, v, _ := strings.Cut(line, " "+key+"=")
	v, _, _ = strings.Cut(v, " ")
	return v
}

// TestScheduleConcurrency: forbid skips a tick while the last run is
// queued (and runs again once it ended), replace cancels it and starts the
// new one, allow runs both.
func TestScheduleConcurrency(t *testing.T) {
	r := newSchedRig(t, 1,
		cron.Entry{Name: "f", Cron: "@every 10s", Job: "job.yaml"},
		cron.Entry{Name: "r", Cron: "@every 10s", Job: "job.yaml", Concurrency: "replace"},
		cron.Entry{Name: "a", Cron: "@every 10s", Job: "job.yaml", Concurrency: "allow"})
	tick := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Second) }
	get := func(name string, i int) *jobtype.Job {
		j, err := r.store.Get(r.ctx, jobstore.TickID("j-", name, tick(i)))
		if err != nil {
			return nil
		}
		return j
	}
	r.passAt(tick(0).Add(time.Second))
	r.passAt(tick(1).Add(time.Second))
	if get("f", 0) == nil || get("f", 1) != nil {
		t.Fatalf("forbid: runs of ticks 0, 1: %v %v", get("f", 0), get("f", 1))
	}
	if st := r.state(t, "f"); st.Outcome != jobstore.TickSkipped || !st.Tick.Equal(tick(1)) ||
		!strings.Contains(st.Message, "forbid") || !strings.Contains(st.Message, "still queued") || st.RunID != get("f", 0).ID {
		t.Fatalf("forbid: state %+v", st)
	}
	if j0, j1 := get("r", 0), get("r", 1); j0 == nil || j1 == nil || j0.State != jobtype.StateCancelled || j1.State != jobtype.StateQueued {
		t.Fatalf("replace: runs of ticks 0, 1: %v %v", j0, j1)
	}
	if st := r.state(t, "r"); st.Outcome != jobstore.TickReplaced || st.RunID != get("r", 1).ID || !strings.Contains(st.Message, get("r", 0).ID) {
		t.Fatalf("replace: state %+v", st)
	}
	if j0, j1 := get("a", 0), get("a", 1); j0 == nil || j1 == nil || j0.State != jobtype.StateQueued || j1.State != jobtype.StateQueued {
		t.Fatalf("allow: runs of ticks 0, 1: %v %v", j0, j1)
	}
	// The forbidden schedule's run ends: the next tick runs.
	if _, err := r.store.Cancel(r.ctx, get("f", 0).ID); err != nil {
		t.Fatal(err)
	}
	r.passAt(tick(2).Add(time.Second))
	if get("f", 2) == nil {
		t.Fatalf("forbid: tick 2 did not run after the last run ended: %+v", r.state(t, "f"))
	}
}

// TestScheduleMissedAfterDowntime: @every 2s with starting_deadline 1s,
// passes every 500ms, then none for 5 ticks (a downtime of every
// scheduler), then passes again: missed: once runs one of the 5 missed
// ticks (the latest), missed: skip none; the ticks around the downtime all
// run.
func TestScheduleMissedAfterDowntime(t *testing.T) {
	r := newSchedRig(t, 2,
		cron.Entry{Name: "once", Cron: "@every 2s", Job: "job.yaml", Missed: "once", StartingDeadline: "1s", Concurrency: "allow"},
		cron.Entry{Name: "skip", Cron: "@every 2s", Job: "job.yaml", Missed: "skip", StartingDeadline: "1s", Concurrency: "allow"})
	downFrom, downTo := t0.Add(4500*time.Millisecond), t0.Add(15300*time.Millisecond) // ticks 6, 8, 10, 12, 14
	end := t0.Add(20 * time.Second)
	for now := t0.Add(200 * time.Millisecond); now.Before(end); now = now.Add(500 * time.Millisecond) {
		if now.After(downFrom) && now.Before(downTo) {
			continue
		}
		r.passAt(now)
	}
	for name, want := range map[string]int{"once": 1, "skip": 0} {
		runs := r.runs(t, name, t0, end, 2*time.Second)
		missed := 0
		for tick := range runs {
			if tick.After(downFrom) && tick.Before(downTo) {
				missed++
			}
		}
		if missed != want {
			t.Errorf("missed: %s ran %d of the 5 missed ticks, want %d", name, missed, want)
		}
		if name == "once" && runs[t0.Add(14*time.Second)] == nil {
			t.Errorf("missed: once did not run the latest missed tick (14s): %v", runs)
		}
		for _, sec := range []int{0, 2, 4, 16, 18} {
			if runs[t0.Add(time.Duration(sec)*time.Second)] == nil {
				t.Errorf("%s: tick +%ds did not run", name, sec)
			}
		}
	}
}

// TestScheduleResumesAClaimedTick: a leader that claimed a tick and
// stopped before storing its run (state claimed, no job) leaves the run
// to the next pass; a tick whose run was stored and then pruned is not
// run again.
func TestScheduleResumesAClaimedTick(t *testing.T) {
	r := newSchedRig(t, 1, cron.Entry{Name: "n", Cron: "@every 10s", Job: "job.yaml"})
	id := jobstore.TickID("j-", "n", t0)
	if won, _, err := r.store.ClaimTick(r.ctx, "n", t0, id); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	if _, err := r.store.SetScheduleState(r.ctx, "n", jobstore.ScheduleState{Tick: t0, Outcome: jobstore.TickClaimed, TickRunID: id, Kind: "job"}); err != nil {
		t.Fatal(err)
	}
	r.passAt(t0.Add(3 * time.Second))
	if j, err := r.store.Get(r.ctx, id); err != nil || j.Submitter != "schedule:n" {
		t.Fatalf("the claimed tick's run was not stored: %v %v", j, err)
	}
	if st := r.state(t, "n"); st.Outcome != jobstore.TickStarted || st.RunID != id {
		t.Fatalf("state after resume: %+v", st)
	}
	// Pruned: the tick's run ended and is gone, and its state says started.
	if _, err := r.store.Cancel(r.ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Delete(r.ctx, id); err != nil {
		t.Fatal(err)
	}
	r.passAt(t0.Add(4 * time.Second))
	if _, err := r.store.Get(r.ctx, id); err == nil {
		t.Fatal("a started tick's pruned run was stored again")
	}
}

// TestScheduleFailedStart: a job file that does not parse makes the tick
// failed, naming the file and the field; the next tick, with the file
// fixed, runs.
func TestScheduleFailedStart(t *testing.T) {
	r := newSchedRig(t, 1, cron.Entry{Name: "n", Cron: "@every 10s", Job: "job.yaml"})
	if err := os.WriteFile(filepath.Join(r.dir, "job.yaml"), []byte(`{"name":"x","base_model":"tiny-char","dataset":"file:///d","epochs":"many"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r.passAt(t0.Add(time.Second))
	st := r.state(t, "n")
	if st.Outcome != jobstore.TickFailed || !strings.Contains(st.Message, filepath.Join(r.dir, "job.yaml")) || !strings.Contains(st.Message, "epochs") {
		t.Fatalf("state after a bad file: %+v", st)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "job.yaml"), []byte(schedJob), 0o644); err != nil {
		t.Fatal(err)
	}
	r.passAt(t0.Add(11 * time.Second))
	if st := r.state(t, "n"); st.Outcome != jobstore.TickStarted || st.RunID != jobstore.TickID("j-", "n", t0.Add(10*time.Second)) {
		t.Fatalf("state after the file was fixed: %+v", st)
	}
}

// TestScheduleSweepTick: a sweep schedule's tick whose sweep file is
// missing is recorded failed, naming the file; once the file is there the
// next tick admits its sweep under the tick's derived id, with every
// trial, and records it started.
func TestScheduleSweepTick(t *testing.T) {
	r := newSchedRig(t, 1, cron.Entry{Name: "sw", Cron: "@every 10s", Sweep: "sweep.yaml"})
	r.passAt(t0.Add(time.Second))
	if st := r.state(t, "sw"); st.Outcome != jobstore.TickFailed || st.Kind != "sweep" || !strings.HasPrefix(st.TickRunID, "s-") ||
		!strings.Contains(st.Message, filepath.Join(r.dir, "sweep.yaml")) {
		t.Fatalf("sweep tick without its file: %+v", st)
	}
	sweep := "name: sw\njob: job.yaml\nparameters:\n  lora.rank: {grid: [4, 8, 16]}\n"
	if err := os.WriteFile(filepath.Join(r.dir, "sweep.yaml"), []byte(sweep), 0o644); err != nil {
		t.Fatal(err)
	}
	r.passAt(t0.Add(11 * time.Second))
	st := r.state(t, "sw")
	want := jobstore.TickID("s-", "sw", t0.Add(10*time.Second))
	if st.Outcome != jobstore.TickStarted || st.RunID != want {
		t.Fatalf("sweep tick with its file: %+v, want started as %s", st, want)
	}
	if sw, err := r.store.GetSweep(r.ctx, want); err != nil || sw.Trials != 3 || sw.Schedule != "sw" {
		t.Fatalf("the tick's sweep: %+v, %v", sw, err)
	}
}

// TestSchedulesAPI: GET /api/v1/schedules lists each schedule with its
// next tick and its last tick's outcome; viewers may read it.
func TestSchedulesAPI(t *testing.T) {
	r := newSchedRig(t, 1, cron.Entry{Name: "n", Cron: "0 2 * * *", Timezone: "Europe/Berlin", Job: "job.yaml"},
		cron.Entry{Name: "m", Cron: "@every 10s", Job: "job.yaml"})
	r.passAt(time.Now())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(r.store.Redis(), r.store, Config{Schedules: r.ss[0].Schedules(), Logger: quiet})
	hs := httptest.NewServer(api.New(s, r.store.Redis(), r.store, api.Config{Logger: quiet,
		Tokens: []plane.Token{{Name: "v", Secret: "view-secret", Role: plane.RoleViewer}}}).Handler())
	defer hs.Close()
	req, _ := http.NewRequest("GET", hs.URL+"/api/v1/schedules", nil)
	req.Header.Set("Authorization", "Bearer view-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var got wire.ScheduleList
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got.Schedules) != 2 {
		t.Fatalf("%d schedules", len(got.Schedules))
	}
	n, m := got.Schedules[0], got.Schedules[1]
	if n.Name != "n" || n.Cron != "0 2 * * *" || n.Timezone != "Europe/Berlin" || n.Kind != "job" || n.File != filepath.Join(r.dir, "job.yaml") ||
		n.NextTick == nil || n.Concurrency != "forbid" || n.Missed != "skip" {
		t.Fatalf("schedule n: %+v", n)
	}
	if hour := n.NextTick.In(mustLoc(t, "Europe/Berlin")).Hour(); hour != 2 {
		t.Fatalf("n's next tick %s is not 02:00 in Berlin", n.NextTick)
	}
	if m.LastTick == nil || m.Outcome != jobstore.TickStarted || m.LastRunID == "" || m.LastRunState != string(jobtype.StateQueued) {
		t.Fatalf("schedule m: %+v", m)
	}
}

func mustLoc(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestNightlyExampleAdmitsItsSweep: the schedule of
// configs/examples/nightly.yaml, started for a tick as the schedule duty
// starts it, admits configs/examples/sweep-grid.yaml as the tick's sweep
// (its derived id, the schedule's plane.Principal): 6 trials, each with the demo
// job's data paths resolved against the job file's folder; a second start
// of the same tick stores nothing new.
func TestNightlyExampleAdmitsItsSweep(t *testing.T) {
	r := newSchedRig(t, 1)
	s := r.ss[0]
	root, _ := filepath.Abs("..")
	ex := filepath.Join(root, "configs", "examples")
	sch := cron.Schedule{Name: "nightly-tiny-grid", Kind: cron.KindSweep, File: filepath.Join(ex, "sweep-grid.yaml")}
	tick := time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)
	id := jobstore.TickID("s-", sch.Name, tick)
	ctx := context.Background()
	for range 2 {
		if err := scheduleRunnerOf(s, nil).startSweep(ctx, sch, id, tick); err != nil {
			t.Fatal(err)
		}
	}
	sw, err := s.store.GetSweep(ctx, id)
	if err != nil || sw.Trials != 6 || sw.Schedule != sch.Name || sw.Tick == nil || !sw.Tick.Equal(tick) || sw.Submitter != "schedule:"+sch.Name {
		t.Fatalf("the night's sweep: %+v, %v", sw, err)
	}
	jobs, err := s.store.SweepTrials(ctx, id, 0, 0)
	if err != nil || len(jobs) != 6 {
		t.Fatalf("%d trials (%v), want 6", len(jobs), err)
	}
	want := fileuri.FromPath(filepath.Join(ex, "data", "tiny-train.jsonl"))
	for _, j := range jobs {
		if j.Spec.Dataset != want {
			t.Errorf("trial %s dataset %q, want %q (resolved against the job file's folder)", j.ID, j.Spec.Dataset, want)
		}
	}
	if n, _ := s.store.Redis().ZCard(ctx, "lathe:jobs").Result(); n != 6 {
		t.Errorf("the store holds %d jobs after two starts of one tick, want 6", n)
	}
}

// TestScheduleFailoverLosesNoTick: @every 2s (starting_deadline 1h by
// default), two schedulers passing every 500ms, then no pass for 5.5 s
// (the leader died; the next took over): the ticks that came due in the
// gap run once each when passes resume, earliest first, and every tick of
// the run ran exactly once.
func TestScheduleFailoverLosesNoTick(t *testing.T) {
	r := newSchedRig(t, 2, cron.Entry{Name: "f", Cron: "@every 2s", Job: "job.yaml", Concurrency: "allow"})
	gapFrom, gapTo := t0.Add(4200*time.Millisecond), t0.Add(9700*time.Millisecond) // ticks 6 and 8 come due in it
	end := t0.Add(16 * time.Second)
	for now := t0.Add(200 * time.Millisecond); now.Before(end); now = now.Add(500 * time.Millisecond) {
		if now.After(gapFrom) && now.Before(gapTo) {
			continue
		}
		r.passAt(now)
	}
	runs := r.runs(t, "f", t0, end, 2*time.Second)
	for sec := 0; sec < 16; sec += 2 {
		if runs[t0.Add(time.Duration(sec)*time.Second)] == nil {
			t.Errorf("tick +%ds did not run (runs: %d)", sec, len(runs))
		}
	}
}
