package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// pricedConfig prices the local pool at $3,600 a GPU-hour (a dollar a
// GPU-second), so that jobs running for milliseconds cost cents.
const pricedConfig = `
sites:
  dc: [onprem]
redis_site: dc
backends:
  local:
    kind: local
    site: dc
    price: {usd_per_gpu_hour: 3600}
`

// TestMetricsScenario: a known scenario, on the default (unpriced) config
// and on a priced one, against the real scheduler's API and store
// (testDaemon, a real redis-server; jobs driven through the store as a
// worker drives them, each GPU job on its own GPU, the CPU jobs on the
// node's CPU slots): 10 jobs submitted with lathe submit and a sweep of 3
// trials with lathe sweep submit; 3 succeed (one a trial), 2 fail (one a
// trial), 2 are cancelled (one queued, one running, with lathe cancel), 2
// are stopped (a trial its sweep stopped, reason median, while running; a
// job stopped for its team's budget while queued, as the settler stops
// it), 2 keep running (one GPU job, one CPU job) and one waits past its
// max_wait. Then /metrics (of this scheduler and of a second one started
// after the endings)
// counts each ending once by state, reason, backend and priority; the
// duration histogram holds every ending, its sum the run time the store
// recorded; the routing decisions count every submit and every trial;
// the queued job is past its max_wait;
// lathe_node_slots_reserved and lathe queues say 1 of 2 CPU slots is held
// (the GPU jobs hold GPUs, not slots); and the cost is what the store's
// run times say at the price (0 unpriced), before and after the budget
// reservations are settled (nothing counted twice), and it grows while
// the running jobs run.
func TestMetricsScenario(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		price  float64 // $ per GPU-hour
	}{{"unpriced", "", 0}, {"priced", pricedConfig, 3600}} {
		t.Run(tc.name, func(t *testing.T) { metricsScenario(t, tc.config, tc.price) })
	}
}

func metricsScenario(t *testing.T, config string, price float64) {
	d := newTestDaemon(t, config, time.Hour)
	d.heartbeat(t, jobstore.Node{Name: "n1", Incarnation: "i-n1", Backend: "local", Slots: 2, GPUs: h100s(4)})
	gpuSpec := "name: g\nbase_model: tiny-char\ndataset: file:///data/train.jsonl\nresources: {gpus: 1}\n"
	cpuSpec := "name: c\nbase_model: tiny-char\ndataset: file:///data/train.jsonl\nresources: {gpus: 0}\n"

	submits := 0
	sub := func(spec string) string {
		submits++
		return d.submit(t, spec).ID
	}
	// start runs id's attempt on n1: on GPU gpu, or (gpu < 0) a CPU slot.
	start := func(id string, gpu int) {
		t.Helper()
		p := jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 2}
		if gpu >= 0 {
			p.GPUs = []int{gpu}
		}
		if err := d.store.Dispatch(d.ctx, p); err != nil {
			t.Fatalf("dispatch %s: %v", id, err)
		}
		if out, err := d.store.Claim(d.ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "i-n1", Lease: time.Minute}); out != jobstore.Claimed {
			t.Fatalf("claim %s: %v %v", id, out, err)
		}
	}
	finish := func(id string, st jobtype.State, reason string) {
		t.Helper()
		time.Sleep(30 * time.Millisecond) // a run time to measure
		if err := d.store.Finish(d.ctx, id, 1, jobstore.Ending{State: st, Reason: reason}); err != nil {
			t.Fatalf("finish %s %s: %v", id, st, err)
		}
	}
	type ending struct{ state, reason, priority string }
	want := map[ending]int{}

	// The sweep: 3 trials (batch priority, as sweeps default to), all
	// admitted (max_parallel 3).
	dir := t.TempDir()
	writeFile(t, dir, "job.yaml", gpuSpec)
	sweepFile := writeFile(t, dir, "sweep.yaml", "name: s\njob: job.yaml\nparameters:\n  training.learning_rate: {grid: [0.01, 0.02, 0.03]}\nmax_parallel: 3\n")
	r := lathe(t, d.url, "sweep", "submit", sweepFile, "-o", "json")
	var sw wire.SweepStatus
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &sw) != nil || sw.Sweep == nil || sw.Sweep.Trials != 3 {
		t.Fatalf("sweep submit: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	trials := []string{jobstore.TrialID(sw.Sweep.ID, 0), jobstore.TrialID(sw.Sweep.ID, 1), jobstore.TrialID(sw.Sweep.ID, 2)}

	s1, s2, f1 := sub(gpuSpec), sub(gpuSpec), sub(gpuSpec)
	c1, cq, bs := sub(gpuSpec), sub(gpuSpec), sub(gpuSpec)
	r1, cpu1, cpu2 := sub(gpuSpec), sub(cpuSpec), sub(cpuSpec)
	_ = sub(gpuSpec + "max_wait: 100ms\n") // stays queued, past its max_wait by the scrape
	ids := []string{s1, s2, f1, c1, cq, bs, r1, cpu1, cpu2}
	ids = append(ids, trials...)

	start(r1, 0) // runs to the end
	start(s1, 1)
	finish(s1, jobtype.StateSucceeded, "")
	start(s2, 1)
	finish(s2, jobtype.StateSucceeded, "")
	want[ending{"succeeded", "", "normal"}] += 2
	start(f1, 1)
	finish(f1, jobtype.StateFailed, jobtype.ReasonExit)
	want[ending{"failed", jobtype.ReasonExit, "normal"}]++
	start(cpu1, -1)
	finish(cpu1, jobtype.StateSucceeded, "")
	want[ending{"succeeded", "", "normal"}]++

	// Cancelled: one running (the worker writes cancelled once its trainer
	// is gone), one queued.
	start(c1, 2)
	if r := lathe(t, d.url, "cancel", c1); r.code != exitOK {
		t.Fatalf("cancel %s: exit %d %s", c1, r.code, r.stderr)
	}
	finish(c1, jobtype.StateCancelled, jobtype.ReasonCancelled)
	if r := lathe(t, d.url, "cancel", cq); r.code != exitOK {
		t.Fatalf("cancel %s: exit %d %s", cq, r.code, r.stderr)
	}
	want[ending{"cancelled", jobtype.ReasonCancelled, "normal"}] += 2
	// Stopped for its team's budget while waiting (the settler's store call).
	if _, err := d.store.Stop(d.ctx, bs, jobtype.ReasonBudget, "team budget spent"); err != nil {
		t.Fatal(err)
	}
	want[ending{"stopped", jobtype.ReasonBudget, "normal"}]++

	// The trials: one succeeds, one fails, one its sweep stops (median
	// rule) while it runs: the worker ends it, and it ends stopped.
	start(trials[0], 1)
	finish(trials[0], jobtype.StateSucceeded, "")
	start(trials[1], 2)
	finish(trials[1], jobtype.StateFailed, jobtype.ReasonPermanent)
	start(trials[2], 3)
	if _, err := d.store.Stop(d.ctx, trials[2], jobtype.ReasonMedianStopping, "worse than the median"); err != nil {
		t.Fatal(err)
	}
	finish(trials[2], jobtype.StateCancelled, jobtype.ReasonCancelled)
	want[ending{"succeeded", "", "batch"}]++
	want[ending{"failed", jobtype.ReasonPermanent, "batch"}]++
	want[ending{"stopped", jobtype.ReasonMedianStopping, "batch"}]++

	start(cpu2, -1) // holds one of n1's 2 CPU slots to the end

	// The store's own record of what ran: the expected figures.
	jobs, err := d.store.GetMany(d.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	var endedRunS, endedUSD float64
	byState := map[string]int{}
	var running []*jobtype.Job
	for _, j := range jobs {
		if j.State == jobtype.StateRunning {
			running = append(running, j)
			continue
		}
		if !j.State.Terminal() {
			t.Fatalf("job %s is %s, the scenario ends it", j.ID, j.State)
		}
		byState[string(j.State)]++
		endedRunS += j.RunS
		endedUSD += j.LocalRunS / 3600 * float64(j.Spec.Resources.GPUs) * price
	}
	accrued := func(at time.Time) float64 { // what the running jobs cost to at
		usd := 0.0
		for _, j := range running {
			usd += at.Sub(*j.StartedAt).Seconds() / 3600 * float64(j.Spec.Resources.GPUs) * price
		}
		return usd
	}

	before := time.Now()
	ms := scrapeFamilies(t, d.url)
	after := time.Now()

	// Every ending once, by state, reason and priority, on backend local.
	got := map[ending]int{}
	for _, m := range ms["lathe_jobs_finished_total"].GetMetric() {
		l := labelMap(m)
		if l["backend"] != "local" {
			t.Errorf("lathe_jobs_finished_total%v: backend %q, want local", l, l["backend"])
		}
		got[ending{l["state"], l["reason"], l["priority"]}] += int(m.GetCounter().GetValue())
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("lathe_jobs_finished_total{state=%q,reason=%q,priority=%q} = %d, want %d", k.state, k.reason, k.priority, got[k], n)
		}
	}
	for k, n := range got {
		if want[k] != n {
			t.Errorf("lathe_jobs_finished_total{state=%q,reason=%q,priority=%q} = %d, the scenario ended %d so", k.state, k.reason, k.priority, n, want[k])
		}
	}
	// A second scheduler, started after every ending (another replica, or
	// this one restarted), exports the same counts: they are the store's,
	// not a process's.
	rc, err := routecfg.ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	other := apitest.Serve(t, d.redis.Client(), d.store, scheduler.Config{Routing: rc, Logger: slog.New(slog.DiscardHandler)}, api.Config{})
	otherTotal, wantTotal := 0, 0
	for _, m := range scrapeFamilies(t, other.URL)["lathe_jobs_finished_total"].GetMetric() {
		l := labelMap(m)
		otherTotal += int(m.GetCounter().GetValue())
		if k := (ending{l["state"], l["reason"], l["priority"]}); int(m.GetCounter().GetValue()) != want[k] {
			t.Errorf("a second scheduler: lathe_jobs_finished_total%v = %v, want %d", l, m.GetCounter().GetValue(), want[k])
		}
	}
	for _, n := range want {
		wantTotal += n
	}
	if otherTotal != wantTotal {
		t.Errorf("a second scheduler counts %d endings, the scenario ended %d", otherTotal, wantTotal)
	}
	// The duration histogram holds every ending, by state; its sum is the
	// run time the store recorded.
	hcount, hsum := map[string]int{}, 0.0
	for _, m := range ms["lathe_job_duration_seconds"].GetMetric() {
		hcount[labelMap(m)["state"]] += int(m.GetHistogram().GetSampleCount())
		hsum += m.GetHistogram().GetSampleSum()
	}
	for _, st := range []string{"succeeded", "failed", "cancelled", "stopped"} {
		if hcount[st] != byState[st] {
			t.Errorf("lathe_job_duration_seconds_count{state=%q} = %d, %d jobs ended so", st, hcount[st], byState[st])
		}
	}
	if math.Abs(hsum-endedRunS) > 0.01 || endedRunS < 0.2 {
		t.Errorf("lathe_job_duration_seconds_sum = %.3f s, the ended jobs ran %.3f s", hsum, endedRunS)
	}
	// Every submit and every trial is a routing decision.
	dec := 0.0
	for _, m := range ms["lathe_routing_decisions_total"].GetMetric() {
		dec += m.GetCounter().GetValue()
	}
	if int(dec) != submits+len(trials) {
		t.Errorf("lathe_routing_decisions_total sums to %v, want %d submits + %d trials", dec, submits, len(trials))
	}
	if v := gaugeOf(t, ms, "lathe_queue_past_max_wait_jobs", "priority", "normal"); v != 1 {
		t.Errorf("lathe_queue_past_max_wait_jobs{priority=normal} = %v, want 1", v)
	}
	if v := gaugeOf(t, ms, "lathe_queue_past_max_wait_jobs", "priority", "urgent"); v != 0 {
		t.Errorf("lathe_queue_past_max_wait_jobs{priority=urgent} = %v, want 0 (present at 0)", v)
	}
	// One CPU job holds one of the 2 CPU slots; the GPU jobs hold GPUs.
	if v := gaugeOf(t, ms, "lathe_node_slots_reserved", "node", "n1"); v != 1 {
		t.Errorf("lathe_node_slots_reserved{node=n1} = %v, want 1 (one CPU job; %d jobs running)", v, len(running))
	}
	if v := gaugeOf(t, ms, "lathe_node_slots", "node", "n1"); v != 2 {
		t.Errorf("lathe_node_slots{node=n1} = %v, want 2", v)
	}
	qr := lathe(t, d.url, "queues")
	if qr.code != exitOK || !hasRow(qr.stdout, "node:n1", "2", "1") {
		t.Errorf("lathe queues does not print node:n1 with SLOTS 2 RESERVED 1:\n%s%s", qr.stdout, qr.stderr)
	}
	// lathe queues counts the ended jobs by state as the counters do.
	for st, n := range byState {
		if !hasRow(qr.stdout, st+":", strconv.Itoa(n)) {
			t.Errorf("lathe queues does not print %s: %d:\n%s", st, n, qr.stdout)
		}
	}

	// The cost: settled plus accruing, what the store's run times say.
	costSum := func(ms map[string]*dto.MetricFamily) float64 {
		usd := 0.0
		for _, m := range ms["lathe_cost_dollars_total"].GetMetric() {
			usd += m.GetCounter().GetValue()
		}
		return usd
	}
	checkCost := func(what string, got float64, before, after time.Time) {
		t.Helper()
		lo, hi := endedUSD+accrued(before)-1e-4, endedUSD+accrued(after)+1e-4
		if got < lo || got > hi {
			t.Errorf("%s: lathe_cost_dollars_total sums to $%.6f, want $%.6f to $%.6f (ended $%.6f)", what, got, lo, hi, endedUSD)
		}
	}
	c0 := costSum(ms)
	checkCost("before settling", c0, before, after)
	if price == 0 && c0 != 0 {
		t.Errorf("unpriced: lathe_cost_dollars_total sums to %v, want 0", c0)
	}
	if price > 0 && endedUSD < 0.1 {
		t.Fatalf("priced: the ended jobs cost $%.4f; the scenario should cost more", endedUSD)
	}
	// Settle every ended job's reservation with its cost, as the leader's
	// settler does: the total moves only by what the running jobs accrue.
	settled := 0.0
	for _, j := range jobs {
		if j.State.Terminal() && j.BudgetReservedUSD > 0 {
			usd := j.LocalRunS / 3600 * float64(j.Spec.Resources.GPUs) * price
			if err := d.store.Settle(d.ctx, j.ID, usd); err != nil {
				t.Fatal(err)
			}
			settled += usd
		}
	}
	if (price > 0) != (settled > 0) {
		t.Errorf("settled $%.4f at a price of $%v a GPU-hour", settled, price)
	}
	time.Sleep(50 * time.Millisecond)
	before = time.Now()
	ms2 := scrapeFamilies(t, d.url)
	after = time.Now()
	c1v := costSum(ms2)
	checkCost("after settling", c1v, before, after)
	if price > 0 && c1v <= c0 {
		t.Errorf("the cost did not grow while 2 jobs ran: $%.6f then $%.6f", c0, c1v)
	}
	if v := gaugeOf(t, ms2, "lathe_budget_spent_dollars", "scope", "backend:local"); math.Abs(v-settled) > 1e-4 {
		t.Errorf("lathe_budget_spent_dollars{scope=backend:local} = %v, settled %v", v, settled)
	}
}

// scrapeFamilies GETs url's /metrics and parses it with Prometheus' own
// text parser.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	ms, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return ms
}

// labelMap is m's labels.
func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// gaugeOf is the one gauge of family name whose label k is v.
func gaugeOf(t *testing.T, ms map[string]*dto.MetricFamily, name, k, v string) float64 {
	t.Helper()
	var found []float64
	for _, m := range ms[name].GetMetric() {
		if labelMap(m)[k] == v {
			found = append(found, m.GetGauge().GetValue())
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s{%s=%q}: %d samples, want 1", name, k, v, len(found))
	}
	return found[0]
}

// hasRow reports whether text has a line whose first fields are fields.
func hasRow(text string, fields ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}
