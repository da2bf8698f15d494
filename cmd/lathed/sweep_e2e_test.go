package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

// sweepJob writes a short version of the tiny example job (absolute data
// paths, max_steps steps) into dir and returns its path.
func sweepJob(t *testing.T, dir string, maxSteps, gpus int, extra string) string {
	t.Helper()
	root := repoRoot(t)
	job := fmt.Sprintf(`name: tiny-sweep
base_model: tiny-char
dataset: file://%[1]s/configs/examples/data/tiny-train.jsonl
eval_dataset: file://%[1]s/configs/examples/data/tiny-eval.jsonl
lora: {rank: 8, alpha: 16, dropout: 0.05, target_modules: [q_proj, v_proj]}
training: {max_steps: %[2]d, batch_size: 8, learning_rate: 0.02, seed: 42, eval_every: 10}
resources: {gpus: %[3]d}
max_runtime: 10m
%[4]s`, root, maxSteps, gpus, extra)
	p := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(p, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func getSweep(t *testing.T, base, id string) wire.SweepStatus {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/sweeps/" + id)
	if err != nil {
		t.Fatalf("get sweep: %v", err)
	}
	defer resp.Body.Close()
	var st wire.SweepStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Sweep == nil {
		t.Fatalf("decode sweep %s: %v", id, err)
	}
	return st
}

// concurrencyWatch samples how many of a sweep's trials hold a slot, from
// the store (through the API) and from /proc (trainer processes whose
// environment names a trial of the sweep), and keeps the most of each.
type concurrencyWatch struct {
	done             chan struct{}
	wg               sync.WaitGroup
	mu               sync.Mutex
	store, processes int
}

// An empty sweepID counts every job's. Only processes of this test's
// daemon count: their LATHE_OUTPUT_DIR is under its data dir, so another
// Lathe's trainer on the machine (or any process with LATHE_JOB_ID=j-… in
// its environment) is not counted.
func watchSweep(t *testing.T, base, dataDir, sweepID string) *concurrencyWatch {
	w := &concurrencyWatch{done: make(chan struct{})}
	needle, list := []byte("LATHE_JOB_ID=j-"), base+"/api/v1/jobs?limit=1000"
	if sweepID != "" {
		needle, list = []byte("LATHE_JOB_ID=j-"+sweepID[2:]+"-"), list+"&sweep="+sweepID
	}
	ours := []byte("LATHE_OUTPUT_DIR=" + filepath.Clean(dataDir) + string(filepath.Separator))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			n := 0
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if e.Name()[0] < '0' || e.Name()[0] > '9' {
					continue
				}
				if b, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(b, needle) && bytes.Contains(b, ours) {
					n++
				}
			}
			active := 0
			if resp, err := http.Get(list); err == nil {
				var l wire.JobList
				_ = json.NewDecoder(resp.Body).Decode(&l)
				resp.Body.Close()
				for _, j := range l.Jobs {
					if j.State == jobtype.StateDispatched || j.State == jobtype.StateProvisioning || j.State == jobtype.StateRunning {
						active++
					}
				}
			}
			w.mu.Lock()
			w.store, w.processes = max(w.store, active), max(w.processes, n)
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *concurrencyWatch) stop() (store, processes int) {
	close(w.done)
	w.wg.Wait()
	return w.store, w.processes
}

// TestSweepGridEndToEnd: configs/examples/sweep-grid.yaml, a 3×2 grid of
// the tiny demo job with max_parallel 2, on a pool that could run 6 at
// once (`lathed up --slots 6`), with the real trainer: at most and at
// some point exactly 2 trials hold a slot (sampled from the store and from
// /proc), all 6 succeed, the leaderboard is ranked by eval_loss, and
// `lathe sweep pull --best` brings that trial's adapter.
func TestSweepGridEndToEnd(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	dir := t.TempDir()
	spec := filepath.Join(repoRoot(t), "configs", "examples", "sweep-grid.yaml") // the example, as a user runs it
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"), "--slots", "6")
	waitHTTP(t, base, d)

	// The daemon runs only this sweep: the watch counts every job.
	watch := watchSweep(t, base, filepath.Join(dir, "data"), "")
	out, errOut, code := cli(t, lathe, base, "sweep", "submit", spec, "--wait", "-o", "json")
	storePeak, procPeak := watch.stop()
	if code != 0 {
		t.Fatalf("sweep submit --wait exited %d\n%s\n%s", code, out, errOut)
	}
	var st wire.SweepStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Sweep == nil {
		t.Fatalf("sweep submit --wait -o json: %v\n%s", err, out)
	}
	if !strings.Contains(errOut, "6 succeeded; best ") {
		t.Errorf("the live view (stderr) never showed 6 succeeded and the best so far:\n%s", errOut)
	}
	id := st.Sweep.ID
	if st.Sweep.State != jobtype.SweepDone || st.Sweep.Counts[jobtype.StateSucceeded] != 6 {
		t.Fatalf("sweep ended %s with %v, want done with 6 succeeded", st.Sweep.State, st.Sweep.Counts)
	}
	if storePeak != 2 || procPeak != 2 {
		t.Errorf("peak concurrency: %d trials holding a slot in the store, %d trainer processes; want exactly 2 (max_parallel)", storePeak, procPeak)
	}
	checkLeaderboard(t, st, 6)
	best := st.Leaderboard[0]
	pulled := filepath.Join(dir, "best")
	if _, e, code := cli(t, lathe, base, "sweep", "pull", id, "--best", "--to", pulled); code != 0 {
		t.Fatalf("sweep pull --best exited %d: %s", code, e)
	}
	var cfg struct {
		R int `json:"r"`
	}
	b, err := os.ReadFile(filepath.Join(pulled, "adapter_config.json"))
	if err != nil || json.Unmarshal(b, &cfg) != nil {
		t.Fatalf("pulled adapter_config.json: %v", err)
	}
	bj := getJob(t, base, best.ID)
	if cfg.R != bj.Spec.LoRA.Rank {
		t.Errorf("pulled adapter has r=%d; the best trial %s has lora.rank %d", cfg.R, best.ID, bj.Spec.LoRA.Rank)
	}
	if out, _, code := cli(t, lathe, base, "list", "--sweep", id, "-o", "json"); code != 0 || strings.Count(out, `"sweep_id"`) != 6 {
		t.Errorf("list --sweep: exit %d, %d trials:\n%s", code, strings.Count(out, `"sweep_id"`), out)
	}
}

// checkLeaderboard checks a finished sweep's leaderboard: n rows, each
// with an objective, best first by eval_loss (ascending), and each row's
// objective the trial's own eval_loss.
func checkLeaderboard(t *testing.T, st wire.SweepStatus, n int) {
	t.Helper()
	if len(st.Leaderboard) != n {
		t.Fatalf("leaderboard has %d rows, want %d", len(st.Leaderboard), n)
	}
	for i, r := range st.Leaderboard {
		if r.Objective == nil {
			t.Fatalf("leaderboard row %d (%s) has no objective", i, r.ID)
		}
		if i > 0 && *r.Objective < *st.Leaderboard[i-1].Objective {
			t.Errorf("leaderboard not ranked by eval_loss: row %d %v < row %d %v", i, *r.Objective, i-1, *st.Leaderboard[i-1].Objective)
		}
	}
	if st.BestSucceeded != st.Leaderboard[0].ID {
		t.Errorf("best_succeeded %s, leaderboard's first %s", st.BestSucceeded, st.Leaderboard[0].ID)
	}
}

// TestSweepBudgetEndToEnd: a 6-trial sweep on a priced local pool
// (simulated GPUs at $1.10 per GPU-hour, each trial estimated at 10 h on
// one GPU) with a budget_usd that fits 3 estimates: exactly 3 are
// admitted at submit and the other 3 wait with the reason "sweep budget";
// the reserved amount never passes the budget; as trials end their actual
// cost (seconds, not 10 h) is settled, the rest are admitted, and the
// sweep ends done with every trial succeeded and its spend under budget.
func TestSweepBudgetEndToEnd(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	dir := t.TempDir()
	sweepJob(t, dir, 20, 1, "expected_runtime: 10h\n")
	cfgPath := filepath.Join(dir, "lathe.yaml")
	_ = os.WriteFile(cfgPath, []byte("sites:\n  dc: [onprem]\nredis_site: dc\nbackends:\n  local:\n    kind: local\n    site: dc\n    price: {usd_per_gpu_hour: 1.10}\n"), 0o644)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"),
		"--config", cfgPath, "--gpus", "simulated:dgxh100", "--slots", "8")
	waitHTTP(t, base, d)

	spec := filepath.Join(dir, "sweep.yaml")
	write := func(budget string) {
		_ = os.WriteFile(spec, []byte(`name: budget-e2e
job: job.yaml
parameters:
  training.learning_rate: {grid: [0.005, 0.01, 0.02]}
  lora.rank: {grid: [4, 8]}
search: grid
objective: {metric: eval_loss, goal: minimize}
`+budget), 0o644)
	}
	write("")
	out, errOut, code := cli(t, lathe, base, "sweep", "submit", spec, "--dry-run")
	if code != 0 {
		t.Fatalf("sweep submit --dry-run exited %d\n%s\n%s", code, out, errOut)
	}
	var dry wire.SweepDryRun
	if err := json.Unmarshal([]byte(out), &dry); err != nil || len(dry.Trials) != 6 || dry.Trials[0].Route == nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	est := dry.Trials[0].Route.EstCostUSD
	if est < 10 {
		t.Fatalf("a trial's estimate is $%.2f; want about 10 h × $1.10", est)
	}
	budget := 3.5 * est
	write(fmt.Sprintf("budget_usd: %.2f\n", budget))
	out, errOut, code = cli(t, lathe, base, "sweep", "submit", spec, "-o", "json")
	if code != 0 {
		t.Fatalf("sweep submit exited %d\n%s\n%s", code, out, errOut)
	}
	var st wire.SweepStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Sweep == nil {
		t.Fatalf("sweep submit -o json: %v\n%s", err, out)
	}
	admitted, gated := 0, 0
	for _, r := range st.Leaderboard {
		switch {
		case r.Gate == "":
			admitted++
		case strings.Contains(r.Gate, "sweep budget"):
			gated++
		default:
			t.Errorf("trial %s waits for %q, want the sweep budget", r.ID, r.Gate)
		}
	}
	if admitted != 3 || gated != 3 {
		t.Fatalf("at submit %d trials admitted and %d wait for the sweep budget; want 3 and 3:\n%s", admitted, gated, out)
	}
	if st.Sweep.ReservedUSD > budget+1e-6 || st.Sweep.Stalled == "" {
		t.Errorf("at submit: reserved $%.2f of $%.2f, stalled %q", st.Sweep.ReservedUSD, budget, st.Sweep.Stalled)
	}
	// A waiting trial read alone (lathe status) names the same gate.
	for _, r := range st.Leaderboard {
		if r.Gate == "" {
			continue
		}
		if j := getJob(t, base, r.ID); j.State == jobtype.StateQueued && j.Trial.Gate != "" && !strings.Contains(j.Trial.Gate, "sweep budget") {
			t.Errorf("trial %s read alone waits for %q; its sweep's status says %q", r.ID, j.Trial.Gate, r.Gate)
		}
	}
	id := st.Sweep.ID
	over := ""
	waitfor.Value(t, 5*time.Minute, "sweep "+id+" done", func() string {
		s := getSweep(t, base, id)
		if s.Sweep.ReservedUSD+s.Sweep.SpentUSD > budget+1e-6 && over == "" {
			over = fmt.Sprintf("reserved $%.2f + spent $%.2f > budget $%.2f", s.Sweep.ReservedUSD, s.Sweep.SpentUSD, budget)
		}
		return fmt.Sprintf("%s %v", s.Sweep.State, s.Sweep.Counts)
	}, func(s string) bool { return !strings.HasPrefix(s, "running") })
	if over != "" {
		t.Errorf("the sweep's budget was overshot: %s", over)
	}
	st = getSweep(t, base, id)
	if st.Sweep.State != jobtype.SweepDone || st.Sweep.Counts[jobtype.StateSucceeded] != 6 {
		t.Fatalf("sweep ended %s with %v; want done with 6 succeeded (actual costs are seconds of a GPU)", st.Sweep.State, st.Sweep.Counts)
	}
	if st.Sweep.ReservedUSD > 1e-6 || st.Sweep.SpentUSD <= 0 || st.Sweep.SpentUSD > budget {
		t.Errorf("at the end: reserved $%.4f (want 0), spent $%.4f (want > 0 and ≤ $%.2f)", st.Sweep.ReservedUSD, st.Sweep.SpentUSD, budget)
	}
}

// standinDaemon starts `lathed up` with the ASHA stand-in trainer
// (scripts/standin/asha_standin.py, not a trainer: its loss is a known
// function of the learning rate and the step) registered as "asha", and
// writes its base job (job.yaml in dir); it returns the API's base URL and
// the lathe binary.
func standinDaemon(t *testing.T, dir string, slots int, stepSeconds string) (base, lathe string) {
	t.Helper()
	lathed, lathe := binaries(t)
	root := repoRoot(t)
	cfg := fmt.Sprintf("trainers:\n  reference: [\"/usr/bin/python3\", \"{scripts}/train_lora.py\"]\n  asha: [\"/usr/bin/python3\", %q, \"--step-seconds\", %q]\n",
		filepath.Join(root, "scripts/standin/asha_standin.py"), stepSeconds)
	cfgPath := filepath.Join(dir, "lathe.yaml")
	_ = os.WriteFile(cfgPath, []byte(cfg), 0o644)
	job := fmt.Sprintf("name: standin\nbase_model: standin\ntrainer: asha\ndataset: file://%s/configs/examples/data/tiny-train.jsonl\n"+
		"training: {max_steps: 60, learning_rate: 0.01, eval_every: 1, checkpoint_every: 1}\nresources: {gpus: 0}\nmax_runtime: 10m\n", root)
	_ = os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(job), 0o644)
	port := redistest.FreePort(t)
	base = "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"),
		"--config", cfgPath, "--slots", strconv.Itoa(slots))
	waitHTTP(t, base, d)
	return base, lathe
}

// submitSweepFile submits a sweep file with the CLI and waits until the
// sweep is no longer running; it returns its final status.
func submitSweepFile(t *testing.T, lathe, base, spec string, within time.Duration) wire.SweepStatus {
	t.Helper()
	out, errOut, code := cli(t, lathe, base, "sweep", "submit", spec, "-o", "json")
	if code != 0 {
		t.Fatalf("sweep submit exited %d\n%s\n%s", code, out, errOut)
	}
	var st wire.SweepStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Sweep == nil {
		t.Fatalf("sweep submit -o json: %v\n%s", err, out)
	}
	id := st.Sweep.ID
	waitfor.Value(t, within, "sweep "+id+" no longer running", func() string {
		s := getSweep(t, base, id)
		return fmt.Sprintf("%s %v", s.Sweep.State, s.Sweep.Counts)
	}, func(s string) bool { return !strings.HasPrefix(s, "running") })
	return getSweep(t, base, id)
}

// TestSweepASHAEndToEnd: 27 trials of the ASHA stand-in (objective
// (log10 lr + 2.5)² + 1 + 5/√step, so the best of all 27 run to the end
// is the learning rate 10^-2.5), η = 3, rungs 10/30/90 steps: ASHA finds
// that trial, in at most 40% of the steps of running all 27 to the end;
// promoted trials resume from their checkpoint (the first step of their
// next attempt is past the rung); the others end stopped, not promoted.
func TestSweepASHAEndToEnd(t *testing.T) {
	dir := t.TempDir()
	base, lathe := standinDaemon(t, dir, 4, "0.01")
	var lrs []string
	for k := 0; k < 27; k++ {
		lrs = append(lrs, strconv.FormatFloat(math.Pow(10, -4+3*float64(k)/26), 'g', 17, 64))
	}
	spec := filepath.Join(dir, "sweep.yaml")
	_ = os.WriteFile(spec, []byte(`name: asha-e2e
job: job.yaml
parameters:
  training.learning_rate: {grid: [`+strings.Join(lrs, ", ")+`]}
search: {kind: asha, trials: 27, seed: 3, min_steps: 10, max_steps: 90, reduction_factor: 3}
objective: {metric: eval_loss, goal: minimize}
max_parallel: 4
`), 0o644)
	st := submitSweepFile(t, lathe, base, spec, 5*time.Minute)
	if st.Sweep.State != jobtype.SweepDone {
		t.Fatalf("sweep ended %s: %v", st.Sweep.State, st.Sweep.Counts)
	}
	best := st.Leaderboard[0]
	lr, _ := best.Params[0].Value.(float64)
	if math.Abs(math.Log10(lr)+2.5) > 1e-9 || best.State != jobtype.StateSucceeded || best.Rung != 2 {
		t.Fatalf("best trial %s: lr %v, %s, rung %d; want lr 10^-2.5 (the best of all 27 run to the end), succeeded at rung 2", best.ID, lr, best.State, best.Rung)
	}
	steps, promoted := 0, 0
	for _, r := range st.Leaderboard {
		j := getJob(t, base, r.ID)
		steps += j.Progress.Step
		switch {
		case j.State == jobtype.StateSucceeded && j.Progress.Step == 90:
		case j.State == jobtype.StateStopped && j.Reason == jobtype.ReasonNotPromoted:
		default:
			t.Errorf("trial %s ended %s (%s) at step %d; want succeeded at 90 or stopped, not promoted", j.ID, j.State, j.Reason, j.Progress.Step)
		}
		if j.Trial.Rung > 0 {
			promoted++
			checkResumed(t, base, j)
		}
	}
	if full := 27 * 90; float64(steps) > 0.4*float64(full) {
		t.Errorf("ASHA ran %d steps, over 40%% of the %d of running all 27 to the end", steps, full)
	}
	if promoted < 9 {
		t.Errorf("%d trials promoted past the first rung; want at least 27/3", promoted)
	}
	t.Logf("ASHA: %d steps of %d (%.1f%%), %d promotions past rung 0, best %s lr=%g", steps, 27*90, 100*float64(steps)/float64(27*90), promoted, best.ID, lr)
}

// checkResumed checks that each attempt after the first of promoted trial
// j started past the step its last attempt paused at (its checkpoint).
func checkResumed(t *testing.T, base string, j jobtype.Job) {
	t.Helper()
	first := map[int]int{} // attempt → its first progress step
	for _, ev := range events(t, base, j.ID) {
		if ev.Type != jobtype.EventProgress {
			continue
		}
		if _, ok := first[ev.Attempt]; ok {
			continue
		}
		var p jobtype.Progress
		_ = json.Unmarshal(ev.Data, &p)
		first[ev.Attempt] = p.Step
	}
	rungs := []int{10, 30, 90}
	for a := 2; a <= j.Attempt; a++ {
		if s, ok := first[a]; ok && s <= rungs[0] {
			t.Errorf("trial %s attempt %d began at step %d: not resumed past its rung", j.ID, a, s)
		}
	}
	if _, ok := first[2]; !ok {
		t.Errorf("trial %s at rung %d has no progress in its attempt 2", j.ID, j.Trial.Rung)
	}
}

// TestSweepMedianStopping: a grid of 4 trials of the stand-in, two of them
// made to diverge (training.seed 666: eval_loss 10 + step), with median
// stopping: the diverging trials end stopped by the median rule, the two
// others succeed.
func TestSweepMedianStopping(t *testing.T) {
	dir := t.TempDir()
	base, lathe := standinDaemon(t, dir, 4, "0.1")
	spec := filepath.Join(dir, "sweep.yaml")
	_ = os.WriteFile(spec, []byte(`name: median-e2e
job: job.yaml
parameters:
  training.learning_rate: {grid: [0.003, 0.004]}
  training.seed: {grid: [42, 666]}
search: {kind: grid, median: {grace_steps: 5, min_trials: 2}}
objective: {metric: eval_loss, goal: minimize}
max_parallel: 4
`), 0o644)
	st := submitSweepFile(t, lathe, base, spec, 3*time.Minute)
	for _, r := range st.Leaderboard {
		j := getJob(t, base, r.ID)
		seed := j.Spec.Training.Seed
		switch {
		case seed == 666 && (j.State != jobtype.StateStopped || j.Reason != jobtype.ReasonMedianStopping):
			t.Errorf("diverging trial %s ended %s (%s: %s); want stopped by the median rule", j.ID, j.State, j.Reason, j.Error)
		case seed == 666 && j.Progress.Step >= 60:
			t.Errorf("diverging trial %s ran to step %d: not stopped early", j.ID, j.Progress.Step)
		case seed != 666 && j.State != jobtype.StateSucceeded:
			t.Errorf("trial %s (seed %d) ended %s (%s: %s); want succeeded", j.ID, seed, j.State, j.Reason, j.Error)
		}
	}
}

// TestScheduledSweepLeaderKilledMidExpansion: a sweep schedule of 50
// trials; the leading scheduler claims the tick and expands the sweep
// (every trial's spec built, validated and routed), and is killed with -9
// before storing it (it is held there by a named test hook,
// LATHE_TEST_HOLD_SCHEDULED_SWEEP). The second scheduler takes the lead,
// finds the tick claimed and its sweep missing, and admits the same sweep
// (the same derived id): it ends with exactly 50 trials, none doubled.
func TestScheduledSweepLeaderKilledMidExpansion(t *testing.T) {
	r := newSchedE2E(t, "  - {name: nightly, cron: \"@every 1h\", sweep: sweep.yaml, concurrency: allow}\n")
	_ = os.WriteFile(filepath.Join(r.dir, "sweep.yaml"), []byte(`name: nightly-e2e
job: job.yaml
parameters:
  training.learning_rate: {log_uniform: [0.0001, 0.1]}
  lora.rank: {choice: [4, 8, 16]}
search: {kind: random, trials: 50, seed: 7}
max_parallel: 50
`), 0o644)
	portA := strconv.Itoa(redistest.FreePort(t))
	a := startDaemonEnv(t, []string{"LATHE_TEST_HOLD_SCHEDULED_SWEEP=10m"}, r.lathed, "scheduler", "--config", r.cfg,
		"--redis-url", r.rs.URL(), "--listen", "127.0.0.1:"+portA, "--data-dir", r.data)
	waitHTTP(t, "http://127.0.0.1:"+portA, a)
	waitfor.True(t, time.Minute, "the leader holding the expanded sweep", func() bool {
		return strings.Contains(a.output(), "test hook: holding a planned scheduled sweep")
	})
	_, base := r.scheduler(t)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	var sweeps wire.SweepList
	waitfor.Value(t, time.Minute, "the second scheduler admitting the sweep", func() int {
		resp, err := http.Get(base + "/api/v1/sweeps")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&sweeps)
		return len(sweeps.Sweeps)
	}, func(n int) bool { return n >= 1 })
	if len(sweeps.Sweeps) != 1 || sweeps.Sweeps[0].Trials != 50 || sweeps.Sweeps[0].Schedule != "nightly" {
		t.Fatalf("sweeps after the takeover: %+v", sweeps.Sweeps)
	}
	sw := sweeps.Sweeps[0]
	if want := jobstore.TickID("s-", "nightly", *sw.Tick); sw.ID != want {
		t.Errorf("the sweep's id %s is not its tick's derived id %s", sw.ID, want)
	}
	ctx := context.Background()
	ids, err := r.rs.Client().ZRange(ctx, "lathe:jobs", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	trials := 0
	for _, id := range ids {
		if strings.HasPrefix(id, "j-"+sw.ID[2:]+"-") {
			trials++
		}
	}
	if trials != 50 || len(ids) != 50 {
		t.Fatalf("the store holds %d jobs, %d of them trials of %s; want exactly 50 trials", len(ids), trials, sw.ID)
	}
}
