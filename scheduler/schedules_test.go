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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
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

// fileRig is a Scheduler (not started: the test runs its schedule duty)
// on a real redis-server, with an allowed root holding team alpha's and
// team beta's folders (their own roots) and lathed's data dir (as the
// default config has it), a ledger key and a root-only secret outside the
// roots, each holding a marker no schedule message, log line or API
// answer may show.
type fileRig struct {
	*schedRig                  // one Scheduler: passAt, state
	s                          *Scheduler
	log                        *lockedBuf
	root, alpha, beta, dataDir string
	ledgerKey, secret          string // the markers
}

func newFileRig(t *testing.T, entries ...cron.Entry) *fileRig {
	t.Helper()
	srv := redistest.Start(t)
	root := t.TempDir()
	r := &fileRig{schedRig: &schedRig{ctx: context.Background(), store: jobstore.New(srv.Client(), jobstore.Config{}), dir: root}, log: &lockedBuf{}, root: root,
		alpha: filepath.Join(root, "alpha"), beta: filepath.Join(root, "beta"), dataDir: filepath.Join(root, "lathe-data"),
		ledgerKey: "4c45444745524b45592d6f662d6c61746865640a", secret: "ROOT-ONLY-SECRET-LINE"}
	for _, d := range []string{r.alpha, r.beta, r.dataDir, filepath.Join(root, "shared")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(r.dataDir, "ledger.key"), r.ledgerKey+"\n", 0o600)
	deployment, _ := pathpolicy.New([]string{root})
	teams, err := pathpolicy.NewTeamRoots(map[string][]string{"alpha": {r.alpha}, "beta": {r.beta}}, deployment)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cron.Parse(entries, root)
	if err != nil {
		t.Fatal(err)
	}
	r.s = New(srv.Client(), r.store, Config{Schedules: ss, Logger: slog.New(slog.NewTextHandler(r.log, nil)),
		AllowedRoots: deployment, TeamRoots: teams, DataDeny: pathpolicy.DataDeny(r.dataDir, "", "", nil),
		Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(filepath.Join(root, "shared", "out"))}})
	r.ss, r.logs = []*Scheduler{r.s}, []*lockedBuf{r.log}
	return r
}

func write(t *testing.T, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// jobIn is a valid job spec whose dataset and output are in dir.
func jobIn(dir string) string {
	return `{"name":"nightly","base_model":"tiny-char","dataset":"` + fileuri.FromPath(filepath.Join(dir, "train.jsonl")) +
		`","output":{"uri":"` + fileuri.FromPath(filepath.Join(dir, "out")) + `"}}`
}

// TestScheduleFilesOpenedLikeDatasets: a schedule's job file that is
// swapped for a link to lathed's ledger key (team alpha's, and a schedule
// with no team, whose roots hold the data dir), for a link to a root-only
// file outside the roots, or that holds text that is no job spec; a team
// beta job file naming alpha's dataset; and a beta sweep file built on
// alpha's job file: each tick fails with a message that names the file,
// the field and the rule, and neither the message, the log nor GET
// /api/v1/schedules shows anything read from the files.
func TestScheduleFilesOpenedLikeDatasets(t *testing.T) {
	r := newFileRig(t,
		cron.Entry{Name: "swap", Cron: "@every 10s", Job: "alpha/job.yaml", Team: "alpha", Concurrency: "allow"},
		cron.Entry{Name: "noteam", Cron: "@every 10s", Job: "shared/job.yaml", Concurrency: "allow"},
		cron.Entry{Name: "outside", Cron: "@every 10s", Job: "shared/outside.yaml", Concurrency: "allow"},
		cron.Entry{Name: "garbage", Cron: "@every 10s", Job: "alpha/garbage.yaml", Team: "alpha", Concurrency: "allow"},
		cron.Entry{Name: "beta-job", Cron: "@every 10s", Job: "beta/job.yaml", Team: "beta", Concurrency: "allow"},
		cron.Entry{Name: "beta-sweep", Cron: "@every 10s", Sweep: "beta/sweep.yaml", Team: "beta", Concurrency: "allow"},
	)
	write(t, filepath.Join(r.alpha, "job.yaml"), jobIn(r.alpha), 0o644)
	write(t, filepath.Join(r.root, "shared", "job.yaml"), jobIn(filepath.Join(r.root, "shared")), 0o644)
	outside := filepath.Join(t.TempDir(), "shadow")
	write(t, outside, r.secret+":$6$salt$hash:19000:0:99999:7:::\n", 0o600)
	if err := os.Symlink(outside, filepath.Join(r.root, "shared", "outside.yaml")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(r.alpha, "garbage.yaml"), "name: "+r.secret+"\napi_key: "+r.secret+"\ntraining: {epochs: "+r.secret+"}\n", 0o600)
	write(t, filepath.Join(r.beta, "job.yaml"), jobIn(r.alpha), 0o644)
	write(t, filepath.Join(r.beta, "sweep.yaml"), "name: s\njob: ../alpha/job.yaml\nparameters:\n  lora.rank: {grid: [4, 8]}\n", 0o644)

	// The first tick: alpha's own job file runs.
	r.passAt(t0.Add(time.Second))
	for name, want := range map[string]string{"swap": jobstore.TickStarted, "noteam": jobstore.TickStarted} {
		if st := r.state(t, name); st.Outcome != want {
			t.Fatalf("%s at the first tick: %+v, want %s", name, st, want)
		}
	}
	// Then the job files are swapped for links to the ledger key.
	for _, p := range []string{filepath.Join(r.alpha, "job.yaml"), filepath.Join(r.root, "shared", "job.yaml")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(r.dataDir, "ledger.key"), p); err != nil {
			t.Fatal(err)
		}
	}
	r.passAt(t0.Add(11 * time.Second))

	alphaRule := "not under an allowed root of team alpha (teams.alpha.allowed_roots: " + r.alpha + ")"
	betaRule := "not under an allowed root of team beta (teams.beta.allowed_roots: " + r.beta + ")"
	for name, want := range map[string][]string{
		"swap":       {"job file " + filepath.Join(r.alpha, "job.yaml") + ": " + alphaRule},
		"noteam":     {"job file " + filepath.Join(r.root, "shared", "job.yaml") + ": is lathed's own file, never readable by a job (the ledger key)"},
		"outside":    {"job file " + filepath.Join(r.root, "shared", "outside.yaml") + ": not under an allowed root of this deployment (jobs.allowed_roots: " + r.root + ")"},
		"garbage":    {"job file " + filepath.Join(r.alpha, "garbage.yaml") + ": invalid", "api_key: unknown field", "training.epochs: invalid"},
		"beta-job":   {"job file " + filepath.Join(r.beta, "job.yaml") + ": invalid", "dataset: " + betaRule, "output.uri: " + betaRule},
		"beta-sweep": {"sweep file " + filepath.Join(r.beta, "sweep.yaml") + ": its base job (job:): " + betaRule},
	} {
		st := r.state(t, name)
		if st.Outcome != jobstore.TickFailed {
			t.Errorf("%s: %+v, want failed", name, st)
			continue
		}
		for _, w := range want {
			if !strings.Contains(st.Message, w) {
				t.Errorf("%s: message %q lacks %q", name, st.Message, w)
			}
		}
	}

	// Nothing read from the files shows: not in the states, the log or
	// the API (an admin's view, which lists every schedule).
	hs := httptest.NewServer(api.New(r.s, r.store.Redis(), r.store, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tokens: []plane.Token{{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"}}}).Handler())
	defer hs.Close()
	listed := getSchedules(t, hs.URL, "admin-secret-0123456789")
	if len(listed) != 6 {
		t.Fatalf("the admin sees %d schedules, want 6", len(listed))
	}
	body, _ := json.Marshal(listed)
	for where, text := range map[string]string{"the API": string(body), "the log": r.log.String()} {
		for _, leak := range []string{r.ledgerKey, r.secret, "$6$salt", fileuri.FromPath(filepath.Join(r.alpha, "train.jsonl")), "../alpha/job.yaml", outside} {
			if strings.Contains(text, leak) {
				t.Errorf("%s shows %q", where, leak)
			}
		}
	}
	if !strings.Contains(r.log.String(), "schedule: run not started") {
		t.Errorf("the log does not say the runs did not start:\n%s", r.log.String())
	}
}

// TestSchedulesAPIShowsATeamItsOwn: GET /api/v1/schedules lists a team's
// token only its team's schedules (and their messages); an all_teams
// token and an admin see every schedule.
func TestSchedulesAPIShowsATeamItsOwn(t *testing.T) {
	r := newFileRig(t,
		cron.Entry{Name: "a1", Cron: "@hourly", Job: "alpha/job.yaml", Team: "alpha"},
		cron.Entry{Name: "b1", Cron: "@hourly", Job: "beta/job.yaml", Team: "beta"},
		cron.Entry{Name: "none", Cron: "@hourly", Job: "beta/job.yaml"},
	)
	toks := []plane.Token{
		{Name: "av", Secret: "alpha-viewer-0123456789", Role: plane.RoleViewer, Team: "alpha"},
		{Name: "bs", Secret: "beta-submitter-01234567", Role: plane.RoleSubmitter, Team: "beta"},
		{Name: "aud", Secret: "auditor-secret-01234567", Role: plane.RoleViewer, Team: "x", AllTeams: true},
		{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"},
	}
	hs := httptest.NewServer(api.New(r.s, r.store.Redis(), r.store, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tokens: toks}).Handler())
	defer hs.Close()
	for secret, want := range map[string][]string{
		toks[0].Secret: {"a1"},
		toks[1].Secret: {"b1"},
		toks[2].Secret: {"a1", "b1", "none"},
		toks[3].Secret: {"a1", "b1", "none"},
	} {
		var got []string
		for _, s := range getSchedules(t, hs.URL, secret) {
			got = append(got, s.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("token %s… sees %v, want %v", secret[:6], got, want)
		}
	}
}

func getSchedules(t *testing.T, base, secret string) []wire.ScheduleInfo {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/schedules", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l wire.ScheduleList
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
		t.Fatalf("GET /api/v1/schedules: %d", resp.StatusCode)
	}
	return l.Schedules
}

// TestScheduleMessageShowsNoValue: what a schedule's message says of a
// spec that is not valid, not admissible or refused never holds a value
// of the file: not a field's value, not text a parser quoted, not a key
// that is no name, not a routing reason; admission's rules and the
// parsers' cap are kept.
func TestScheduleMessageShowsNoValue(t *testing.T) {
	const secret = "SECRET-VALUE"
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"fields": {&jobspec.ValidationError{Errors: []jobspec.FieldError{
			{Field: "lora.rank", Value: secret, Message: "must be between 1 and 1024"},
			{Field: "output.formats[0]", Value: secret, Message: `unknown format "` + secret + `" (known: safetensors)`},
			{Field: "k: " + secret, Value: secret, Message: "unknown field"},
			{Value: secret, Message: "a job spec must be a mapping of fields, not a string"},
			{Message: "and 3 more problems"},
		}}, "lora.rank: invalid; output.formats[0]: invalid; a field: unknown field; the file: invalid; and 3 more problems"},
		"admission": {&plane.InvalidError{Fields: []jobspec.FieldError{
			{Field: "trials[0].dataset", Value: "file:///" + secret, Message: msgNotUnder + "an allowed root of team b (teams.b.allowed_roots: /b) (and 3 more trials)"},
		}}, "trials[0].dataset: not under an allowed root of team b (teams.b.allowed_roots: /b) (and 3 more trials)"},
		"refused": {&plane.RefusedError{What: "this job", Reasons: []string{"dataset s3://" + secret + "/x is in no site"}},
			"refused: no backend may run this job (1 reason; `lathe submit --dry-run /f.yaml` says why)"},
	} {
		got := scheduleMessage(c.err, "lathe submit --dry-run", "/f.yaml")
		if strings.Contains(got, secret) || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q; want it to hold %q and no value", name, got, c.want)
		}
	}
}
