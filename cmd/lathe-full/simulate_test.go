package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseOwned(t *testing.T) {
	for in, want := range map[string][]int{
		"64":          {64},
		"0":           {0},
		"32..256/32":  {32, 64, 96, 128, 160, 192, 224, 256},
		"8..10":       {8, 9, 10},
		"10..30/15":   {10, 25},
		" 16..16/4 ":  {16},
		"-1":          nil,
		"x":           nil,
		"32..16":      nil,
		"1..100/0":    nil,
		"0..1000/1":   nil, // more than 64 sizes
		"1..2/x":      nil,
		"99999999999": nil,
	} {
		got, err := parseOwned(in)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), "--owned") {
				t.Errorf("parseOwned(%q) = %v, %v; want an error naming --owned", in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseOwned(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// simFiles writes a small trace and a deployment: an owned pool in
// dc [onprem eu] and one cloud backend in eu at $4 per GPU-hour.
func simFiles(t *testing.T) (trace, config string) {
	dir := t.TempDir()
	trace = writeFile(t, dir, "trace.csv", "submit_s,duration_s,gpus,user\n0,3600,8,x\n60,3600,8,x\n120,600,1,x\n7200,60,2,x\n")
	config = writeFile(t, dir, "lathe.yaml", `sites:
  dc: [onprem, eu]
  aws-eu: [cloud, eu]
redis_site: dc
routing:
  default_residency: [eu]
backends:
  owned:
    kind: local
    site: dc
    price: {usd_per_gpu_hour: 1}
  cloud:
    kind: aws
    site: aws-eu
    region: eu-central-1
    checkpoint_uri: s3://ckpt/
    instance_types:
      one: {gpus: 1, gpu_model: H100, gpu_memory_gb: 80, on_demand_usd_per_hour: 4}
      eight: {gpus: 8, gpu_model: H100, gpu_memory_gb: 80, on_demand_usd_per_hour: 32}
datasets:
  file_site: dc
  buckets: {ckpt: aws-eu}
`)
	return trace, config
}

func TestSimulateCLI(t *testing.T) {
	tr, cfg := simFiles(t)
	// 8 owned GPUs: the second 8-GPU job would wait an hour, within the
	// 2h max_wait; with --max-wait 30m it bursts.
	r := lathe(t, "", "simulate", "--trace", tr, "--config", cfg, "--owned", "8", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rep struct {
		Jobs int
		Runs []struct {
			Owned     int     `json:"owned_gpus"`
			Total     float64 `json:"total_cost_usd"`
			Cloud     float64 `json:"cloud_cost_usd"`
			CloudJobs int     `json:"cloud_jobs"`
			Wait      struct {
				MeanS float64 `json:"mean_s"`
			}
			Violations []string `json:"residency_violations"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	run := rep.Runs[0]
	if rep.Jobs != 4 || run.Owned != 8 || run.CloudJobs != 0 || run.Cloud != 0 || run.Wait.MeanS <= 0 || len(run.Violations) != 0 {
		t.Fatalf("8 owned, max_wait 2h: %+v; want every job on owned GPUs, one waiting", rep)
	}
	r = lathe(t, "", "simulate", "--trace", tr, "--config", cfg, "--owned", "8", "--max-wait", "30m", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("%v %d\n%s%s", err, r.code, r.stdout, r.stderr)
	}
	// The second job would wait 59m, the third (1 GPU) 58m: both burst, for
	// an hour of the 8-GPU type and 10 minutes of the 1-GPU type.
	if run := rep.Runs[0]; run.CloudJobs != 2 || math.Abs(run.Cloud-(32+4.0/6)) > 1e-9 {
		t.Fatalf("max_wait 30m: %+v; want two jobs burst for $32.67", run)
	}
	// A range: all-cloud, optimum, break-even and a plot.
	plot := filepath.Join(t.TempDir(), "p.svg")
	r = lathe(t, "", "simulate", "--trace", tr, "--config", cfg, "--owned", "0..16/8", "--reference", "--plot", plot)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"all-cloud", "reference", "Cost-optimal pool (learned)", "Plot: " + plot} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	b, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	var svg struct{ XMLName xml.Name }
	if err := xml.Unmarshal(b, &svg); err != nil || svg.XMLName.Local != "svg" {
		t.Fatalf("plot: %v %v", svg.XMLName, err)
	}
}

func TestSimulateCLIUsage(t *testing.T) {
	tr, cfg := simFiles(t)
	bad := writeFile(t, t.TempDir(), "bad.csv", "submit_s,duration_s,gpus\n0,x,1\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--config", cfg}, "--trace"},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--owned", "lots"}, `--owned "lots"`},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--estimates", "learned,magic"}, `--estimates "magic"`},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--residency-mix", "eu=2,m a r s=1"}, "--residency-mix"},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--priority-mix", "asap=1"}, `priority "asap"`},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--plot", "x.svg"}, "--plot needs a range"},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--price-ratio", "-2"}, "--price-ratio"},
		{[]string{"simulate", "--trace", bad, "--config", cfg}, `duration_s "x"`},
		{[]string{"simulate", "--trace", filepath.Join(t.TempDir(), "none.csv"), "--config", cfg}, "--trace"},
		{[]string{"simulate", "--trace", tr, "--config", tr}, "--config"},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--max-wait", "-1h"}, "--max-wait"},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--arrivals", "0"}, "--arrivals 0"},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--arrivals", "NaN"}, "--arrivals NaN"},
		{[]string{"simulate", "--trace", tr, "--config", cfg, "--gangs"}, "--gangs needs --node-gpus"},
	} {
		r := lathe(t, "", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

// TestSimulateHonestReports: the bugs a skeptical user found in the
// report, each shown. Renting everything is a candidate for the optimum
// whatever the range; refused jobs are said to be left out, and the
// optimum says it is over the rest; a job that waits out max_wait starts
// at max_wait, not a millisecond later; a config with no cloud backend or
// no prices is said so before the run.
func TestSimulateHonestReports(t *testing.T) {
	tr, cfg := simFiles(t)
	type report struct {
		Optimum  map[string]int `json:"cost_optimal_owned_gpus"`
		Warnings []string
		Runs     []struct {
			Owned   int `json:"owned_gpus"`
			Refused int
			Wait    struct {
				P99S float64 `json:"p99_s"`
			}
		}
	}
	run := func(args ...string) (report, result) {
		t.Helper()
		r := lathe(t, "", append([]string{"simulate", "--trace", tr}, args...)...)
		var rep report
		if r.code != 0 {
			t.Fatalf("lathe simulate %v: exit %d: %s", args, r.code, r.stderr)
		}
		if slices.Contains(args, "json") {
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("%v\n%s", err, r.stdout)
			}
		}
		return rep, r
	}

	// Cloud GPU-hours at half the owned price, a range not from 0: renting
	// everything is the optimum ("--owned 2..24/2" printed a pool).
	rep, _ := run("--config", cfg, "--owned", "8..16/8", "--price-ratio", "0.5", "-o", "json")
	if rep.Optimum["learned"] != 0 {
		t.Errorf("cloud at half the owned price, --owned 8..16/8: optimum %v; want 0 (rent everything)", rep.Optimum)
	}
	plot := filepath.Join(t.TempDir(), "rent.svg")
	_, r := run("--config", cfg, "--owned", "8..16/8", "--price-ratio", "0.5", "--plot", plot)
	if !strings.Contains(r.stdout, "Cost-optimal pool (learned): 0 GPUs, rent everything") {
		t.Errorf("table:\n%s\nwant the optimum to be renting everything", r.stdout)
	}
	if b, err := os.ReadFile(plot); err != nil || !strings.Contains(string(b), "optimum 0 GPUs") {
		t.Errorf("plot with renting everything the optimum: %v; want it drawn and ringed", err)
	}

	// Half the jobs may run only in "us", where the config has no site.
	rep, _ = run("--config", cfg, "--owned", "8..16/8", "--residency-mix", "eu=0.5,us=0.5", "-o", "json")
	refused := 0
	for _, s := range rep.Runs {
		refused = max(refused, s.Refused)
	}
	if refused == 0 || !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "jobs refused") }) {
		t.Errorf("residency mix with an unknown tag: refused %d, warnings %v; want refused jobs and a warning", refused, rep.Warnings)
	}
	_, r = run("--config", cfg, "--owned", "8..16/8", "--residency-mix", "eu=0.5,us=0.5")
	if !strings.Contains(r.stdout, "WARNING:") || !strings.Contains(r.stdout, "refused left out") {
		t.Errorf("table with refused jobs:\n%s\nwant a WARNING line and the optimum over the jobs not refused", r.stdout)
	}

	// A short first job teaches the policy that jobs are short, so the
	// third waits locally behind a long second one until max_wait (30m)
	// re-decides it. Every time in this trace is a whole second: so must
	// every wait be (it was max_wait + 1 ms).
	waits := writeFile(t, t.TempDir(), "waits.csv", "submit_s,duration_s,gpus,user\n0,60,8,x\n100,36000,8,x\n200,3600,8,x\n")
	r = lathe(t, "", "simulate", "--trace", waits, "--config", cfg, "--owned", "8", "--max-wait", "30m", "-o", "json")
	rep = report{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("%v %d\n%s%s", err, r.code, r.stdout, r.stderr)
	}
	if p99 := rep.Runs[0].Wait.P99S; p99 < 1800 || p99 != math.Trunc(p99) {
		t.Errorf("a job that waited out max_wait 30m: p99 wait %v s; want at least 1800 and a whole second", p99)
	}

	// No cloud backend, and no price: said on stderr before the run, and
	// in the report.
	bare := writeFile(t, t.TempDir(), "bare.yaml", "sites:\n  dc: [onprem, eu]\nredis_site: dc\nrouting:\n  default_residency: [eu]\nbackends:\n  owned: {kind: local, site: dc}\n")
	rep, r = run("--config", bare, "--owned", "8", "-o", "json")
	for _, want := range []string{"no cloud backend", "every cost is $0"} {
		if !strings.Contains(r.stderr, "WARNING: ") || !strings.Contains(r.stderr, want) ||
			!slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
			t.Errorf("a config with no cloud and no price: stderr %q, warnings %v; want %q in both", r.stderr, rep.Warnings, want)
		}
	}
}

// TestSimulateBootstrap: --bootstrap N resamples the trace by week and
// gives where the optimum fell in 90% of them, in the table, in -o json
// and on the plot; a count out of range is a usage error naming the flag.
func TestSimulateBootstrap(t *testing.T) {
	_, cfg := simFiles(t)
	// Three weeks of jobs, so that resamples differ.
	var b strings.Builder
	b.WriteString("submit_s,duration_s,gpus,user\n")
	for i := range 60 {
		fmt.Fprintf(&b, "%d,%d,%d,x\n", i*30000, 3600+(i%7)*1800, 1<<(i%4))
	}
	tr := writeFile(t, t.TempDir(), "weeks.csv", b.String())
	r := lathe(t, "", "simulate", "--trace", tr, "--config", cfg, "--owned", "0..16/8", "--bootstrap", "8", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rep struct {
		Optimum   map[string]int    `json:"cost_optimal_owned_gpus"`
		Interval  map[string][2]int `json:"cost_optimal_owned_gpus_90pct"`
		Resamples int               `json:"bootstrap_resamples"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	iv, ok := rep.Interval["learned"]
	if !ok || rep.Resamples != 8 || iv[0] > iv[1] || iv[1] > 16 {
		t.Fatalf("bootstrap in json: %+v; want an interval within the range for learned, 8 resamples", rep)
	}
	plot := filepath.Join(t.TempDir(), "b.svg")
	r = lathe(t, "", "simulate", "--trace", tr, "--config", cfg, "--owned", "0..16/8", "--bootstrap", "8", "--plot", plot)
	want := fmt.Sprintf("the optimum %d–%d GPUs in 90%% of 8 resamples of the trace by week", iv[0], iv[1])
	if r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("table (exit %d):\n%s\nwant %q", r.code, r.stdout, want)
	}
	if svg, err := os.ReadFile(plot); err != nil || !strings.Contains(string(svg), "resamples") {
		t.Errorf("plot: %v; want the range drawn with its legend", err)
	}
	r = lathe(t, "", "simulate", "--trace", tr, "--config", cfg, "--owned", "0..16/8", "--bootstrap", "-1")
	if r.code == 0 || !strings.Contains(r.stderr, "--bootstrap") {
		t.Errorf("--bootstrap -1: exit %d, %q; want a usage error naming it", r.code, r.stderr)
	}
}

// TestSimulateProgress: past simProgressAfter (here 0), a sweep writes a
// line to stderr per run ended, and nothing of it to stdout.
func TestSimulateProgress(t *testing.T) {
	defer func(d time.Duration) { simProgressAfter = d }(simProgressAfter)
	simProgressAfter = 0
	tr, cfg := simFiles(t)
	r := lathe(t, "", "simulate", "--trace", tr, "--config", cfg, "--owned", "0..16/8", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// Three pool sizes and the all-cloud run, or the sizes alone.
	n := strings.Count(r.stderr, "runs done")
	if n < 3 || !strings.Contains(r.stderr, fmt.Sprintf("%d of %d runs done", n, n)) || strings.Contains(r.stdout, "runs done") {
		t.Fatalf("stderr %q: want a progress line per run, the last %d of %d", r.stderr, n, n)
	}
}
