package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/seedtest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// The tests below scrape GET /metrics of a scheduler over a real
// redis-server, with nodes heartbeating and jobs moved through the store
// the way a worker would (as gpus_test.go does), and compare the numbers
// with the API's answers. promtool is the real one (Debian prometheus,
// installed by scripts/setup.sh --test).

// metricSample is one line of the text exposition format.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

var metricLineRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var metricLabelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// parseScrape reads the samples and the families (# TYPE lines) of a
// scrape; it fails the test on a line it cannot read.
func parseScrape(t *testing.T, text string) (samples []metricSample, types map[string]string) {
	t.Helper()
	types = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := metricLineRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unreadable metrics line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("metrics line %q: value: %v", line, err)
		}
		s := metricSample{name: m[1], labels: map[string]string{}, value: v}
		for _, lm := range metricLabelRE.FindAllStringSubmatch(m[2], -1) {
			s.labels[lm[1]] = lm[2]
		}
		samples = append(samples, s)
	}
	return samples, types
}

// scrape GETs /metrics (with token when not "") and parses it.
func scrapeMetrics(t *testing.T, b bundle, token string) (string, []metricSample, map[string]string) {
	t.Helper()
	var hdr map[string]string
	if token != "" {
		hdr = map[string]string{"Authorization": "Bearer " + token}
	}
	code, body := do(t, "GET", b.url+"/metrics", "", hdr)
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	ss, types := parseScrape(t, string(body))
	return string(body), ss, types
}

// value is the one metricSample named name whose labels include want; the test
// fails when there is none or more than one.
func metricValue(t *testing.T, ss []metricSample, name string, want map[string]string) float64 {
	t.Helper()
	var found []float64
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		found = append(found, s.value)
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d samples, want 1", name, want, len(found))
	}
	return found[0]
}

// sum adds the samples named name whose labels include want.
func metricSum(ss []metricSample, name string, want map[string]string) float64 {
	total := 0.0
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}

// populate gives b two heartbeating nodes with GPUs (one unhealthy), and
// jobs queued, running on GPUs, succeeded and failed, and budget spend
// and a reservation. It returns the running job's id.
func populateForMetrics(t *testing.T, b bundle) string {
	t.Helper()
	hb := func(n jobstore.Node) {
		if err := b.store.Heartbeat(b.ctx, n, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
			t.Fatal(err)
		}
	}
	hb(jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 3, GPUs: []jobtype.GPU{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559, MemoryUsedMB: 4000, UtilizationPct: 97, TemperatureC: 61, PowerW: 412.5},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559, MemoryUsedMB: 12, UtilizationPct: 0},
		{Index: 2, UUID: "GPU-c", Name: "NVIDIA H100 80GB HBM3", Healthy: false, Unhealthy: "XID 79: GPU fell off the bus", ECCUncorrected: 3},
	}})
	hb(jobstore.Node{Name: "n2", Incarnation: "i2", Backend: "local", Slots: 1, Simulated: true,
		GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-sim-0", Name: "NVIDIA A100-SXM4-80GB", Healthy: true, MemoryTotalMB: 81920, Simulated: true}}})
	ids := []string{submit(t, b), submit(t, b), submit(t, b), submit(t, b)}
	for i, id := range ids[1:] {
		gpus := []int{i}
		if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 3, GPUs: gpus}); err != nil {
			t.Fatal(err)
		}
		if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "i1", Lease: time.Minute}); out != jobstore.Claimed {
			t.Fatalf("claim %s: %v %v", id, out, err)
		}
	}
	for id, st := range map[string]jobtype.State{ids[2]: jobtype.StateSucceeded, ids[3]: jobtype.StateFailed} {
		if err := b.store.Finish(b.ctx, id, 1, jobstore.Ending{State: st}); err != nil {
			t.Fatal(err)
		}
	}
	// The running job's attempt notes a cloud instance, as the AWS worker
	// does (the backend here is only a name: nothing reads EC2).
	if err := b.store.RecordInstance(b.ctx, ids[1], 1, &jobtype.Instance{ID: "i-0abc", Attempt: 1, Backend: "aws-test",
		Type: "p5.48xlarge", Market: "spot", LaunchTime: time.Now(), USDPerHour: 31.46}); err != nil {
		t.Fatal(err)
	}
	month := jobstore.Month(time.Now())
	if err := b.store.Reserve(b.ctx, ids[2], month, 2.5, []jobstore.BudgetScope{{Scope: "backend:local"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Settle(b.ctx, ids[2], 1.25); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Reserve(b.ctx, ids[1], month, 4, []jobstore.BudgetScope{{Scope: "backend:local"}}); err != nil {
		t.Fatal(err)
	}
	return ids[1]
}

// TestMetricsPromtool: a populated scheduler's /metrics passes promtool
// check metrics (Prometheus' own lint: names, units, help, types).
func TestMetricsPromtool(t *testing.T) {
	const promtool = "/usr/bin/promtool"
	if _, err := os.Stat(promtool); err != nil {
		t.Fatalf("%s is missing (Debian prometheus; scripts/setup.sh --test installs it): %v", promtool, err)
	}
	b := setup(t, scheduler.Config{})
	populateForMetrics(t, b)
	text, _, _ := scrapeMetrics(t, b, "")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\n--- the scrape:\n%s", err, out, text)
	}
}

// TestMetricsEqualAPI: the job, queue, GPU and budget numbers of /metrics
// are the ones GET /api/v1/queues, /gpus and /budgets answer.
func TestMetricsEqualAPI(t *testing.T) {
	b := setup(t, scheduler.Config{})
	running := populateForMetrics(t, b)
	_, ss, _ := scrapeMetrics(t, b, "")

	var q wire.QueueStats
	getJSON(t, b, "/api/v1/queues", &q)
	if got := metricValue(t, ss, "lathe_queue_pending_jobs", nil); got != float64(q.Pending) || q.Pending != 1 {
		t.Errorf("lathe_queue_pending_jobs %v, API pending %d (want 1)", got, q.Pending)
	}
	for _, st := range jobtype.States {
		if got := metricValue(t, ss, "lathe_jobs", map[string]string{"state": string(st)}); got != float64(q.ByState[st]) {
			t.Errorf("lathe_jobs{state=%q} %v, API by_state %d", st, got, q.ByState[st])
		}
	}
	for _, st := range []jobtype.State{jobtype.StateQueued, jobtype.StateRunning} {
		if got := metricSum(ss, "lathe_jobs_live", map[string]string{"state": string(st)}); got != float64(q.ByState[st]) || got == 0 {
			t.Errorf("sum lathe_jobs_live{state=%q} %v, API by_state %d (want > 0)", st, got, q.ByState[st])
		}
	}
	if got := metricValue(t, ss, "lathe_jobs_live", map[string]string{"state": "running", "backend": "local", "priority": "normal"}); got != 1 {
		t.Errorf("lathe_jobs_live{running,local,normal} %v, want 1", got)
	}
	if len(q.Queues) != 2 {
		t.Fatalf("API queues: %+v, want n1 and n2", q.Queues)
	}
	for _, qi := range q.Queues {
		checks := map[string]float64{"pending": float64(qi.Pending), "active": float64(qi.Active), "archived": float64(qi.Archived), "completed": float64(qi.Completed)}
		for st, want := range checks {
			if got := metricValue(t, ss, "lathe_asynq_queue_size", map[string]string{"queue": qi.Name, "state": st}); got != want {
				t.Errorf("lathe_asynq_queue_size{%s,%s} %v, API %v", qi.Name, st, got, want)
			}
		}
		if got := metricValue(t, ss, "lathe_node_slots", map[string]string{"node": qi.Node}); got != float64(qi.Slots) {
			t.Errorf("lathe_node_slots{%s} %v, API %d", qi.Node, got, qi.Slots)
		}
		if got := metricValue(t, ss, "lathe_node_slots_reserved", map[string]string{"node": qi.Node}); got != float64(qi.Reserved) {
			t.Errorf("lathe_node_slots_reserved{%s} %v, API %d", qi.Node, got, qi.Reserved)
		}
	}
	if age := metricValue(t, ss, "lathe_queue_oldest_wait_seconds", map[string]string{"priority": "normal"}); age < 0 || age > 60 {
		t.Errorf("lathe_queue_oldest_wait_seconds %v, want the age of a job submitted in this test", age)
	}
	checkGPUs(t, b, ss, running)
	var job jobtype.Job
	getJSON(t, b, "/api/v1/jobs/"+running, &job)
	if job.Instance == nil {
		t.Fatalf("API job %s: no instance", running)
	}
	lv := map[string]string{"backend": job.Instance.Backend, "market": job.Instance.Market}
	if got := metricValue(t, ss, "lathe_cloud_instances", lv); got != 1 {
		t.Errorf("lathe_cloud_instances%v %v, want 1", lv, got)
	}
	if got := metricValue(t, ss, "lathe_cloud_price_dollars_per_hour", map[string]string{"backend": job.Instance.Backend}); got != job.Instance.USDPerHour {
		t.Errorf("lathe_cloud_price_dollars_per_hour %v, API instance usd_per_hour %v", got, job.Instance.USDPerHour)
	}
	checkBudgets(t, b, ss)
	if got := metricSum(ss, "lathe_routing_decisions_total", map[string]string{"path": "submit"}); got != 4 {
		t.Errorf("lathe_routing_decisions_total{path=submit} sums to %v, want the 4 submits", got)
	}
	if got := metricValue(t, ss, "lathe_store_up", nil); got != 1 {
		t.Errorf("lathe_store_up %v, want 1", got)
	}
	if got := metricValue(t, ss, "lathe_scheduler_leader", nil); got != 0 {
		t.Errorf("lathe_scheduler_leader %v for a scheduler never started, want 0", got)
	}
}

// checkGPUs compares the GPU series with GET /api/v1/gpus.
func checkGPUs(t *testing.T, b bundle, ss []metricSample, running string) {
	t.Helper()
	var g wire.GPUList
	getJSON(t, b, "/api/v1/gpus", &g)
	if len(g.GPUs) != 4 {
		t.Fatalf("API gpus: %d, want 4", len(g.GPUs))
	}
	const mib = 1 << 20
	for _, gpu := range g.GPUs {
		lv := map[string]string{"node": gpu.Node, "gpu": strconv.Itoa(gpu.Index), "model": gpu.Name}
		want := map[string]float64{
			"lathe_gpu_utilization_ratio":            float64(gpu.UtilizationPct) / 100,
			"lathe_gpu_memory_used_bytes":            float64(gpu.MemoryUsedMB) * mib,
			"lathe_gpu_memory_total_bytes":           float64(gpu.MemoryTotalMB) * mib,
			"lathe_gpu_temperature_celsius":          float64(gpu.TemperatureC),
			"lathe_gpu_power_watts":                  gpu.PowerW,
			"lathe_gpu_ecc_uncorrected_errors_total": float64(gpu.ECCUncorrected),
			"lathe_gpu_healthy":                      boolValue(gpu.Healthy),
			"lathe_gpu_allocated":                    boolValue(gpu.JobID != ""),
			"lathe_gpu_simulated":                    boolValue(gpu.Simulated),
		}
		for name, w := range want {
			if got := metricValue(t, ss, name, lv); math.Abs(got-w) > 1e-9 {
				t.Errorf("%s%v = %v, API says %v", name, lv, got, w)
			}
		}
	}
	if metricSum(ss, "lathe_gpu_allocated", nil) != 1 || metricSum(ss, "lathe_gpu_healthy", nil) != 3 {
		t.Errorf("allocated %v (want 1: %s's GPU 0), healthy %v (want 3)", metricSum(ss, "lathe_gpu_allocated", nil), running, metricSum(ss, "lathe_gpu_healthy", nil))
	}
}

// checkBudgets compares the budget series with GET /api/v1/budgets.
func checkBudgets(t *testing.T, b bundle, ss []metricSample) {
	t.Helper()
	var bu wire.Budgets
	getJSON(t, b, "/api/v1/budgets", &bu)
	if len(bu.Scopes) == 0 {
		t.Fatal("API budgets: no scopes")
	}
	for _, row := range bu.Scopes {
		lv := map[string]string{"scope": row.Scope}
		for name, w := range map[string]float64{"lathe_budget_limit_dollars": row.LimitUSD,
			"lathe_budget_spent_dollars": row.SpentUSD, "lathe_budget_reserved_dollars": row.ReservedUSD} {
			if got := metricValue(t, ss, name, lv); got != w {
				t.Errorf("%s{scope=%q} %v, API %v", name, row.Scope, got, w)
			}
		}
	}
	if metricValue(t, ss, "lathe_budget_spent_dollars", map[string]string{"scope": "backend:local"}) != 1.25 ||
		metricValue(t, ss, "lathe_budget_reserved_dollars", map[string]string{"scope": "backend:local"}) != 4 {
		t.Error("backend:local: want 1.25 spent and 4 reserved")
	}
}

func boolValue(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// TestMetricsAuth: with tokens set, /metrics answers 401 without a token
// and a viewer's token reads it.
func TestMetricsAuth(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: []plane.Token{
		{Name: "ops", Secret: "viewer-secret-0123456789", Role: plane.RoleViewer, Team: "ops"},
		{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"},
	}})
	if code, body := do(t, "GET", b.url+"/metrics", "", nil); code != 401 || strings.Contains(string(body), "lathe_jobs") {
		t.Fatalf("GET /metrics without a token: %d %s, want 401", code, body)
	}
	if code, _ := do(t, "GET", b.url+"/metrics", "", map[string]string{"Authorization": "Bearer not-a-token-0123456789"}); code != 401 {
		t.Fatalf("GET /metrics with an unknown token: %d, want 401", code)
	}
	_, ss, _ := scrapeMetrics(t, b, "viewer-secret-0123456789")
	if got := metricValue(t, ss, "lathe_jobs", map[string]string{"state": "queued"}); got != 0 {
		t.Fatalf("lathe_jobs{queued} %v on an empty store", got)
	}
	if got := metricValue(t, ss, "lathe_budget_limit_dollars", map[string]string{"scope": "team:ops"}); got != 0 {
		t.Fatalf("team:ops (a token's team) limit %v, want 0 (none)", got)
	}
}

var dashMetricRE = regexp.MustCompile(`\b(?:lathe|asynq)_[a-zA-Z0-9_]*`)

// dashboardExprs returns every target expression of the panels of a
// Grafana dashboard, nested rows' panels included.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string            `json:"title"`
		Targets []json.RawMessage `json:"targets"`
		Panels  []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var exprs []string
	var walk func(ps []json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", path, err)
			}
			for _, tr := range p.Targets {
				var tg struct {
					Expr string `json:"expr"`
				}
				if err := json.Unmarshal(tr, &tg); err != nil || tg.Expr == "" {
					t.Fatalf("%s: panel %q: a target without an expr: %s", path, p.Title, tr)
				}
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return exprs
}

// TestGrafanaDashboardMetricsExported: every metric a panel of
// configs/grafana/lathe.json queries is one /metrics exports (a
// histogram's _bucket, _sum and _count series included).
func TestGrafanaDashboardMetricsExported(t *testing.T) {
	b := setup(t, scheduler.Config{})
	populateForMetrics(t, b)
	_, _, types := scrapeMetrics(t, b, "")
	exported := map[string]bool{}
	for name, typ := range types {
		exported[name] = true
		if typ == "histogram" || typ == "summary" {
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				exported[name+sfx] = true
			}
		}
	}
	exprs := dashboardExprs(t, "../configs/grafana/lathe.json")
	if len(exprs) < 10 {
		t.Fatalf("configs/grafana/lathe.json: %d expressions, want the board's (>= 10)", len(exprs))
	}
	queried := map[string]bool{}
	var missing []string
	for _, e := range exprs {
		for _, name := range dashMetricRE.FindAllString(e, -1) {
			queried[name] = true
			if !exported[name] {
				missing = append(missing, fmt.Sprintf("%s (in %q)", name, e))
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("the dashboard queries metrics /metrics does not export:\n%s", strings.Join(missing, "\n"))
	}
	for _, must := range []string{"lathe_queue_pending_jobs", "lathe_gpu_utilization_ratio", "lathe_budget_limit_dollars", "lathe_jobs"} {
		if !queried[must] {
			t.Errorf("the dashboard has no panel on %s", must)
		}
	}
	prov, err := os.ReadFile("../configs/grafana/provisioning/datasources/prometheus.yml")
	if err != nil || !strings.Contains(string(prov), "uid: lathe-prometheus") || !strings.Contains(string(prov), "http://prometheus:9090") {
		t.Errorf("the provisioned datasource must be uid lathe-prometheus at http://prometheus:9090 (the board names it): %v", err)
	}
}

// TestMetricsLeaderObserves: a started scheduler that leads says so, its
// placer observes its rounds, and a job it placed that ends (failed) is in
// the run time histogram (counted by the store's script that ended it).
func TestMetricsLeaderObserves(t *testing.T) {
	b := setup(t, scheduler.Config{})
	r := apitest.Start(t, b.rdb, b.store, scheduler.Config{Logger: quiet, PlaceInterval: 50 * time.Millisecond, Defaults: jobspec.Defaults{OutputURI: "file://" + t.TempDir()}}, api.Config{})
	s := r.S
	lb := b
	lb.url = r.URL
	waitfor.True(t, 20*time.Second, "leadership", s.IsLeader)
	id := submit(t, lb) // no node yet: it waits, and the rounds look at it
	count := func() float64 {
		_, ss, _ := scrapeMetrics(t, lb, "")
		return metricValue(t, ss, "lathe_placement_round_duration_seconds_count", nil)
	}
	waitfor.True(t, 20*time.Second, "placement rounds observed", func() bool { return count() >= 1 })
	_, ss, _ := scrapeMetrics(t, lb, "")
	if got := metricValue(t, ss, "lathe_scheduler_leader", nil); got != 1 {
		t.Fatalf("lathe_scheduler_leader %v on the leader, want 1", got)
	}

	// The job is placed on a node, runs and ends with a reservation open:
	// its ending is counted, with its run time.
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n9", Incarnation: "i9", Backend: "local", Slots: 1},
		jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	j := waitfor.Value(t, 20*time.Second, "the job placed on n9", storedJob(b.ctx, b.store, id),
		func(j *jobtype.Job) bool { return j != nil && j.State == jobtype.StateDispatched })
	if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: j.Attempt, Node: "n9", Incarnation: "i9", Lease: time.Minute}); out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	if err := b.store.Reserve(b.ctx, id, jobstore.Month(time.Now()), 1, []jobstore.BudgetScope{{Scope: "backend:local"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Finish(b.ctx, id, j.Attempt, jobstore.Ending{State: jobtype.StateFailed, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	lv := map[string]string{"backend": "local", "state": "failed"}
	waitfor.True(t, 20*time.Second, "the ended job's run time observed", func() bool {
		_, ss, _ := scrapeMetrics(t, lb, "")
		return metricValue(t, ss, "lathe_job_duration_seconds_count", lv) == 1
	})
}

// TestMetricsGaugesAtZero: an idle scheduler over an empty store exports
// its gauges at 0, not absent (Grafana shows 0, not "No data"): the live
// jobs of every live state, backend and priority, every priority's oldest
// wait and jobs past max_wait, and the run time histogram of every backend
// and ended state.
func TestMetricsGaugesAtZero(t *testing.T) {
	b := setup(t, scheduler.Config{})
	_, ss, _ := scrapeMetrics(t, b, "")
	backends := b.s.Routing().Config.Backends
	if len(backends) == 0 {
		t.Fatal("the implicit routing config has no backend")
	}
	for _, be := range backends {
		for _, st := range []string{"queued", "dispatched", "running"} {
			for _, p := range []string{"urgent", "normal", "batch"} {
				if v := metricValue(t, ss, "lathe_jobs_live", map[string]string{"state": st, "backend": be.Name, "priority": p}); v != 0 {
					t.Errorf("lathe_jobs_live{%s,%s,%s} = %v on an empty store", st, be.Name, p, v)
				}
			}
		}
		for _, st := range []string{"succeeded", "failed", "cancelled", "stopped"} {
			if v := metricValue(t, ss, "lathe_job_duration_seconds_count", map[string]string{"backend": be.Name, "state": st}); v != 0 {
				t.Errorf("lathe_job_duration_seconds_count{%s,%s} = %v on an empty store", be.Name, st, v)
			}
		}
	}
	for _, p := range []string{"urgent", "normal", "batch"} {
		for _, name := range []string{"lathe_queue_oldest_wait_seconds", "lathe_queue_past_max_wait_jobs"} {
			if v := metricValue(t, ss, name, map[string]string{"priority": p}); v != 0 {
				t.Errorf("%s{priority=%s} = %v on an empty store", name, p, v)
			}
		}
	}
}

// TestMetricsCostSettledOnce: on a priced local pool ($3,600 a GPU-hour)
// with the leader's duties running (apitest.Start: placer and settler), a
// 1-GPU job's cost accrues in lathe_cost_dollars_total while it runs;
// once it ended and the settler settled it, the total is the one settled
// figure (the job's cost_usd, the month's spend of backend:local), counted
// once, and it stays so.
func TestMetricsCostSettledOnce(t *testing.T) {
	b := setup(t, scheduler.Config{})
	rc, err := routecfg.ParseConfig([]byte("sites:\n  dc: [onprem]\nredis_site: dc\nbackends:\n  local:\n    kind: local\n    site: dc\n    price: {usd_per_gpu_hour: 3600}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := apitest.Start(t, b.rdb, b.store, scheduler.Config{Logger: quiet, Routing: rc, PlaceInterval: 50 * time.Millisecond,
		Defaults: jobspec.Defaults{OutputURI: "file://" + t.TempDir()}}, api.Config{})
	lb := b
	lb.url = r.URL
	waitfor.True(t, 20*time.Second, "leadership", r.S.IsLeader)
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n9", Incarnation: "i9", Backend: "local", Slots: 1, GPUs: []jobtype.GPU{
		{Index: 0, UUID: "GPU-9", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559, Healthy: true}}},
		jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "POST", lb.url+"/api/v1/jobs", `{"name":"paid","base_model":"tiny-char","dataset":"file:///data/train.jsonl","resources":{"gpus":1}}`, nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	id := jobOf(t, body).ID
	j := waitfor.Value(t, 20*time.Second, "the job placed on n9", storedJob(b.ctx, b.store, id),
		func(j *jobtype.Job) bool { return j != nil && j.State == jobtype.StateDispatched })
	if j.BudgetReservedUSD <= 0 {
		t.Fatalf("the job holds no budget reservation on a priced pool: %+v", j.Route)
	}
	if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: j.Attempt, Node: "n9", Incarnation: "i9", Lease: time.Minute}); out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	cost := func() float64 {
		_, ss, _ := scrapeMetrics(t, lb, "")
		return metricSum(ss, "lathe_cost_dollars_total", nil)
	}
	time.Sleep(100 * time.Millisecond)
	c1 := cost()
	time.Sleep(100 * time.Millisecond)
	c2 := cost()
	if !(c1 > 0.05 && c2 > c1) {
		t.Fatalf("a running job's cost does not accrue: $%.4f then $%.4f", c1, c2)
	}
	if err := b.store.Finish(b.ctx, id, j.Attempt, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	settled := waitfor.Value(t, 20*time.Second, "the job settled", storedJob(b.ctx, b.store, id),
		func(j *jobtype.Job) bool {
			return j != nil && j.State.Terminal() && j.BudgetReservedUSD == 0 && j.CostUSD > 0
		})
	_, ss, _ := scrapeMetrics(t, lb, "")
	got := metricValue(t, ss, "lathe_cost_dollars_total", map[string]string{"backend": "local"})
	spent := metricValue(t, ss, "lathe_budget_spent_dollars", map[string]string{"scope": "backend:local"})
	if math.Abs(got-settled.CostUSD) > 1e-5 || math.Abs(spent-settled.CostUSD) > 1e-5 || got < c2 {
		t.Fatalf("settled: lathe_cost_dollars_total $%.6f, spent $%.6f, the job's cost_usd $%.6f (it read $%.6f running)", got, spent, settled.CostUSD, c2)
	}
	time.Sleep(2 * time.Second) // a settler pass or so: nothing is settled twice
	_, ss, _ = scrapeMetrics(t, lb, "")
	if again := metricValue(t, ss, "lathe_cost_dollars_total", map[string]string{"backend": "local"}); again != got {
		t.Fatalf("lathe_cost_dollars_total moved from $%.6f to $%.6f with no job running", got, again)
	}
}

// TestMetricsStoreDown: with Redis gone a scrape still answers, with
// lathe_store_up 0 and none of the store's metrics (a gap, not zeros).
func TestMetricsStoreDown(t *testing.T) {
	b := setup(t, scheduler.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: b.srv.Addr, DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	hs := httptest.NewServer(apitest.New(rdb, jobstore.New(rdb, jobstore.Config{}), scheduler.Config{Logger: quiet}, api.Config{}).API.Handler())
	defer hs.Close()
	b.srv.Kill()
	db := b
	db.url = hs.URL
	_, ss, _ := scrapeMetrics(t, db, "")
	if got := metricValue(t, ss, "lathe_store_up", nil); got != 0 {
		t.Fatalf("lathe_store_up %v with Redis down, want 0", got)
	}
	for _, s := range ss {
		switch s.name {
		case "lathe_jobs", "lathe_queue_pending_jobs", "lathe_gpu_healthy", "lathe_budget_limit_dollars":
			t.Fatalf("with Redis down the scrape holds %s", s.name)
		}
	}
	if got := metricValue(t, ss, "lathe_scheduler_leader", nil); got != 0 {
		t.Fatalf("lathe_scheduler_leader %v, want 0 (the process's own metrics stay)", got)
	}
}

// TestPrometheusConfig: configs/prometheus/prometheus.yml passes promtool
// check config (its credentials file pointed at a file that exists: the
// compose file writes the real one when Prometheus starts; its rule file
// alerts.yml beside it), loads the alert rules, and it scrapes the compose
// scheduler's /metrics.
func TestPrometheusConfig(t *testing.T) {
	raw, err := os.ReadFile("../configs/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, want := range []string{"metrics_path: /metrics", `targets: ["scheduler:8080"]`, "credentials_file: /tmp/lathe-token"} {
		if !strings.Contains(text, want) {
			t.Fatalf("configs/prometheus/prometheus.yml lacks %q", want)
		}
	}
	if !strings.Contains(text, "rule_files:\n  - alerts.yml") {
		t.Fatal("configs/prometheus/prometheus.yml does not load alerts.yml")
	}
	dir := t.TempDir()
	rules, err := os.ReadFile("../configs/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/alerts.yml", rules, 0o600); err != nil {
		t.Fatal(err)
	}
	token := dir + "/lathe-token"
	if err := os.WriteFile(token, []byte("a-token-of-sixteen-chars"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := dir + "/prometheus.yml"
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(text, "/tmp/lathe-token", token)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/bin/promtool", "check", "config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// TestPrometheusScrapesWithViewerToken: the shipped Prometheus scrapes with
// a viewer token, never the admin one: the compose file writes
// LATHE_METRICS_TOKEN to the credentials file prometheus.yml names, and the
// compose daemon config makes that variable's token a viewer's. A viewer
// token reads /metrics (TestMetricsAuth).
func TestPrometheusScrapesWithViewerToken(t *testing.T) {
	compose, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var dc struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(compose, &dc); err != nil {
		t.Fatal(err)
	}
	prom := dc.Services["prometheus"]
	cmd := strings.Join(prom.Command, " ")
	if !strings.Contains(cmd, `"$$LATHE_METRICS_TOKEN" > /tmp/lathe-token`) || strings.Contains(cmd, "ADMIN") {
		t.Errorf("docker-compose.yml: Prometheus' start must write LATHE_METRICS_TOKEN (and only it) to /tmp/lathe-token: %q", cmd)
	}
	if _, ok := prom.Environment["LATHE_ADMIN_TOKEN"]; ok {
		t.Error("docker-compose.yml: Prometheus is given LATHE_ADMIN_TOKEN")
	}
	if _, ok := dc.Services["scheduler"].Environment["LATHE_METRICS_TOKEN"]; !ok {
		t.Error("docker-compose.yml: the scheduler is not given LATHE_METRICS_TOKEN (its viewer token)")
	}
	raw, err := os.ReadFile("../configs/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auth struct {
			Tokens []struct {
				Name     string `yaml:"name"`
				TokenEnv string `yaml:"token_env"`
				Role     string `yaml:"role"`
			} `yaml:"tokens"`
		} `yaml:"auth"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tk := range cfg.Auth.Tokens {
		if tk.TokenEnv == "LATHE_METRICS_TOKEN" {
			found = true
			if tk.Role != string(plane.RoleViewer) {
				t.Errorf("configs/compose.yaml: the token of LATHE_METRICS_TOKEN (%s) has role %q, want viewer", tk.Name, tk.Role)
			}
		}
	}
	if !found {
		t.Error("configs/compose.yaml: no token reads LATHE_METRICS_TOKEN")
	}
}

// TestAlertRules: configs/prometheus/alerts.yml passes promtool check rules
// and its unit tests (alerts_test.yml, promtool test rules: each case
// feeds series and expects the alerts that fire, and those that must not);
// every alert has a case in which it fires; and every metric a rule reads
// is one /metrics exports. promtool is the real one (Debian prometheus,
// installed by scripts/setup.sh --test): missing, the test fails.
func TestAlertRules(t *testing.T) {
	const promtool = "/usr/bin/promtool"
	if _, err := os.Stat(promtool); err != nil {
		t.Fatalf("%s is missing (Debian prometheus; scripts/setup.sh --test installs it): %v", promtool, err)
	}
	if out, err := exec.Command(promtool, "check", "rules", "../configs/prometheus/alerts.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = "../configs/prometheus"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	for path, out := range map[string]any{"../configs/prometheus/alerts.yml": &rules, "../configs/prometheus/alerts_test.yml": &tests} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			}
		}
	}
	b := setup(t, scheduler.Config{})
	populateForMetrics(t, b)
	_, _, types := scrapeMetrics(t, b, "")
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
				if !fires[r.Alert] {
					t.Errorf("alert %s: no case of alerts_test.yml in which it fires", r.Alert)
				}
			}
			for _, name := range dashMetricRE.FindAllString(r.Expr, -1) {
				if _, ok := types[name]; !ok {
					t.Errorf("rule %s%s reads %s, which /metrics does not export", r.Alert, r.Record, name)
				}
			}
		}
	}
	// The alerts the ops view must have (issue 26).
	for _, must := range []string{"LatheStoreDown", "LatheNoLeader", "LatheJobPastMaxWait", "LatheNodeHeartbeatLost",
		"LatheGPUUnhealthy", "LatheGPUXIDError", "LatheBudgetAt80Percent", "LatheBudgetExhausted", "LatheJobFailureRateHigh"} {
		if !slices.Contains(alerts, must) {
			t.Errorf("configs/prometheus/alerts.yml has no alert %s", must)
		}
	}
}

// BenchmarkMetricsScrape times GET /metrics, in process, over a store
// holding 2,000 queued jobs, 200 running on 25 nodes of 8 GPUs, and
// LATHE_BENCH_FINISHED finished ones (default 10,000: a finished job costs
// a scrape nothing, its state index is counted with ZCARD), seeded by
// seedtest, and reports the p50 and p99 of the scrapes. The same against
// the lathed binary with 100,000 jobs: cmd/lathed BenchmarkDashboard100k.
func BenchmarkMetricsScrape(b *testing.B) { benchSeededGet(b, "/metrics") }

// BenchmarkOverview is BenchmarkMetricsScrape for GET /api/v1/overview (no
// asynq queue holds a task here, so asynq's reads are one SISMEMBER each).
func BenchmarkOverview(b *testing.B) { benchSeededGet(b, "/api/v1/overview") }

// benchSeededGet times GET path over the store BenchmarkMetricsScrape
// describes.
func benchSeededGet(b *testing.B, path string) {
	finished := 10000
	if v := os.Getenv("LATHE_BENCH_FINISHED"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("LATHE_BENCH_FINISHED %q: %v", v, err)
		}
		finished = n
	}
	srv := redistest.Start(b)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	hs := httptest.NewServer(apitest.New(rdb, store, scheduler.Config{Logger: quiet}, api.Config{}).API.Handler())
	b.Cleanup(hs.Close)
	if _, err := seedtest.Seed(context.Background(), store, seedtest.Cluster{Nodes: 25, GPUsPerNode: 8,
		Finished: finished, Running: 200, Queued: 2000, Events: 20}); err != nil {
		b.Fatal(err)
	}
	c := &http.Client{}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		resp, err := c.Get(hs.URL + path)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}
