package scheduler_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// overviewBundle is a scheduler (its API only: no placer runs, so jobs stay
// where the test puts them) over a real redis-server holding jobs of two
// teams in several states, written through the store as the placer and
// the workers would: queued (with places in line), dispatched, running on
// GPUs with progress, a cloud job with a live instance, succeeded, failed.
type overviewBundle struct {
	bundle
	ids map[string]string // test name → job id
}

var overviewTokens = []plane.Token{
	{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"},
	{Name: "view-a", Secret: "viewer-a-secret-0123456789", Role: plane.RoleViewer, Team: "a"},
	{Name: "view-b", Secret: "viewer-b-secret-0123456789", Role: plane.RoleViewer, Team: "b"},
}

func overviewSetup(t *testing.T) overviewBundle {
	t.Helper()
	cfg, err := routecfg.ParseConfig([]byte(strings.Replace(routeConfig, "    region: eu-central-1\n", "    region: eu-central-1\n    budget_usd_per_month: 500\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	b := overviewBundle{bundle: setup(t, scheduler.Config{Routing: cfg}, api.Config{Tokens: overviewTokens}), ids: map[string]string{}}
	ctx, s := b.ctx, b.store
	beat := func(n jobstore.Node) {
		if err := s.Heartbeat(ctx, n, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
			t.Fatal(err)
		}
	}
	beat(jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 2, GPUs: []jobtype.GPU{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559, MemoryUsedMB: 40000, UtilizationPct: 97},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559, MemoryUsedMB: 39000, UtilizationPct: 95},
		{Index: 2, UUID: "GPU-c", Name: "NVIDIA H100 80GB HBM3", Healthy: false, Unhealthy: "XID 79: GPU fell off the bus"},
		{Index: 3, UUID: "GPU-d", Name: "NVIDIA H100 80GB HBM3", Healthy: true},
	}})
	beat(jobstore.Node{Name: "n2", Incarnation: "i2", Backend: "local", Slots: 1, Simulated: true,
		GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-sim-0", Name: "NVIDIA H100 80GB HBM3", Healthy: true, Simulated: true}}})
	local := &jobtype.RouteInfo{Backend: "local", Site: "dc-frankfurt", Kind: routecfg.KindLocal, Attempt: 1}
	cloud := &jobtype.RouteInfo{Backend: "aws-eu", Site: "aws-eu-central-1", Kind: routecfg.KindAWS, Attempt: 1}
	mk := func(name, team string, prio jobspec.Priority, route *jobtype.RouteInfo) string {
		spec := &jobspec.Spec{Name: name, BaseModel: "tiny-char", Dataset: "file:///d/t.jsonl", Priority: prio, Trainer: "reference"}
		if name == "run-a" {
			spec.Resources.GPUs = 2 // it holds GPUs 0 and 1 (below): its cost accrues at 2 × the price
		}
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec, Team: team, Route: route})
		if err != nil {
			t.Fatal(err)
		}
		b.ids[name] = j.ID
		return j.ID
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	qa1 := mk("qa1", "a", jobspec.PriorityUrgent, local)
	mk("qa2", "a", jobspec.PriorityNormal, local)
	qb := mk("qb", "b", jobspec.PriorityBatch, local)
	qbc := mk("qb-cloud", "b", jobspec.PriorityNormal, cloud)
	run := mk("run-a", "a", jobspec.PriorityNormal, local)
	must(s.Dispatch(ctx, jobstore.DispatchParams{JobID: run, Attempt: 1, Node: "n1", Backend: "local", Capacity: 2, GPUs: []int{0, 1}}))
	_, err = s.Claim(ctx, jobstore.ClaimParams{ID: run, Attempt: 1, Node: "n1", Incarnation: "i1", Lease: time.Hour})
	must(err)
	pb, _ := json.Marshal(jobtype.Progress{Step: 40, TotalSteps: 120, Loss: 1.93})
	_, err = s.Append(ctx, run, 1, []jobstore.EventIn{{Type: jobtype.EventProgress, Data: pb, Field: "progress", Value: string(pb)}})
	must(err)
	disp := mk("disp-b", "b", jobspec.PriorityNormal, local)
	must(s.Dispatch(ctx, jobstore.DispatchParams{JobID: disp, Attempt: 1, Node: "n1", Backend: "local", Capacity: 2, GPUs: []int{3}}))
	cl := mk("cloud-b", "b", jobspec.PriorityNormal, cloud)
	node := jobtype.CloudNode("aws-eu")
	must(s.Dispatch(ctx, jobstore.DispatchParams{JobID: cl, Attempt: 1, Node: node, Backend: "aws-eu", Capacity: 100}))
	_, err = s.ClaimCloud(ctx, jobstore.ClaimParams{ID: cl, Attempt: 1, Node: node, Incarnation: "inc", Lease: time.Hour})
	must(err)
	must(s.RecordInstance(ctx, cl, 1, &jobtype.Instance{ID: "i-1", Attempt: 1, Backend: "aws-eu", Type: "g6e.xlarge", Market: "on-demand",
		LaunchTime: time.Now().Add(-time.Hour), USDPerHour: 1.86}))
	for name, st := range map[string]jobtype.State{"done-a": jobtype.StateSucceeded, "failed-b": jobtype.StateFailed} {
		id := mk(name, map[string]string{"done-a": "a", "failed-b": "b"}[name], jobspec.PriorityNormal, local)
		must(s.Dispatch(ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n2", Backend: "local", Capacity: 1}))
		must(s.Finish(ctx, id, 1, jobstore.Ending{State: st, Reason: "exit"}))
	}
	month := jobstore.Month(time.Now())
	must(s.Reserve(ctx, cl, month, 3.5, []jobstore.BudgetScope{{Scope: "backend:aws-eu"}}))
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	must(s.SetWaits(ctx, map[string]jobtype.WaitInfo{
		qb:  {Position: 1, EstimatedStart: &at, Code: "no_fit", Reason: "needs 8 GPUs, 1 free", At: time.Now().UTC()},
		qa1: {Position: 2, Code: "behind", Reason: "behind 1 job", At: time.Now().UTC()},
		qbc: {Position: 3, Code: "cloud", Reason: "provisioning", At: time.Now().UTC()},
	}))
	return b
}

// get GETs path with token secret and decodes the 200 answer into out.
func (b overviewBundle) get(t *testing.T, secret, path string, out any) {
	t.Helper()
	code, body := do(t, "GET", b.url+path, "", map[string]string{"Authorization": "Bearer " + secret})
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// TestOverviewAgreesWithTheAPI: for an admin, the overview's numbers are
// those GET /api/v1/queues, /gpus, /jobs and /budgets give.
func TestOverviewAgreesWithTheAPI(t *testing.T) {
	b := overviewSetup(t)
	const admin = "admin-secret-0123456789"
	var ov wire.Overview
	b.get(t, admin, "/api/v1/overview", &ov)
	var q wire.QueueStats
	b.get(t, admin, "/api/v1/queues", &q)
	if ov.Team != "" || ov.Queues.Pending != q.Pending || fmt.Sprint(ov.Queues.ByState) != fmt.Sprint(q.ByState) ||
		fmt.Sprint(ov.Queues.Queues) != fmt.Sprint(q.Queues) {
		t.Errorf("queues: overview %+v, /queues %+v", ov.Queues, q)
	}
	want := map[jobtype.State]int64{jobtype.StateQueued: 4, jobtype.StateRunning: 1, jobtype.StateDispatched: 1,
		jobtype.StateProvisioning: 1, jobtype.StateSucceeded: 1, jobtype.StateFailed: 1}
	for st, n := range want {
		if ov.Queues.ByState[st] != n {
			t.Errorf("by_state[%s] = %d, want %d", st, ov.Queues.ByState[st], n)
		}
	}
	if fmt.Sprint(ov.Queues.ByPriority) != "map[batch:1 normal:2 urgent:1]" || ov.Queues.Burst != 2 ||
		ov.Queues.OldestJob != b.ids["qa1"] || ov.Queues.OldestWaitS <= 0 || ov.Queues.OldestWaitS > 60 {
		t.Errorf("priority %v, burst %d (want 2: the queued and the provisioning cloud job), oldest %s %.1fs",
			ov.Queues.ByPriority, ov.Queues.Burst, ov.Queues.OldestJob, ov.Queues.OldestWaitS)
	}
	checkRunning(t, b, admin, ov)
	checkNodes(t, b, admin, ov, true)
	checkCloud(t, b, admin, ov)
	var order []string
	for _, w := range ov.Waiting {
		order = append(order, w.Name)
	}
	if fmt.Sprint(order) != "[qb qa1 qb-cloud qa2]" || ov.Waiting[0].Wait == nil || ov.Waiting[0].Wait.EstimatedStart == nil ||
		ov.Waiting[0].Wait.Reason != "needs 8 GPUs, 1 free" || ov.Waiting[3].Wait != nil || ov.Waiting[0].Priority != "batch" {
		t.Errorf("waiting %s: %+v", order, ov.Waiting)
	}
}

// checkRunning: the running jobs are /jobs' dispatched, provisioning and
// running jobs, with their progress and cost so far.
func checkRunning(t *testing.T, b overviewBundle, secret string, ov wire.Overview) {
	t.Helper()
	want := map[string]jobtype.Job{}
	for _, st := range []jobtype.State{jobtype.StateDispatched, jobtype.StateProvisioning, jobtype.StateRunning} {
		var l wire.JobList
		b.get(t, secret, "/api/v1/jobs?state="+string(st), &l)
		for _, j := range l.Jobs {
			want[j.ID] = *j
		}
	}
	if len(ov.Running) != len(want) {
		t.Fatalf("running %+v, want the %d jobs of /jobs", ov.Running, len(want))
	}
	for _, r := range ov.Running {
		j, ok := want[r.ID]
		if !ok || r.State != j.State || r.Node != j.Node || fmt.Sprint(r.GPUs) != fmt.Sprint(orEmpty(j.GPUs)) ||
			r.Step != j.Progress.Step || r.TotalSteps != j.Progress.TotalSteps || r.Loss != j.Progress.Loss {
			t.Errorf("running %+v, /jobs %+v", r, j)
		}
		switch r.Name {
		case "run-a":
			if r.Step != 40 || r.TotalSteps != 120 || r.Loss != 1.93 || fmt.Sprint(r.GPUs) != "[0 1]" || r.StartedAt == nil {
				t.Fatalf("run-a: %+v", r)
			}
			// Its cost accrues while it runs: 2 GPUs × $1.10 an hour
			// (the local backend's price) since it started, though
			// nothing is settled yet (cost_usd 0), in the overview and in
			// GET /api/v1/jobs/{id}.
			var got jobtype.Job
			b.get(t, secret, "/api/v1/jobs/"+r.ID, &got)
			most := 2 * 1.10 * time.Since(*r.StartedAt).Hours()
			if r.CostUSD <= 0 || r.CostUSD > most || got.CostNowUSD < r.CostUSD || got.CostNowUSD > most || got.CostUSD != 0 {
				t.Errorf("run-a's cost so far: overview $%g, job cost_now_usd $%g cost_usd $%g; want above 0, at most $%g",
					r.CostUSD, got.CostNowUSD, got.CostUSD, most)
			}
		case "cloud-b":
			if math.Abs(r.CostUSD-1.86) > 0.05 { // an hour of a 1.86 $/h instance
				t.Errorf("cloud-b cost so far %.3f, want about 1.86", r.CostUSD)
			}
		}
	}
}

func orEmpty(g []int) []int {
	if g == nil {
		return []int{}
	}
	return g
}

// checkNodes: the nodes' GPUs are /gpus' GPUs (a job id shown only when
// showAll, or when it is the reader's team's).
func checkNodes(t *testing.T, b overviewBundle, secret string, ov wire.Overview, showAll bool) {
	t.Helper()
	var gl wire.GPUList
	b.get(t, secret, "/api/v1/gpus", &gl)
	var got []jobtype.GPU
	for _, n := range ov.Nodes {
		for _, g := range n.GPUs {
			if g.Busy != (g.JobID != "" || !showAll && g.Node == "n1" && g.Index == 3) {
				t.Errorf("GPU %s/%d: busy %v, job %q", g.Node, g.Index, g.Busy, g.JobID)
			}
			got = append(got, g.GPU)
		}
	}
	if len(ov.Nodes) != 2 || ov.Nodes[0].Name != "n1" || !ov.Nodes[1].Simulated || len(got) != len(gl.GPUs) {
		t.Fatalf("nodes %+v, /gpus %+v", ov.Nodes, gl.GPUs)
	}
	for i, g := range got {
		w := gl.GPUs[i]
		if !showAll && w.JobID == b.ids["disp-b"] {
			w.JobID = "" // another team's job: hidden
		}
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("GPU %d: overview %+v, /gpus %+v", i, g, w)
		}
	}
}

// checkCloud: the live instance and its price, and the month's spend
// and budget of /budgets' backend:aws-eu row.
func checkCloud(t *testing.T, b overviewBundle, secret string, ov wire.Overview) {
	t.Helper()
	var bu wire.Budgets
	b.get(t, secret, "/api/v1/budgets", &bu)
	var row wire.BudgetRow
	for _, r := range bu.Scopes {
		if r.Scope == "backend:aws-eu" {
			row = r
		}
	}
	if len(ov.Cloud.Backends) != 1 {
		t.Fatalf("cloud %+v", ov.Cloud)
	}
	c := ov.Cloud.Backends[0]
	if c.Name != "aws-eu" || c.Instances != 1 || c.USDPerHour != 1.86 || ov.Cloud.USDPerHour != 1.86 || c.Month != bu.Month ||
		c.SpentUSD != row.SpentUSD || c.ReservedUSD != row.ReservedUSD || c.ReservedUSD != 3.5 || c.LimitUSD != row.LimitUSD || c.LimitUSD != 500 {
		t.Errorf("cloud %+v, /budgets row %+v", ov.Cloud, row)
	}
}

// TestOverviewTeamFilter: a team's viewer sees its team's jobs only, in
// every count and list, and asynq's all-teams queue counts not at all.
func TestOverviewTeamFilter(t *testing.T) {
	b := overviewSetup(t)
	const viewA = "viewer-a-secret-0123456789"
	var ov wire.Overview
	b.get(t, viewA, "/api/v1/overview", &ov)
	q := ov.Queues
	if ov.Team != "a" || q.Pending != 2 || q.ByState[jobtype.StateQueued] != 2 || q.ByState[jobtype.StateRunning] != 1 ||
		q.ByState[jobtype.StateDispatched] != 0 || q.ByState[jobtype.StateProvisioning] != 0 ||
		q.ByState[jobtype.StateSucceeded] != 0 || q.ByState[jobtype.StateFailed] != 0 || q.Burst != 0 ||
		fmt.Sprint(q.ByPriority) != "map[normal:1 urgent:1]" || len(q.Queues) != 0 {
		t.Errorf("team a's queues: %+v", q)
	}
	if len(ov.Running) != 1 || ov.Running[0].Name != "run-a" || len(ov.Waiting) != 2 || ov.Waiting[0].Name != "qa1" ||
		ov.Waiting[0].Wait == nil || ov.Waiting[0].Wait.Position != 2 {
		t.Errorf("team a's jobs: running %+v, waiting %+v", ov.Running, ov.Waiting)
	}
	checkRunning(t, b, viewA, ov)
	checkNodes(t, b, viewA, ov, false)
	if ov.Cloud.USDPerHour != 0 || len(ov.Cloud.Backends) != 1 || ov.Cloud.Backends[0].Instances != 0 {
		t.Errorf("team a runs no instance: %+v", ov.Cloud)
	}
	var ovB wire.Overview
	b.get(t, "viewer-b-secret-0123456789", "/api/v1/overview", &ovB)
	if ovB.Queues.Burst != 2 || ovB.Queues.OldestJob != b.ids["qb"] || len(ovB.Running) != 2 || ovB.Cloud.USDPerHour != 1.86 {
		t.Errorf("team b: %+v", ovB)
	}
	if code, _ := do(t, "GET", b.url+"/api/v1/overview", "", nil); code != 401 {
		t.Errorf("overview without a token: %d, want 401", code)
	}
}

// TestOverviewWaitingPage: waiting_limit answers the first waiting jobs in
// line, in the order of the whole list, and waiting_total counts them all
// (a team's viewer: its team's); the counts do not depend on it; a limit
// out of 0–1000 is a 400. The jobs list carries each listed queued job's
// wait, as GET /api/v1/jobs/{id} does (the dashboard's jobs table shows
// it; it asks the overview for no waiting rows).
func TestOverviewWaitingPage(t *testing.T) {
	b := overviewSetup(t)
	const admin = "admin-secret-0123456789"
	var all wire.Overview
	b.get(t, admin, "/api/v1/overview", &all)
	if all.WaitingTotal != 4 || len(all.Waiting) != 4 {
		t.Fatalf("default page: %d rows, total %d; want all 4", len(all.Waiting), all.WaitingTotal)
	}
	for _, limit := range []int{0, 1, 2, 3, 4, 1000} {
		var ov wire.Overview
		b.get(t, admin, fmt.Sprintf("/api/v1/overview?waiting_limit=%d", limit), &ov)
		n := min(limit, 4)
		got, want := ov.Queues, all.Queues
		got.OldestWaitS, want.OldestWaitS = 0, 0 // a later read
		if ov.WaitingTotal != 4 || len(ov.Waiting) != n || string(mustJSON(t, ov.Waiting)) != string(mustJSON(t, all.Waiting[:n])) ||
			fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("waiting_limit=%d: rows %+v total %d, queues %+v; want the first %d of %+v, total 4, queues %+v",
				limit, ov.Waiting, ov.WaitingTotal, ov.Queues, n, all.Waiting, all.Queues)
		}
	}
	var a wire.Overview
	b.get(t, "viewer-a-secret-0123456789", "/api/v1/overview?waiting_limit=1", &a)
	if a.WaitingTotal != 2 || len(a.Waiting) != 1 || a.Waiting[0].Name != "qa1" {
		t.Errorf("team a, waiting_limit=1: %+v, total %d; want qa1 of 2", a.Waiting, a.WaitingTotal)
	}
	for _, v := range []string{"-1", "1001", "x", ""} {
		code, body := do(t, "GET", b.url+"/api/v1/overview?waiting_limit="+v, "", map[string]string{"Authorization": "Bearer " + admin})
		if want := map[bool]int{true: 200, false: 400}[v == ""]; code != want {
			t.Errorf("waiting_limit=%q: %d %s, want %d", v, code, body, want)
		}
	}
	var l wire.JobList
	b.get(t, admin, "/api/v1/jobs?state=queued", &l)
	for _, j := range l.Jobs {
		var one jobtype.Job
		b.get(t, admin, "/api/v1/jobs/"+j.ID, &one)
		if string(mustJSON(t, j.Wait)) != string(mustJSON(t, one.Wait)) || (j.Name == "qb") != (j.Wait != nil && j.Wait.Position == 1) {
			t.Errorf("job %s (%s) listed with wait %+v; GET /jobs/{id} says %+v", j.ID, j.Name, j.Wait, one.Wait)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOverviewLossSeries: each running job's loss_series is its store's
// downsampled series (jobstore.AddLossPoint over every progress update
// recorded) plus its latest progress; a job without progress has []; a
// team's viewer gets its team's series only.
func TestOverviewLossSeries(t *testing.T) {
	b := overviewSetup(t)
	run := b.ids["run-a"]
	want := jobstore.AddLossPoint(nil, 40, 1.93) // overviewSetup's one update
	for step := 41; step <= 400; step++ {
		p := jobtype.Progress{Step: step, TotalSteps: 400, Loss: 2 - float64(step)/1000}
		want = jobstore.AddLossPoint(want, p.Step, p.Loss)
		ev := jobstore.EventIn{Type: jobtype.EventProgress, Data: json.RawMessage(`{}`)}.WithProgress(p)
		if _, err := b.store.Append(b.ctx, run, 1, []jobstore.EventIn{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if last := want[len(want)-1]; last.Step() != 400 {
		want = append(want, jobtype.LossPoint{400, 2 - 0.4}) // the latest progress, past the last kept point
	}
	const admin, viewA, viewB = "admin-secret-0123456789", "viewer-a-secret-0123456789", "viewer-b-secret-0123456789"
	for _, secret := range []string{admin, viewA} {
		var ov wire.Overview
		b.get(t, secret, "/api/v1/overview", &ov)
		seen := false
		for _, r := range ov.Running {
			switch {
			case r.ID == run:
				seen = true
				if len(r.LossSeries) > jobstore.LossSeriesMax+1 || fmt.Sprint(r.LossSeries) != fmt.Sprint(want) {
					t.Errorf("run-a's loss series %v,\nwant %v", r.LossSeries, want)
				}
			case r.LossSeries == nil || len(r.LossSeries) != 0:
				t.Errorf("%s has no progress; series %#v, want []", r.Name, r.LossSeries)
			}
		}
		if !seen {
			t.Fatalf("run-a not among the running jobs: %+v", ov.Running)
		}
	}
	var ovB wire.Overview
	b.get(t, viewB, "/api/v1/overview", &ovB)
	for _, r := range ovB.Running {
		if r.ID == run || len(r.LossSeries) != 0 {
			t.Errorf("team b's overview shows %s with series %v", r.Name, r.LossSeries)
		}
	}
	// Finished, the job's series is in the jobs list, for its team.
	if err := b.store.Finish(b.ctx, run, 1, jobstore.Ending{State: jobtype.StateSucceeded, Reason: "exit"}); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{admin, viewA, viewB} {
		var l wire.JobList
		b.get(t, secret, "/api/v1/jobs?limit=200&loss_series=true", &l)
		got, ok := l.LossSeries[run]
		if secret == viewB {
			if ok || len(l.LossSeries) != 0 {
				t.Errorf("team b's list has loss series %v", l.LossSeries)
			}
			continue
		}
		if len(l.LossSeries) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("list's loss series %v (want only run-a's %v)", l.LossSeries, want)
		}
	}
	var plain map[string]any
	b.get(t, admin, "/api/v1/jobs?limit=200", &plain)
	if _, ok := plain["loss_series"]; ok {
		t.Errorf("a list without loss_series=true carries them")
	}
	code, body := do(t, "GET", b.url+"/api/v1/jobs?loss_series=1", "", map[string]string{"Authorization": "Bearer " + admin})
	if code != 400 || !strings.Contains(string(body), `"field":"loss_series","value":"1"`) {
		t.Errorf("loss_series=1: %d %s, want 400 naming it", code, body)
	}
}
