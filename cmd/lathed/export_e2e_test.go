package main

import (
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/trace"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

// Tokens of TestExportJobsE2E's daemon: alice and bob submit for teams a
// and b; root is an admin (every team's jobs).
const (
	exportAlice = "alice-secret-0123456789"
	exportBob   = "bob-secret-0123456789xx"
	exportRoot  = "admin-secret-0123456789"
)

// TestExportJobsE2E: `lathed up` (its own redis-server, simulated H100s
// priced at $1.10 per GPU-hour, API tokens for two teams and an admin)
// runs three tiny jobs with the reference trainer, two of team a (one on a
// GPU, one CPU-only) and one of team b; then the real `lathe export jobs
// --since 1d` writes them as a trace: trace.Read reads it back, and each
// row matches the job as the API shows it (gpus, run time from started to
// finished, submit time from the first job, backend, GPU model, cost, id).
// Each team's token exports its own team's jobs only; the admin's all.
// (`lathe simulate --trace` on the export can extend this test.)
func TestExportJobsE2E(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "lathe.yaml")
	if err := os.WriteFile(cfgPath, []byte(`sites:
  dc: [onprem]
redis_site: dc
backends:
  local:
    kind: local
    site: dc
    price: {usd_per_gpu_hour: 1.10}
auth:
  tokens:
    - {name: alice, token_env: LATHE_TEST_TOKEN_ALICE, role: submitter, team: a}
    - {name: bob, token_env: LATHE_TEST_TOKEN_BOB, role: submitter, team: b}
    - {name: root, token_env: LATHE_TEST_TOKEN_ROOT, role: admin, team: ops}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemonEnv(t, []string{"LATHE_TEST_TOKEN_ALICE=" + exportAlice, "LATHE_TEST_TOKEN_BOB=" + exportBob, "LATHE_TEST_TOKEN_ROOT=" + exportRoot},
		lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"),
		"--config", cfgPath, "--gpus", "simulated:dgxh100", "--slots", "4")
	waitHTTP(t, base, d)

	submit := func(token string, gpus int) string {
		t.Helper()
		sub := filepath.Join(dir, "job-"+strconv.Itoa(gpus)+"-"+token[:3])
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := cliAs(t, lathe, base, token, "submit", sweepJob(t, sub, 10, gpus, ""), "-o", "json")
		if code != 0 {
			t.Fatalf("submit exited %d\n%s\n%s", code, out, errOut)
		}
		return decodeJob(t, out).ID
	}
	aGPU, aCPU, bGPU := submit(exportAlice, 1), submit(exportAlice, 0), submit(exportBob, 1)
	byID := map[string]jobtype.Job{}
	for _, id := range []string{aGPU, aCPU, bGPU} {
		byID[id] = jobtype.Job(waitfor.Value(t, 3*time.Minute, "job "+id+" ended",
			func() polledJob { return polledJob(getJobAs(t, base, exportRoot, id)) },
			// The cost of a GPU job is settled just after it ends.
			func(j polledJob) bool { return j.State.Terminal() && (j.Spec.Resources.GPUs == 0 || j.CostUSD > 0) }))
		if j := byID[id]; j.State != jobtype.StateSucceeded || j.StartedAt == nil || j.FinishedAt == nil {
			t.Fatalf("job %s: state %s (%s), started %v, finished %v", id, j.State, j.Error, j.StartedAt, j.FinishedAt)
		}
	}
	models := map[string]string{}
	for _, g := range getGPUsAs(t, base, exportRoot) {
		models[g.Node+"/"+strconv.Itoa(g.Index)] = g.Name
	}

	check := func(who, token string, want []string, args ...string) []trace.Job {
		t.Helper()
		out, errOut, code := cliAs(t, lathe, base, token, append([]string{"export", "jobs", "--since", "1d"}, args...)...)
		if code != 0 {
			t.Fatalf("%s: export exited %d\n%s", who, code, errOut)
		}
		if i := slices.Index(args, "-o"); i >= 0 {
			if out != "" {
				t.Errorf("%s: export -o FILE wrote to stdout: %q", who, out)
			}
			b, err := os.ReadFile(args[i+1])
			if err != nil {
				t.Fatal(err)
			}
			out = string(b)
		}
		rows, err := trace.Read(strings.NewReader(out))
		if err != nil {
			t.Fatalf("%s: trace.Read: %v\n%s", who, err, out)
		}
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, want) { // the ids are in submit order
			t.Fatalf("%s: exported %v, want %v\n%s", who, ids, want, out)
		}
		if !strings.Contains(errOut, "exported "+strconv.Itoa(len(want))+" jobs from ") || !strings.Contains(errOut, "skipped 0 that never ran") {
			t.Errorf("%s: stderr %q: want the summary", who, errOut)
		}
		first := byID[want[0]].CreatedAt
		for _, r := range rows {
			j := byID[r.ID]
			run := j.FinishedAt.Sub(*j.StartedAt).Seconds()
			if r.DurationS <= 0 || math.Abs(r.DurationS-run) > 0.002 {
				t.Errorf("%s: %s duration_s %v, started→finished %v", who, r.ID, r.DurationS, run)
			}
			if sub := j.CreatedAt.Sub(first).Seconds(); math.Abs(r.SubmitS-sub) > 0.002 {
				t.Errorf("%s: %s submit_s %v, want %v", who, r.ID, r.SubmitS, sub)
			}
			if r.GPUs != j.Spec.Resources.GPUs || r.Backend != "local" || r.Backend != j.Backend || r.Priority != "normal" ||
				!slices.Equal(r.Residency, []string{"onprem"}) || math.Abs(r.CostUSD-j.CostUSD) > 0.00005 {
				t.Errorf("%s: row %+v does not match the job: gpus %d backend %q cost %v residency %v",
					who, r, j.Spec.Resources.GPUs, j.Backend, j.CostUSD, j.Spec.Residency)
			}
			wantModel := ""
			if r.GPUs > 0 {
				wantModel = models[j.Node+"/"+strconv.Itoa(j.GPUs[0])]
				if wantModel == "" || r.CostUSD <= 0 {
					t.Errorf("%s: %s on %s GPUs %v: no GPU model in the inventory %v, or no cost (%v)", who, r.ID, j.Node, j.GPUs, models, r.CostUSD)
				}
			}
			if r.GPUModel != wantModel {
				t.Errorf("%s: %s gpu_model %q, want %q", who, r.ID, r.GPUModel, wantModel)
			}
		}
		return rows
	}
	all := []string{aGPU, aCPU, bGPU}
	slices.SortFunc(all, func(x, y string) int { return byID[x].CreatedAt.Compare(byID[y].CreatedAt) })
	rows := check("admin", exportRoot, all)
	if rows[0].SubmitS != 0 {
		t.Errorf("first row's submit_s %v, want 0", rows[0].SubmitS)
	}
	check("alice", exportAlice, slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == bGPU }))
	check("bob", exportBob, []string{bGPU}, "-o", filepath.Join(dir, "bob.csv"))

	// The export replays: lathe simulate --trace on it, with the daemon's
	// own config as the simulated deployment (8 owned H100s).
	csv := filepath.Join(dir, "all.csv")
	check("admin", exportRoot, all, "-o", csv)
	out, errOut, code := cliAs(t, lathe, base, "", "simulate", "--trace", csv, "--config", cfgPath, "--owned", "8", "-o", "json")
	if code != 0 {
		t.Fatalf("simulate exited %d\n%s\n%s", code, out, errOut)
	}
	var rep struct {
		Jobs  int `json:"jobs"`
		Draws struct {
			FromTrace map[string]int `json:"from_trace"`
		} `json:"draws"`
		Runs []struct {
			Owned                int `json:"owned_gpus"`
			Jobs, Refused, Stuck int
			Violations           []string `json:"residency_violations"`
			Wait                 struct{ Jobs int }
			OwnedCostUSD         float64 `json:"owned_cost_usd"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("simulate -o json: %v\n%s", err, out)
	}
	if rep.Jobs != 3 || len(rep.Runs) != 1 || rep.Draws.FromTrace["residency"] != 3 || rep.Draws.FromTrace["priority"] != 3 {
		t.Fatalf("simulate read %d jobs, %d runs, from the trace %v; want 3 jobs with their residency and priority\n%s", rep.Jobs, len(rep.Runs), rep.Draws.FromTrace, out)
	}
	r := rep.Runs[0]
	if r.Owned != 8 || r.Jobs != 3 || r.Wait.Jobs != 3 || r.Refused+r.Stuck != 0 || len(r.Violations) != 0 || !(r.OwnedCostUSD > 0) {
		t.Errorf("simulate of the export: %+v; want 3 jobs run on 8 owned GPUs, none refused, no violation, an owned cost", r)
	}
}

// cliAs runs lathe with LATHE_TOKEN=token (and no other token from this
// process's environment) and returns stdout, stderr and the exit code.
func cliAs(t testing.TB, bin, server, token string, args ...string) (string, string, int) {
	t.Helper()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LATHE_TOKEN=") })
	return runLathe(t, bin, append(env, "LATHE_SERVER="+server, "LATHE_TOKEN="+token), args...)
}

// getAs GETs base+path with a bearer token (none: "") and decodes the JSON
// answer; another status than 200 fails the test.
func getAs(t *testing.T, base, token, path string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: decode: %v", path, err)
	}
}

func getJobAs(t *testing.T, base, token, id string) jobtype.Job {
	t.Helper()
	var j jobtype.Job
	getAs(t, base, token, "/api/v1/jobs/"+id, &j)
	return j
}

func getGPUsAs(t *testing.T, base, token string) []jobtype.GPU {
	t.Helper()
	var l wire.GPUList
	getAs(t, base, token, "/api/v1/gpus", &l)
	return l.GPUs
}
