package main

import (
	"encoding/json"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/routing"
)

// routeConfig is scheduler/routing's issueConfig (testdata/issue.yaml): a local
// pool in dc-frankfurt [onprem eu], aws-eu in aws-eu-central-1 [cloud eu]
// with a $5000 monthly budget, aws-us in aws-us-east-1 [cloud us], Redis
// beside the local pool.
var routeConfig = func() string {
	b, err := os.ReadFile("../../scheduler/routing/testdata/issue.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// routeSpec is a 1-GPU, 2-hour job with file:// data in dc-frankfurt and
// max_wait 1h; extra lines (residency, dataset, output) override.
func routeSpec(extra string) string {
	lines := map[string]string{
		"dataset":  "dataset: file:///data/support/train.jsonl",
		"output":   "output: {uri: file:///models/support-bot}",
		"max_wait": "max_wait: 1h",
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(extra), "\n") {
		if l == "" {
			continue
		}
		k, _, _ := strings.Cut(l, ":")
		delete(lines, k)
		keep = append(keep, l)
	}
	s := "name: support-bot\nbase_model: tiny-char\nresources: {gpus: 1}\nexpected_runtime: 2h\nmax_runtime: 8h\n"
	for _, k := range []string{"dataset", "output", "max_wait"} {
		if l, ok := lines[k]; ok {
			s += l + "\n"
		}
	}
	return s + strings.Join(keep, "\n") + "\n"
}

// routeSetup writes routeConfig and returns a function that runs
// `lathe route --explain SPEC --config CFG args... -o json` offline.
func routeSetup(t *testing.T) func(spec string, args ...string) (result, explanation) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "lathe.yaml", routeConfig)
	return func(spec string, args ...string) (result, explanation) {
		t.Helper()
		specPath := writeFile(t, dir, "job.yaml", spec)
		// No scheduler: a request would fail as unreachable (exit 3).
		r := lathe(t, closedURL(t), append([]string{"route", "--explain", specPath, "--config", cfgPath, "-o", "json"}, args...)...)
		var ex explanation
		if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil {
			t.Fatalf("stdout is not an explanation: %v\nstdout:\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
		}
		return r, ex
	}
}

// wantResidency checks the effective residency tags.
func wantResidency(tags ...string) func(t *testing.T, ex explanation) {
	return func(t *testing.T, ex explanation) {
		if !slices.Equal(ex.Residency, tags) {
			t.Errorf("residency %q, want %q", ex.Residency, tags)
		}
	}
}

func candidateOf(t *testing.T, ex explanation, backend string) wire.Candidate {
	t.Helper()
	for _, c := range ex.Candidates {
		if c.Backend == backend {
			return c
		}
	}
	t.Fatalf("no candidate %s in %+v", backend, ex.Candidates)
	return wire.Candidate{}
}

func hasReasonText(ex explanation, sub string) bool {
	for _, r := range ex.Reasons {
		if strings.Contains(r, sub) {
			return true
		}
	}
	return false
}

// TestRouteExplainOfflineScenarios runs the scenarios through
// `lathe route --explain --config` (no scheduler) and checks the -o json
// fields: backend, refused, waiting, reasons and every candidate's
// feasibility, reason, wait and cost.
func TestRouteExplainOfflineScenarios(t *testing.T) {
	type cand struct {
		backend, reason string // reason: "" feasible, else the Reason* prefix
	}
	for _, tc := range []struct {
		name    string
		spec    string
		args    []string
		code    int
		backend string // "" refused
		waiting bool
		cands   []cand
		reasons []string
		check   func(t *testing.T, ex explanation)
	}{{
		name: "an onprem job stays local with an assumed 10h wait",
		spec: routeSpec("residency: [onprem]"), args: []string{"--assume-wait", "local=10h"},
		backend: "local", waiting: true,
		cands:   []cand{{"local", ""}, {"aws-eu", routing.ReasonComputeSite}, {"aws-us", routing.ReasonComputeSite}},
		reasons: []string{"waiting: local wait 10h0m0s on local exceeds max_wait 1h0m0s", "aws-eu: " + routing.ReasonComputeSite},
		check: func(t *testing.T, ex explanation) {
			if w := candidateOf(t, ex, "local").EstWaitS; w != 36000 {
				t.Errorf("local est_wait_s %v, want 36000", w)
			}
		},
	}, {
		name: "an eu job bursts to aws-eu when the local wait (3h) exceeds max_wait (1h)",
		spec: routeSpec("residency: [eu]"), args: []string{"--assume-wait", "local=3h"},
		backend: "aws-eu",
		cands:   []cand{{"local", ""}, {"aws-eu", ""}, {"aws-us", routing.ReasonComputeSite}},
		reasons: []string{"burst: local wait 3h0m0s on local exceeds max_wait 1h0m0s"},
		check: func(t *testing.T, ex explanation) {
			c := candidateOf(t, ex, "aws-eu")
			if c.InstanceType != "g6e.xlarge" || math.Abs(c.EstCostUSD-3.72) > 1e-9 || ex.EstCostUSD != c.EstCostUSD {
				t.Errorf("aws-eu %+v, decision cost %v; want g6e.xlarge at $3.72", c, ex.EstCostUSD)
			}
			if c := candidateOf(t, ex, "local"); c.EstWaitS != 10800 || math.Abs(c.EstCostUSD-2.2) > 1e-9 {
				t.Errorf("local %+v; want wait 10800 s, $2.20", c)
			}
			if len(ex.Staging) != 3 || ex.Staging[0].What != "dataset" || ex.Staging[0].ToSite != "aws-eu-central-1" {
				t.Errorf("staging %+v; want dataset, output and raw logs", ex.Staging)
			}
		},
	}, {
		name:    "a us job with us data and output goes to aws-us",
		spec:    routeSpec("residency: [us]\ndataset: s3://lathe-us-data/support/train.jsonl\noutput: {uri: s3://lathe-us-data/out}"),
		backend: "aws-us",
		cands:   []cand{{"local", routing.ReasonComputeSite}, {"aws-eu", routing.ReasonComputeSite}, {"aws-us", ""}},
		reasons: []string{"cloud: no local backend is feasible; the cheapest feasible cloud backend is aws-us"},
		check: func(t *testing.T, ex explanation) {
			if len(ex.Staging) != 0 {
				t.Errorf("staging %+v; want none", ex.Staging)
			}
		},
	}, {
		name:    "an untagged job is treated as [onprem]",
		spec:    routeSpec(""),
		backend: "local",
		cands:   []cand{{"local", ""}, {"aws-eu", routing.ReasonComputeSite}, {"aws-us", routing.ReasonComputeSite}},
		reasons: []string{"residency [onprem]"},
		check:   wantResidency("onprem"),
	}, {
		name: "a residency: [] job is treated as [onprem]", spec: routeSpec("residency: []"),
		args:    []string{"--assume-wait", "local=5h"},
		backend: "local", waiting: true,
		cands:   []cand{{"local", ""}, {"aws-eu", routing.ReasonComputeSite}, {"aws-us", routing.ReasonComputeSite}},
		reasons: []string{"residency [onprem]", "waiting: local wait 5h0m0s"},
		check:   wantResidency("onprem"),
	}, {
		name: "an eu job waits for local when aws-eu's budget is spent",
		spec: routeSpec("residency: [eu]"), args: []string{"--assume-wait", "local=3h", "--assume-spent", "aws-eu=5000"},
		backend: "local", waiting: true,
		cands: []cand{{"local", ""}, {"aws-eu", routing.ReasonBackendBudget}, {"aws-us", routing.ReasonComputeSite}},
		reasons: []string{"no cloud backend can take the job",
			"aws-eu: " + routing.ReasonBackendBudget + ": estimated $3.72 > $0.00 left of $5000.00 this month (spent $5000.00"},
	}, {
		name: "an eu job whose dataset bucket is in aws-us-east-1 is refused",
		spec: routeSpec("residency: [eu]\ndataset: s3://lathe-us-data/support/train.jsonl"),
		code: exitFailed,
		cands: []cand{{"local", routing.ReasonDatasetSite}, {"aws-eu", routing.ReasonDatasetSite},
			{"aws-us", routing.ReasonComputeSite}},
		reasons: []string{"refused: no backend is feasible",
			"local, aws-eu: " + routing.ReasonDatasetSite + ": dataset s3://lathe-us-data/support/train.jsonl is in site aws-us-east-1 [cloud us], which lacks eu"},
	}, {
		name: "a us job whose output is file:// on the [onprem eu] site is refused",
		spec: routeSpec("residency: [us]\ndataset: s3://lathe-us-data/support/train.jsonl\noutput: {uri: file:///models/support-bot}"),
		code: exitFailed,
		cands: []cand{{"local", routing.ReasonComputeSite}, {"aws-eu", routing.ReasonComputeSite},
			{"aws-us", routing.ReasonOutputSite}},
		reasons: []string{"aws-us: " + routing.ReasonOutputSite + ": output file:///models/support-bot/<id> is in site dc-frankfurt [onprem eu], which lacks us"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r, ex := routeSetup(t)(tc.spec, tc.args...)
			defer func() {
				if t.Failed() {
					t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				}
			}()
			if r.code != tc.code {
				t.Errorf("exit %d, want %d", r.code, tc.code)
			}
			if ex.Backend != tc.backend || ex.Refused != (tc.backend == "") || ex.Waiting != tc.waiting {
				t.Errorf("backend %q refused %v waiting %v; want %q refused %v waiting %v",
					ex.Backend, ex.Refused, ex.Waiting, tc.backend, tc.backend == "", tc.waiting)
			}
			if !ex.Offline || len(ex.Notes) == 0 || ex.Notes[0] != offlineNote || ex.ConfigHash == "" {
				t.Errorf("offline %v, notes %q, config_hash %q; want offline, %q first, a hash", ex.Offline, ex.Notes, ex.ConfigHash, offlineNote)
			}
			if len(ex.Candidates) != 3 {
				t.Errorf("%d candidates, want 3", len(ex.Candidates))
			}
			for _, c := range tc.cands {
				got := candidateOf(t, ex, c.backend)
				switch {
				case c.reason == "" && (!got.Feasible || got.Reason != ""):
					t.Errorf("%s infeasible (%s); want feasible", c.backend, got.Reason)
				case c.reason != "" && (got.Feasible || !strings.HasPrefix(got.Reason, c.reason+": ")):
					t.Errorf("%s: feasible %v, reason %q; want infeasible, %q", c.backend, got.Feasible, got.Reason, c.reason)
				}
			}
			for _, want := range tc.reasons {
				if !hasReasonText(ex, want) {
					t.Errorf("no reason contains %q: %q", want, ex.Reasons)
				}
			}
			if tc.check != nil {
				tc.check(t, ex)
			}
		})
	}
}

// TestRouteExplainOfflineJSONKeys checks the -o json names a script reads.
func TestRouteExplainOfflineJSONKeys(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "lathe.yaml", routeConfig)
	spec := writeFile(t, dir, "job.yaml", routeSpec("residency: [eu]\ndataset: s3://lathe-us-data/x.jsonl"))
	r := lathe(t, closedURL(t), "route", "--explain", spec, "--config", cfg, "-o", "json")
	if r.code != exitFailed {
		t.Fatalf("exit %d, want %d (refused); stderr:\n%s", r.code, exitFailed, r.stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["backend"] != "" || raw["refused"] != true || raw["waiting"] != false {
		t.Errorf("backend %v refused %v waiting %v; want \"\" true false", raw["backend"], raw["refused"], raw["waiting"])
	}
	if _, ok := raw["reasons"].([]any); !ok {
		t.Errorf("reasons %v", raw["reasons"])
	}
	cands, _ := raw["candidates"].([]any)
	if len(cands) != 3 {
		t.Fatalf("candidates %v", raw["candidates"])
	}
	for _, c := range cands {
		m := c.(map[string]any)
		for _, k := range []string{"backend", "site", "feasible", "reason", "est_wait_s", "est_cost_usd"} {
			if _, ok := m[k]; !ok {
				t.Errorf("candidate %v lacks %q", m, k)
			}
		}
	}
	if !strings.Contains(r.stderr, "refused") {
		t.Errorf("stderr does not say refused:\n%s", r.stderr)
	}
}

// TestRouteExplainOfflineTable checks the table: the choice line, the
// offline note, the reasons, the candidates and the staging.
func TestRouteExplainOfflineTable(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "lathe.yaml", routeConfig)
	spec := writeFile(t, dir, "job.yaml", routeSpec("residency: [eu]"))
	r := lathe(t, closedURL(t), "route", "--explain", spec, "--config", cfg, "--assume-wait", "local=3h")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(r.stdout, "\n")
	if lines[0] != "→ aws-eu (site aws-eu-central-1)" {
		t.Errorf("first line %q", lines[0])
	}
	for _, want := range []string{
		offlineNote,
		"Reasons:\n  residency [eu]\n",
		"burst: local wait 3h0m0s",
		"Staging:\n  dataset file:///data/support/train.jsonl: dc-frankfurt → aws-eu-central-1",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	rows := map[string][]string{}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) >= 6 {
			rows[f[0]] = f
		}
	}
	if h := rows["BACKEND"]; strings.Join(h, " ") != "BACKEND SITE FEASIBLE EST.WAIT EST.COST REASON" {
		t.Errorf("header %q", h)
	}
	if l := rows["local"]; strings.Join(l[:6], " ") != "local dc-frankfurt yes 3h $2.20 -" {
		t.Errorf("local row %q", l)
	}
	if l := rows["aws-eu"]; strings.Join(l[:6], " ") != "aws-eu aws-eu-central-1 yes 0s $3.72 -" {
		t.Errorf("aws-eu row %q", l)
	}
	if l := rows["aws-us"]; strings.Join(l[:5], " ") != "aws-us aws-us-east-1 no - -" || !strings.Contains(strings.Join(l, " "), routing.ReasonComputeSite) {
		t.Errorf("aws-us row %q", l)
	}

	// Waiting and refused choice lines.
	r = lathe(t, closedURL(t), "route", "--explain", spec, "--config", cfg, "--assume-wait", "local=3h", "--assume-spent", "aws-eu=5000")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "waits for local (site dc-frankfurt): estimated wait 3h exceeds max_wait 1h") {
		t.Errorf("exit %d; stdout:\n%s", r.code, r.stdout)
	}
	spec = writeFile(t, dir, "job.yaml", routeSpec("residency: [eu]\ndataset: s3://lathe-us-data/x.jsonl"))
	r = lathe(t, closedURL(t), "route", "--explain", spec, "--config", cfg)
	if r.code != exitFailed || !strings.HasPrefix(r.stdout, "refused") {
		t.Errorf("exit %d; stdout:\n%s", r.code, r.stdout)
	}
}

// TestRouteExplainBadFlags: a bad what-if, a what-if on a backend the
// config lacks (or a wait on a cloud one), a missing --explain and a bad
// config are usage errors (exit 2) naming what is wrong, and send nothing.
func TestRouteExplainBadFlags(t *testing.T) {
	f := newFakeScheduler(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "lathe.yaml", routeConfig)
	bad := writeFile(t, dir, "bad.yaml", "sites: {s1: [Bad Tag]}\n")
	spec := writeFile(t, dir, "job.yaml", routeSpec("residency: [eu]"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"route", "--explain", spec, "--assume-wait", "local"}, `--assume-wait "local"`},
		{[]string{"route", "--explain", spec, "--assume-wait", "local=soon"}, `--assume-wait "local=soon"`},
		{[]string{"route", "--explain", spec, "--assume-wait", "=3h"}, `--assume-wait "=3h"`},
		{[]string{"route", "--explain", spec, "--assume-spent", "aws-eu=-5"}, `--assume-spent "aws-eu=-5"`},
		{[]string{"route", "--explain", spec, "--assume-spent", "aws-eu=lots"}, `--assume-spent "aws-eu=lots"`},
		{[]string{"cost", spec, "--assume-spent", "aws-eu=NaN"}, `--assume-spent "aws-eu=NaN"`},
		{[]string{"route", "--explain", spec, "--assume-spent", "aws-eu=Inf"}, `--assume-spent "aws-eu=Inf"`},
		{[]string{"route", "--explain", spec, "--assume-wait", "local="}, `--assume-wait "local="`},
		{[]string{"route", "--explain", spec, "--config", cfg, "--assume-wait", "gpu-farm=3h"}, `no backend "gpu-farm"`},
		{[]string{"route", "--explain", spec, "--config", cfg, "--assume-wait", "aws-eu=3h"}, "only a local backend has a queue"},
		{[]string{"route", "--explain", spec, "--config", cfg, "--assume-spent", "gcp=1"}, `no backend "gcp"`},
		{[]string{"route", "--explain", spec, "--config", bad}, "problem(s) in the routing config"},
		{[]string{"route", "--explain", spec, "--config", filepath.Join(dir, "missing.yaml")}, "--config"},
		{[]string{"route", spec}, "lathe route --explain FILE"},
	} {
		r := lathe(t, f.srv.URL, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q; stderr:\n%s", tc.args, r.code, exitUsage, tc.want, r.stderr)
		}
	}
	if n := f.requestCount(); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestRouteExplainOnline runs route --explain against the fake scheduler:
// the spec and the what-ifs are sent (in the scheduler's syntax), the
// decision printed, and a refusal exits 1.
func TestRouteExplainOnline(t *testing.T) {
	f := newFakeScheduler(t)
	f.explain = apiclient.Explanation{ConfigHash: "cfg1", Decision: wire.Decision{
		Backend: "aws-eu", Site: "aws-eu-central-1", Residency: []string{"eu"},
		Reasons: []string{"residency [eu]", "burst: local wait 3h0m0s on local exceeds max_wait 1h0m0s"},
		Candidates: []wire.Candidate{
			{Backend: "local", Site: "dc-frankfurt", Kind: "local", Feasible: true, EstWaitS: 10800, EstCostUSD: 2.2, EstRuntimeS: 7200},
			{Backend: "aws-eu", Site: "aws-eu-central-1", Kind: "aws", Feasible: true, EstCostUSD: 3.72, EstRuntimeS: 7200, InstanceType: "g6e.xlarge"},
			{Backend: "aws-us", Site: "aws-us-east-1", Kind: "aws", Reason: routing.ReasonComputeSite + ": site aws-us-east-1 [cloud us] lacks eu"},
		},
		EstRuntime: 7200e9, EstGPUHours: 2, EstCostUSD: 3.72,
	}}
	spec := writeFile(t, t.TempDir(), "job.yaml", routeSpec("residency: [eu]"))
	r := lathe(t, f.srv.URL, "route", "--explain", spec, "--assume-wait", "local=3h", "--assume-spent", "aws-eu=1200.5")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "→ aws-eu (site aws-eu-central-1)\n") || strings.Contains(r.stdout, "offline") ||
		!strings.Contains(r.stdout, "Routing config cfg1") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	f.mu.Lock()
	req := f.requests[len(f.requests)-1]
	f.mu.Unlock()
	u, _ := url.Parse(strings.TrimPrefix(req, "POST "))
	if u.Path != "/api/v1/route" || u.Query().Get("assume_wait") != "local=3h0m0s" || u.Query().Get("assume_spent") != "aws-eu=1200.5" {
		t.Errorf("request %s", req)
	}

	r = lathe(t, f.srv.URL, "route", "--explain", spec, "-o", "json")
	var ex explanation
	if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil || r.code != exitOK {
		t.Fatalf("exit %d, %v; stdout:\n%s", r.code, err, r.stdout)
	}
	if ex.Backend != "aws-eu" || ex.ConfigHash != "cfg1" || ex.Offline || len(ex.Candidates) != 3 {
		t.Errorf("explanation %+v", ex)
	}

	// cost FILE: feasible candidates first, cheapest first, then the rest with their reason.
	r = lathe(t, f.srv.URL, "cost", spec)
	if r.code != exitOK {
		t.Fatalf("cost: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "→ aws-eu (site aws-eu-central-1): est. runtime 2h, 2.00 GPU-hours, $3.72\n") {
		t.Errorf("cost stdout:\n%s", r.stdout)
	}
	var order []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "local") || strings.HasPrefix(l, "aws-") {
			order = append(order, l)
		}
	}
	if len(order) != 3 || !strings.HasPrefix(order[0], "local") || !strings.Contains(order[0], "2h") ||
		!strings.Contains(order[0], "2.00") || !strings.Contains(order[0], "$2.20") ||
		!strings.HasPrefix(order[1], "aws-eu") || !strings.Contains(order[1], "g6e.xlarge") || !strings.Contains(order[1], "chosen") ||
		!strings.HasPrefix(order[2], "aws-us") || !strings.Contains(order[2], "infeasible: "+routing.ReasonComputeSite) {
		t.Errorf("cost rows %q", order)
	}

	f.mu.Lock()
	f.explain = apiclient.Explanation{Decision: wire.Decision{Refused: true, Reasons: []string{"refused: no backend is feasible"}}}
	f.mu.Unlock()
	for _, args := range [][]string{{"route", "--explain", spec}, {"cost", spec}} {
		if r = lathe(t, f.srv.URL, args...); r.code != exitFailed || !strings.HasPrefix(r.stdout, "refused") {
			t.Errorf("%v refused: exit %d; stdout:\n%s", args, r.code, r.stdout)
		}
	}
}

// TestSubmitRefused: against the real scheduler, a 422 refusal of POST
// /api/v1/jobs (or of the batch endpoint) prints every reason on stderr and
// exits 2: the job cannot run as written, and nothing is stored.
func TestSubmitRefused(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	d.heartbeat(t, jobstore.Node{Name: "gpu-1", Incarnation: "i1", Backend: "local", Slots: 2, GPUs: h100s(8)})
	dir := t.TempDir()
	refused := writeFile(t, dir, "job.yaml", routeSpec("residency: [eu]\ndataset: s3://lathe-us-data/support/train.jsonl"))
	fine := writeFile(t, dir, "job2.yaml", routeSpec("residency: [eu]"))
	site := routing.ReasonDatasetSite + ": dataset s3://lathe-us-data/support/train.jsonl is in site aws-us-east-1 [cloud us], which lacks eu"
	for _, tc := range []struct {
		args    []string
		reasons []string
	}{{
		args:    []string{"submit", refused},
		reasons: []string{"refused: residency [eu]", "refused: refused: no backend is feasible", "refused: local, aws-eu: " + site},
	}, {
		args:    []string{"submit", fine, refused},
		reasons: []string{"refused: jobs[1]: refused: no backend is feasible", "refused: jobs[1]: local, aws-eu: " + site},
	}} {
		r := lathe(t, d.url, tc.args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", tc.args, r.code, exitUsage, r.stderr)
		}
		for _, want := range append(tc.reasons, "nothing was stored") {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", tc.args, want, r.stderr)
			}
		}
		if r.stdout != "" {
			t.Errorf("%v: stdout %q", tc.args, r.stdout)
		}
	}
	if ids, err := d.store.IDsInState(d.ctx, jobtype.StateQueued, 10); err != nil || len(ids) != 0 {
		t.Errorf("a refusal stored jobs %v (%v)", ids, err)
	}
}

// TestCostGang: offline, `lathe cost` of a job of 2 nodes × 4 GPUs assumes
// two local nodes that fit it and counts 8 GPUs' hours there; a cloud
// backend takes it on one instance of 8 GPUs, and none takes 2 nodes × 8
// when its largest type has 8 (one instance per attempt).
func TestCostGang(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "lathe.yaml", routeConfig)
	spec := writeFile(t, dir, "job.yaml", strings.Replace(routeSpec("residency: [eu]"), "resources: {gpus: 1}", "resources: {gpus: 4, nodes: 2}", 1))
	r := lathe(t, closedURL(t), "cost", spec, "--config", cfg)
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "→ local (site dc-frankfurt): est. runtime 2h, 16.00 GPU-hours") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	rows := func(out string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				m[f[0]] = l
			}
		}
		return m
	}
	row := rows(r.stdout)
	if !strings.Contains(row["local"], "16.00") || !strings.Contains(row["local"], "chosen") ||
		!strings.Contains(row["aws-eu"], "p5.48xlarge") || strings.Contains(row["aws-eu"], "infeasible") {
		t.Errorf("rows:\n%s\n%s; want local chosen at 16.00 GPU-hours, aws-eu feasible on p5.48xlarge", row["local"], row["aws-eu"])
	}
	spec = writeFile(t, dir, "job.yaml", strings.Replace(routeSpec("residency: [eu]"), "resources: {gpus: 1}", "resources: {gpus: 8, nodes: 2}", 1))
	r = lathe(t, closedURL(t), "cost", spec, "--config", cfg)
	if row = rows(r.stdout); !strings.Contains(row["aws-eu"], "16 GPUs on one instance") || !strings.Contains(row["local"], "chosen") {
		t.Errorf("2 nodes × 8 (exit %d):\n%s", r.code, r.stdout)
	}
}
