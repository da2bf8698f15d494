package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

// dashSpec writes a spec for the real reference trainer.
func dashSpec(t *testing.T, dir, name string, gpus int, prio string, steps, evalEvery int, dataset string) string {
	t.Helper()
	root := repoRoot(t)
	p := filepath.Join(dir, name+".yaml")
	spec := fmt.Sprintf(`name: %s
base_model: tiny-char
dataset: file://%s
eval_dataset: file://%s/configs/examples/data/tiny-eval.jsonl
lora: {rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
training: {max_steps: %d, batch_size: 4, learning_rate: 0.01, checkpoint_every: 0, eval_every: %d}
resources: {gpus: %d}
priority: %s
`, name, dataset, root, steps, evalEvery, gpus, prio)
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// getOverview reads GET /api/v1/overview.
func getOverview(t *testing.T, base string) wire.Overview {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/overview")
	if err != nil {
		t.Fatalf("get overview: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get overview: %s, want 200 OK", resp.Status)
	}
	var ov wire.Overview
	if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil {
		t.Fatalf("decode overview: %v", err)
	}
	return ov
}

// getJSON reads GET base+path into v (a 200 answer, or the test fails).
func getJSON(t *testing.T, base, path string, v any) {
	t.Helper()
	getAs(t, base, "", path, v)
}

// routingView is the routing panel's rows (job id and what was chosen) or
// the API's decisions in the same form.
type routingView struct {
	Jobs   []string `json:"jobs"`
	Kinds  []string `json:"kinds"`
	Points string   `json:"points"` // the succeeded job's sparkline's points
}

// checkRoutingAndSparklines waits until the routing panel lists the
// decisions GET /api/v1/decisions answers, in its order (the panel polls
// every 10 s), and the succeeded job's row draws a loss sparkline of as
// many points as the jobs list's loss series of it.
func checkRoutingAndSparklines(t *testing.T, b *browser, base, succeeded string) {
	t.Helper()
	var list wire.JobList
	getJSON(t, base, "/api/v1/jobs?limit=200&loss_series=true", &list)
	wantPoints := strconv.Itoa(len(list.LossSeries[succeeded]))
	if wantPoints == "0" {
		t.Fatalf("the jobs list has no loss series for the succeeded job %s", succeeded)
	}
	var last pageAndAPI
	if !waitfor.Poll(30*time.Second, func() bool {
		var page routingView
		if err := b.exec(`const out = {jobs: [], kinds: [], points: ''};
			for (const tr of document.querySelectorAll('#decision-table tbody tr[data-kind]')) { out.jobs.push(tr.dataset.decisionJob); out.kinds.push(tr.dataset.kind); }
			const sp = document.querySelector('#job-table tbody tr[data-job="`+succeeded+`"] svg.spark');
			out.points = sp ? sp.dataset.points : ''; return out;`, &page); err != nil {
			t.Fatalf("read the routing panel: %v", err)
		}
		var ans wire.Decisions
		getJSON(t, base, "/api/v1/decisions?limit=50", &ans)
		api := routingView{Jobs: []string{}, Kinds: []string{}, Points: wantPoints}
		for _, d := range ans.Decisions {
			api.Jobs, api.Kinds = append(api.Jobs, d.JobID), append(api.Kinds, d.Kind)
		}
		last = pageAndAPI{page: fmt.Sprintf("%+v", page), api: fmt.Sprintf("%+v", api)}
		return len(api.Jobs) >= 5 && slices.Equal(page.Jobs, api.Jobs) && slices.Equal(page.Kinds, api.Kinds) && page.Points == api.Points
	}) {
		t.Fatalf("the routing panel and the succeeded job's sparkline never showed what the API answers (5 jobs submitted, so at least 5 decisions):%s", last)
	}
}

// pageOverview is what the overview page shows, read from its DOM.
type pageOverview struct {
	Marker     float64               `json:"marker"`
	TimeOrigin float64               `json:"timeOrigin"`
	Status     string                `json:"status"`
	Pending    string                `json:"pending"`
	States     map[string]string     `json:"states"`
	Priorities map[string]string     `json:"priorities"`
	Jobs       map[string]pageJobRow `json:"jobs"`
	Nodes      map[string][]pageGPU  `json:"nodes"`
	Badges     map[string]string     `json:"badges"`
}

type pageJobRow struct {
	State     string `json:"state"`
	StateText string `json:"stateText"`
	Node      string `json:"node"`
	GPUs      string `json:"gpus"`
	Reason    string `json:"reason"`
	Position  string `json:"position"`
}

type pageGPU struct {
	Index string `json:"index"`
	Job   string `json:"job"`
	Label string `json:"label"`
}

// readPageJS reads the overview's panels (scheduler/api/ui/app.js renders them).
const readPageJS = `
const txt = (e) => e ? e.textContent : '';
const out = {marker: window.__latheE2E || 0, timeOrigin: performance.timeOrigin,
  status: txt(document.querySelector('#status')), pending: txt(document.querySelector('#q-pending')),
  states: {}, priorities: {}, jobs: {}, nodes: {}, badges: {}};
for (const tr of document.querySelectorAll('#q-states tbody tr[data-state]')) out.states[tr.dataset.state] = txt(tr.querySelector('td.n'));
for (const tr of document.querySelectorAll('#q-priorities tbody tr[data-priority]')) out.priorities[tr.dataset.priority] = txt(tr.querySelector('td.n'));
for (const tr of document.querySelectorAll('#job-table tbody tr[data-job]')) {
  const r = tr.querySelector('td.reason');
  out.jobs[tr.dataset.job] = {state: tr.dataset.state, stateText: txt(tr.querySelector('td.state')), node: txt(tr.querySelector('td.node')),
    gpus: txt(tr.querySelector('td.gpus')), reason: txt(r), position: r ? r.dataset.position : ''};
}
for (const n of document.querySelectorAll('#nodes .node[data-node]')) {
  out.nodes[n.dataset.node] = [...n.querySelectorAll('.gpu')].map((g) => ({index: g.dataset.gpu, job: g.dataset.job, label: txt(g.querySelector('.idx'))}));
  out.badges[n.dataset.node] = txt(n.querySelector('.badge'));
}
return out;`

func readPage(t *testing.T, b *browser) pageOverview {
	t.Helper()
	var p pageOverview
	if err := b.exec(readPageJS, &p); err != nil {
		t.Fatalf("read the overview page: %v", err)
	}
	return p
}

// queueView is the queue panel's numbers, as the page shows them or as the
// API's overview has them.
type queueView struct {
	Pending    string
	ByState    map[string]string
	ByPriority map[string]string
}

func (q queueView) String() string {
	return fmt.Sprintf("pending=%s by_state=%v by_priority=%v", q.Pending, q.ByState, q.ByPriority)
}

// apiQueues is what the queue panel should show for the API's queues: every
// state the API lists, and urgent, normal and batch (0 when absent) and any
// other priority it lists.
func apiQueues(q wire.OverviewQueues) queueView {
	v := queueView{Pending: strconv.FormatInt(q.Pending, 10), ByState: map[string]string{}, ByPriority: map[string]string{}}
	for s, n := range q.ByState {
		v.ByState[string(s)] = strconv.FormatInt(n, 10)
	}
	for _, p := range []string{"urgent", "normal", "batch"} {
		v.ByPriority[p] = "0"
	}
	for p, n := range q.ByPriority {
		v.ByPriority[p] = strconv.FormatInt(n, 10)
	}
	return v
}

func pageQueues(p pageOverview) queueView {
	return queueView{Pending: p.Pending, ByState: p.States, ByPriority: p.Priorities}
}

// pageAndAPI is one read of the page and of the API, for a failed wait.
type pageAndAPI struct {
	page, api string
}

func (x pageAndAPI) String() string { return "\n  page: " + x.page + "\n  API:  " + x.api }

// checkQueuePanel waits until the queue panel's numbers equal what GET
// /api/v1/overview answers at the same moment (each poll reads both: jobs
// move, and the page polls every 2 s), and returns that overview.
func checkQueuePanel(t *testing.T, b *browser, base string) wire.Overview {
	t.Helper()
	var ov wire.Overview
	waitfor.Value(t, 30*time.Second, "the queue panel to show the numbers of GET /api/v1/overview", func() pageAndAPI {
		ov = getOverview(t, base)
		pq := pageQueues(readPage(t, b))
		aq := apiQueues(ov.Queues)
		if reflect.DeepEqual(pq, aq) {
			return pageAndAPI{}
		}
		return pageAndAPI{page: pq.String(), api: aq.String()}
	}, func(x pageAndAPI) bool { return x == pageAndAPI{} })
	return ov
}

// wantRow is what the jobs table's row of job j should show.
func wantRow(j jobtype.Job) pageJobRow {
	gpus := make([]string, len(j.GPUs))
	for i, g := range j.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	r := pageJobRow{State: string(j.State), StateText: string(j.State), Node: j.Node, GPUs: strings.Join(gpus, ","), Reason: j.Error}
	if j.State == jobtype.StateQueued && j.Wait != nil {
		r.Position = strconv.Itoa(j.Wait.Position)
		r.Reason = j.Wait.Reason // the page shows "#N · ~time · reason"; checked by rowMatches
	}
	return r
}

// rowMatches: the row shows the job's state, node, GPUs and, for a queued
// job, its place in line and reason ("#N[ · ~est] · reason"); for an ended
// job its error.
func rowMatches(got, want pageJobRow) bool {
	if got.State != want.State || got.StateText != want.StateText || got.Node != want.Node || got.GPUs != want.GPUs || got.Position != want.Position {
		return false
	}
	if want.Position != "" {
		return strings.HasPrefix(got.Reason, "#"+want.Position+" ") && strings.HasSuffix(got.Reason, " · "+want.Reason)
	}
	return got.Reason == want.Reason
}

// checkJobsTable waits until the jobs table shows each job as GET
// /api/v1/jobs/{id} gives it at the same moment.
func checkJobsTable(t *testing.T, b *browser, base string, ids map[string]string) {
	t.Helper()
	names := make([]string, 0, len(ids))
	for n := range ids {
		names = append(names, n)
	}
	sort.Strings(names)
	waitfor.Value(t, 30*time.Second, fmt.Sprintf("the jobs table to show jobs %v as the API does", names), func() pageAndAPI {
		var bad pageAndAPI
		p := readPage(t, b)
		for _, n := range names {
			id := ids[n]
			want := wantRow(getJob(t, base, id))
			got, ok := p.Jobs[id]
			if !ok || !rowMatches(got, want) {
				bad.page += fmt.Sprintf("%s %s: %+v (in the table: %v); ", n, id, got, ok)
				bad.api += fmt.Sprintf("%s %s: %+v; ", n, id, want)
			}
		}
		return bad
	}, func(x pageAndAPI) bool { return x == pageAndAPI{} })
}

// TestDashboardChromium (issue #14): the real headless Chromium, driven
// through chromedriver, against the real `lathed up --gpus
// simulated:dgxh100` (go-nvml's mock, a fake; the real reference trainer
// runs on the CPU) holding a running 8-GPU job, a queued job behind it, a
// succeeded and a failed one. The queue, jobs and GPU panels show what the
// API answers, a job submitted later appears without a reload, and the
// succeeded job's page draws its loss curve with one point per progress
// event. Issue #26's checks (dashboard_ops_e2e_test.go): GPU tiles with
// their jobs, CPU slots, budgets and history panels as the API answers,
// folded errors, a gated sweep's trials with whole ids and reasons, the
// job page's chart text >= 11 px on screen at 1600 and 420 px with ticks
// and values on hover, events as words, a queued job's backend and
// estimated start, asynqmon's task ids whole. Screenshots go to
// t.TempDir() and, with LATHE_DASHBOARD_SCREENSHOT=path.png, to path.png
// (the overview), path-job.png (the job page), path-420.png and
// path-job-420.png: docs/dashboard*.png come from such a run.
func TestDashboardChromium(t *testing.T) {
	requireTorch(t)
	requireChromium(t)
	lathed, lathe := binaries(t)
	root := repoRoot(t)
	dir := t.TempDir()
	dataDir := t.TempDir()
	cfg := filepath.Join(dir, "lathe.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("jobs:\n  allowed_roots: [%s, %s, %s]\n", dir, dataDir, root)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A dataset the trainer refuses (exit 3: bad data, not retried).
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"text\": \"fine\"}\nthis line is not JSON\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(root, "configs", "examples", "data", "tiny-train.jsonl")

	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--config", cfg, "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", dataDir,
		"--gpus", "simulated:dgxh100", "--node", "sim1")
	// The browser starts while the daemon does.
	b := startBrowser(t)
	waitHTTP(t, base, d)

	// The page is opened once, before any job exists; every job below
	// appears in it by its polls. A reload would drop window.__latheE2E
	// and start a new document with another performance.timeOrigin.
	b.navigate(t, base+"/")
	var loaded float64
	if err := b.exec(`window.__latheE2E = performance.timeOrigin; return window.__latheE2E;`, &loaded); err != nil || loaded == 0 {
		t.Fatalf("set the page's marker: %v (timeOrigin %.1f, want > 0)", err, loaded)
	}
	waitfor.Value(t, 30*time.Second, "the page's first poll", func() string {
		s, err := b.text("#status")
		if err != nil {
			t.Fatalf("read #status: %v", err)
		}
		return s
	}, func(s string) bool { return strings.HasPrefix(s, "updated ") })

	ids := map[string]string{}
	ids["succeeded"] = submitID(t, lathe, base, dashSpec(t, dir, "small-ok", 1, "normal", 60, 20, good))
	ids["failed"] = submitID(t, lathe, base, dashSpec(t, dir, "bad-data", 1, "normal", 60, 20, bad))
	ok := waitJob(t, base, ids["succeeded"], 2*time.Minute, "succeeded", func(j jobtype.Job) bool { return j.State.Terminal() })
	if ok.State != jobtype.StateSucceeded {
		t.Fatalf("job small-ok ended %s (%s), want succeeded", ok.State, ok.Error)
	}
	fail := waitJob(t, base, ids["failed"], 2*time.Minute, "failed", func(j jobtype.Job) bool { return j.State.Terminal() })
	if fail.State != jobtype.StateFailed || fail.Error == "" || fail.Attempt != 1 {
		t.Fatalf("job bad-data ended %s (error %q) after %d attempts, want failed with an error after 1 (exit 3 is not retried)", fail.State, fail.Error, fail.Attempt)
	}
	// Holds every GPU for the rest of the test (stopped at cleanup).
	ids["running"] = submitID(t, lathe, base, dashSpec(t, dir, "eight-gpus", 8, "normal", 50000, 0, good))
	run := waitJob(t, base, ids["running"], time.Minute, "running on 8 GPUs", func(j jobtype.Job) bool {
		return j.State == jobtype.StateRunning && len(j.GPUs) == 8
	})
	ids["queued"] = submitID(t, lathe, base, dashSpec(t, dir, "waits-behind", 1, "batch", 60, 0, good))
	waitJob(t, base, ids["queued"], 30*time.Second, "queued with a place in line and a reason", func(j jobtype.Job) bool {
		return j.State == jobtype.StateQueued && j.Wait != nil && j.Wait.Position == 1 && j.Wait.Reason != ""
	})

	// The queue panel: the API's numbers, with one job in each state.
	ov := checkQueuePanel(t, b, base)
	want := map[jobtype.State]int64{jobtype.StateQueued: 1, jobtype.StateRunning: 1, jobtype.StateSucceeded: 1, jobtype.StateFailed: 1}
	for s, n := range want {
		if ov.Queues.ByState[s] != n {
			t.Errorf("the API's overview counts %d %s jobs, want %d (by_state %v)", ov.Queues.ByState[s], s, n, ov.Queues.ByState)
		}
	}
	if ov.Queues.Pending != 1 || ov.Queues.ByPriority["batch"] != 1 {
		t.Errorf("the API's overview: pending %d, by_priority %v; want pending 1 and one batch job", ov.Queues.Pending, ov.Queues.ByPriority)
	}

	// The jobs table: each job's state, node, GPUs, error, and the queued
	// job's place in line and reason, as the API gives them.
	checkJobsTable(t, b, base, ids)

	// The GPU panel: sim1's 8 simulated GPUs, each showing the job the API
	// says holds it; the running job holds the GPUs its job record lists.
	waitfor.Value(t, 30*time.Second, "the GPU panel to show sim1's GPUs and their jobs as the API does", func() pageAndAPI {
		ov := getOverview(t, base)
		p := readPage(t, b)
		var api []pageGPU
		for _, n := range ov.Nodes {
			if n.Name != "sim1" {
				continue
			}
			for _, g := range n.GPUs {
				api = append(api, pageGPU{Index: strconv.Itoa(g.Index), Job: g.JobID, Label: "GPU " + strconv.Itoa(g.Index)})
			}
		}
		if len(api) == 8 && reflect.DeepEqual(p.Nodes["sim1"], api) && p.Badges["sim1"] == "simulated" {
			return pageAndAPI{}
		}
		return pageAndAPI{page: fmt.Sprintf("%+v badge %q", p.Nodes["sim1"], p.Badges["sim1"]), api: fmt.Sprintf("%+v (want 8 GPUs, badge simulated)", api)}
	}, func(x pageAndAPI) bool { return x == pageAndAPI{} })
	var held []int
	for _, n := range getOverview(t, base).Nodes {
		for _, g := range n.GPUs {
			if g.JobID == ids["running"] {
				held = append(held, g.Index)
			}
		}
	}
	sort.Ints(held)
	gpus := slices.Clone(run.GPUs)
	sort.Ints(gpus)
	if !slices.Equal(held, gpus) || len(held) != 8 {
		t.Errorf("the overview shows job %s on GPUs %v; its record says %v; want the same 8", ids["running"], held, gpus)
	}

	// A job submitted now appears without a reload.
	ids["new"] = submitID(t, lathe, base, dashSpec(t, dir, "submitted-later", 2, "normal", 60, 0, good))
	p := waitfor.Value(t, 30*time.Second, "job submitted-later "+ids["new"]+" in the jobs table", func() pageOverview { return readPage(t, b) },
		func(p pageOverview) bool { _, ok := p.Jobs[ids["new"]]; return ok })
	if p.Marker != loaded || p.TimeOrigin != loaded {
		t.Errorf("the page was reloaded: window.__latheE2E = %.1f, performance.timeOrigin = %.1f; want both %.1f, as at load", p.Marker, p.TimeOrigin, loaded)
	}
	checkQueuePanel(t, b, base)
	checkJobsTable(t, b, base, ids)
	checkRoutingAndSparklines(t, b, base, ids["succeeded"])

	// Issue #26: each GPU tile shows its job, the node its CPU slots, the
	// budgets panel the API's rows; the failed row's error is folded to a
	// line; a sweep's trials show whole ids and each a reason, those its
	// max_parallel holds back included.
	checkTilesSlotsBudgets(t, b, base)
	checkHistoryPanel(t, b, base)
	checkFoldedError(t, b, ids["failed"], fail.Error)
	sweepID, trials := submitGatedSweep(t, lathe, base, dir, good)
	checkTrialRows(t, b, base, sweepID, trials)
	checkNoSideScroll(t, b, browserWidth)
	b.screenshot(t, shotPaths(t, "dashboard.png", "")...)

	// The succeeded job's page: its loss curve has one point per progress
	// event with a loss, from the first step to the last, its text at
	// least minChartTextPx on screen, at 1600 and at 420 px; its events
	// rows of words.
	var steps []int
	for _, e := range events(t, base, ids["succeeded"]) {
		var pd struct {
			Step int      `json:"step"`
			Loss *float64 `json:"loss"`
		}
		if e.Type == "progress" && json.Unmarshal(e.Data, &pd) == nil && pd.Loss != nil {
			steps = append(steps, pd.Step)
		}
	}
	if len(steps) < 2 {
		t.Fatalf("job small-ok has %d progress events with a loss; want several", len(steps))
	}
	b.resize(t, browserWidth, 1000)
	b.navigate(t, base+"/jobs/"+ids["succeeded"])
	checkLossChart(t, b, steps)
	if s, err := b.text("#job-facts [data-fact=state] .v"); err != nil || s != "succeeded" {
		t.Errorf("job page's state: %q (%v), want succeeded", s, err)
	}
	checkEventRows(t, b)
	b.screenshot(t, shotPaths(t, "dashboard-job.png", "-job")...)
	b.resize(t, 420, 1000)
	checkLossChart(t, b, steps)
	checkEventRows(t, b)
	b.screenshot(t, shotPaths(t, "dashboard-job-420.png", "-job-420")...)

	// A queued job's page: its backend and estimated start.
	checkQueuedJobPage(t, b, base, ids["queued"])
	// asynqmon shows the running attempt's task id whole.
	checkAsynqmonTaskID(t, b, base, jobtype.TaskID(ids["running"], run.Attempt))

	// The overview at 420 px: nothing wider than the window.
	b.resize(t, 420, 1000)
	b.navigate(t, base+"/")
	waitfor.Value(t, 30*time.Second, "the page's first poll at 420 px", func() string {
		s, err := b.text("#status")
		if err != nil {
			t.Fatalf("read #status: %v", err)
		}
		return s
	}, func(s string) bool { return strings.HasPrefix(s, "updated ") })
	checkTrialRows(t, b, base, sweepID, trials)
	checkNoSideScroll(t, b, 420)
	b.screenshot(t, shotPaths(t, "dashboard-420.png", "-420")...)

	// Credentials in the page's address: the page says why it shows nothing.
	checkCredentialsInURL(t, b, base)
}

// shotPaths is where a screenshot goes: t.TempDir(), and next to
// $LATHE_DASHBOARD_SCREENSHOT (with suffix before its extension) when set.
func shotPaths(t *testing.T, name, suffix string) []string {
	ps := []string{filepath.Join(t.TempDir(), name)}
	if p := os.Getenv("LATHE_DASHBOARD_SCREENSHOT"); p != "" {
		ext := filepath.Ext(p)
		ps = append(ps, strings.TrimSuffix(p, ext)+suffix+ext)
	}
	return ps
}
