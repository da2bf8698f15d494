package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

func watchSweep(t *testing.T, base, sweepID string) *concurrencyWatch {
	w := &concurrencyWatch{done: make(chan struct{})}
	needle := []byte("LATHE_JOB_ID=j-" + sweepID[2:] + "-")
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
				if b, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(b, needle) {
					n++
				}
			}
			active := 0
			if resp, err := http.Get(base + "/api/v1/jobs?limit=1000&sweep=" + sweepID); err == nil {
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

// TestSweepGridEndToEnd: a 3×2 grid of the tiny job with max_parallel 2 on
// a pool that could run 6 at once (`lathed up --slots 6`): at most and at
// some point exactly 2 trials hold a slot (sampled from the store and from
// /proc), all 6 succeed, the leaderboard is ranked by eval_loss, and
// `lathe sweep pull --best` brings that trial's adapter.
func TestSweepGridEndToEnd(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	dir := t.TempDir()
	job := sweepJob(t, dir, 30, 0, "")
	spec := filepath.Join(dir, "sweep.yaml")
	_ = os.WriteFile(spec, []byte(`name: grid-e2e
job: job.yaml
parameters:
  training.learning_rate: {grid: [0.002, 0.02, 0.05]}
  lora.rank: {grid: [4, 8]}
search: grid
objective: {metric: eval_loss, goal: minimize}
max_parallel: 2
`), 0o644)
	_ = job
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"), "--slots", "6")
	waitHTTP(t, base, d)

	out, errOut, code := cli(t, lathe, base, "sweep", "submit", spec, "-o", "json")
	if code != 0 {
		t.Fatalf("sweep submit exited %d\n%s\n%s", code, out, errOut)
	}
	var st wire.SweepStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Sweep == nil {
		t.Fatalf("sweep submit -o json: %v\n%s", err, out)
	}
	id := st.Sweep.ID
	watch := watchSweep(t, base, id)
	final := waitfor.Value(t, 5*time.Minute, "sweep "+id+" done", func() string {
		s := getSweep(t, base, id)
		return fmt.Sprintf("%s %v", s.Sweep.State, s.Sweep.Counts)
	}, func(s string) bool { return !strings.HasPrefix(s, "running") })
	storePeak, procPeak := watch.stop()
	st = getSweep(t, base, id)
	if st.Sweep.State != jobtype.SweepDone || st.Sweep.Counts[jobtype.StateSucceeded] != 6 {
		t.Fatalf("sweep ended %s with %v, want done with 6 succeeded", final, st.Sweep.Counts)
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
	_ = os.WriteFile(cfgPath, []byte("backends:\n  local:\n    kind: local\n    price: {usd_per_gpu_hour: 1.10}\n"), 0o644)
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
