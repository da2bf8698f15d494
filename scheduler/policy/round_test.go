package policy

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// TestDecideRoundIsPure runs a placement round's decision without Redis:
// one node of 2 GPUs held in part by a running job, and queued jobs that
// need no new routing decision, one that does (a retry), one held, and
// one too big to fit. The plan re-routes the retry, places what fits,
// names the held job, and counts the pool's pressure.
func TestDecideRoundIsPure(t *testing.T) {
	rc, err := routecfg.ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := NewRouteState(rc)
	local := ""
	for _, b := range rc.Backends {
		if b.Kind == routecfg.KindLocal {
			local = b.Name
		}
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	route := func(attempt int) *jobtype.RouteInfo {
		return &jobtype.RouteInfo{Backend: local, Kind: routecfg.KindLocal, Attempt: attempt, ConfigHash: rs.Hash, DecidedAt: now}
	}
	job := func(id string, gpus, attempt int, r *jobtype.RouteInfo) *jobtype.Job {
		return &jobtype.Job{ID: id, State: jobtype.StateQueued, Attempt: attempt, Route: r, UpdatedAt: now,
			Spec: jobspec.Spec{Name: id, BaseModel: "tiny-char", Trainer: "reference", Resources: jobspec.Resources{GPUs: gpus},
				MaxRuntime: jobspec.Duration(time.Hour)}}
	}
	started := now.Add(-30 * time.Minute)
	running := job("run", 1, 1, route(1))
	running.State, running.StartedAt = jobtype.StateRunning, &started
	held := job("held", 1, 1, route(1))
	held.Held = "held by hand"
	jobs := map[string]*jobtype.Job{
		"fits":  job("fits", 1, 1, route(1)),
		"retry": job("retry", 0, 2, route(1)), // its route is attempt 1's: decided again
		"held":  held,
		"big":   job("big", 2, 1, route(1)),
		"run":   running,
	}
	gpus := []jobtype.GPU{{Index: 0, UUID: "G0", Name: "NVIDIA H100", MemoryTotalMB: 81920, Healthy: true},
		{Index: 1, UUID: "G1", Name: "NVIDIA H100", MemoryTotalMB: 81920, Healthy: true}}
	nodes := []poolstate.NodeStatus{{Node: poolstate.Node{Name: "n1", Backend: "local", Slots: 2, GPUs: gpus},
		Reservations: map[string]poolstate.Reservation{"run": {GPUs: []int{0}}}, Reserved: 1}}
	in := &RoundInput{Now: now, Nodes: nodes, Pending: []string{"fits", "retry", "held", "big", "gone"}, Jobs: jobs,
		Routing: RoutingInput{Now: now, Nodes: nodes, Spends: map[string]poolstate.Spend{}, StepTimes: map[string]float64{}}}

	plan := DecideRound(in, rs, RoundOptions{DefaultMaxRuntime: 24 * time.Hour})

	if len(plan.Reroutes) != 1 || plan.Reroutes[0].Job.ID != "retry" || plan.Reroutes[0].Path != "retry" {
		t.Fatalf("reroutes = %+v, want the retry alone", plan.Reroutes)
	}
	if rp := plan.Reroutes[0]; rp.Route == nil || rp.Route.Attempt != 2 || rp.Held != "" || rp.RoutingJob.ID != "retry" || rp.Snapshot.Config.Hash() != rs.Hash {
		t.Fatalf("retry's plan = %+v, want a route for attempt 2 with the job and snapshot it was decided on", rp)
	}
	if jobs["retry"].Route.Attempt != 1 {
		t.Fatal("the decision changed its input")
	}
	assigned := map[string]bool{}
	for _, a := range plan.Place.Assign {
		assigned[a.JobID] = true
	}
	if !assigned["fits"] || !assigned["retry"] || assigned["big"] || assigned["held"] {
		t.Fatalf("assignments = %+v, want fits and retry only", plan.Place.Assign)
	}
	if len(plan.OffWaits) != 1 || plan.OffWaits[0].ID != "held" || plan.OffWaits[0].Code != "held" {
		t.Fatalf("offWaits = %+v, want the held job", plan.OffWaits)
	}
	if plan.Pressure.HealthyGPUs != 2 || plan.Pressure.RunningGPUHours <= 0 || len(plan.Pressure.Capacity) != 1 {
		t.Fatalf("pressure = %+v", plan.Pressure)
	}
	if again := DecideRound(in, rs, RoundOptions{DefaultMaxRuntime: 24 * time.Hour}); len(again.Place.Assign) != len(plan.Place.Assign) {
		t.Fatal("the same input decided differently")
	}
}

// TestDecideRoundCountsAHeldReservationOnce re-routes two retries to a
// priced cloud backend in one round. The first already holds its budget
// reservation (Reserve will be a no-op for it), and the spends read count
// it: the round must not count it a second time, or the second retry would
// be refused a budget that has room for it.
func TestDecideRoundCountsAHeldReservationOnce(t *testing.T) {
	rs, now, job := cloudRetries(t, 4)
	holder, second := job("holder"), job("second")
	in := &RoundInput{Now: now, Pending: []string{"holder", "second"}, Jobs: map[string]*jobtype.Job{"holder": holder, "second": second},
		Routing: RoutingInput{Now: now, StepTimes: map[string]float64{}, Spends: map[string]poolstate.Spend{}}}
	estimate := DecideRoute(holder, "retry", rs, Snapshot(rs, Assumptions{}, in.Routing), now).Decision.EstCostUSD
	if estimate <= 0 || 3*estimate <= 4 || 2*estimate > 4 {
		t.Fatalf("estimate %.2f: the test needs 2 estimates to fit the $4 budget and 3 not to", estimate)
	}
	// The holder's reservation is in the spends read, and on its record.
	holder.BudgetReservedUSD = estimate
	in.Routing.Spends["backend:aws-eu"] = poolstate.Spend{ReservedUSD: estimate}

	plan := DecideRound(in, rs, RoundOptions{DefaultMaxRuntime: 24 * time.Hour})

	if len(plan.Reroutes) != 2 {
		t.Fatalf("reroutes = %+v, want both retries", plan.Reroutes)
	}
	for _, rp := range plan.Reroutes {
		if rp.Held != "" || rp.Decision.Refused {
			t.Fatalf("%s: refused (%s; %v): its reservation was counted twice", rp.Job.ID, rp.Held, rp.Decision.Reasons)
		}
	}
}

// TestDecideRoundKeepsEachDecisionsSnapshot re-routes two retries to a
// priced cloud backend, neither holding a reservation yet: the second
// decision sees the first one's reservation, and each Reroute keeps the
// spends its own decision saw (what its ledger record says), not the
// round's last.
func TestDecideRoundKeepsEachDecisionsSnapshot(t *testing.T) {
	rs, now, job := cloudRetries(t, 100)
	in := &RoundInput{Now: now, Pending: []string{"a", "b"}, Jobs: map[string]*jobtype.Job{"a": job("a"), "b": job("b")},
		Routing: RoutingInput{Now: now, StepTimes: map[string]float64{}, Spends: map[string]poolstate.Spend{}}}

	plan := DecideRound(in, rs, RoundOptions{DefaultMaxRuntime: 24 * time.Hour})

	if len(plan.Reroutes) != 2 || !plan.Reroutes[0].Reserve {
		t.Fatalf("reroutes = %+v, want both retries, the first reserving", plan.Reroutes)
	}
	first, second := plan.Reroutes[0], plan.Reroutes[1]
	if got := first.Snapshot.BackendSpend["aws-eu"].ReservedUSD; got != 0 {
		t.Fatalf("the first decision's snapshot shows $%.2f reserved, want 0 (as it decided)", got)
	}
	if got, want := second.Snapshot.BackendSpend["aws-eu"].ReservedUSD, first.Decision.EstCostUSD; got != want || want <= 0 {
		t.Fatalf("the second decision's snapshot shows $%.2f reserved, want the first's $%.2f", got, want)
	}
}

// cloudRetries is the setup of the re-routing tests: one priced AWS backend
// in the EU with a monthly budget of budgetUSD, its route state, a fixed
// now, and a maker of queued retries (attempt 2) last routed there.
func cloudRetries(t *testing.T, budgetUSD int) (*RouteState, time.Time, func(id string) *jobtype.Job) {
	t.Helper()
	rc, err := routecfg.ParseConfig([]byte(`
sites:
  dc-frankfurt: [onprem, eu]
  aws-eu-central-1: [cloud, eu]
redis_site: dc-frankfurt
backends:
  aws-eu:
    kind: aws
    site: aws-eu-central-1
    region: eu-central-1
    checkpoint_uri: s3://lathe-eu-ckpt/
    budget_usd_per_month: ` + strconv.Itoa(budgetUSD) + `
    instance_types:
      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.5}
datasets:
  buckets: {lathe-eu-ckpt: aws-eu-central-1, lathe-eu-data: aws-eu-central-1}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs := NewRouteState(rc)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	job := func(id string) *jobtype.Job {
		return &jobtype.Job{ID: id, State: jobtype.StateQueued, Attempt: 2, UpdatedAt: now, OutputURI: "s3://lathe-eu-ckpt/out/" + id,
			Route: &jobtype.RouteInfo{Backend: "aws-eu", Kind: routecfg.KindAWS, Attempt: 1, ConfigHash: rs.Hash, DecidedAt: now},
			Spec: jobspec.Spec{Name: id, BaseModel: "tiny-char", Trainer: "reference", Residency: []string{"eu"},
				Dataset: "s3://lathe-eu-data/train.jsonl", Resources: jobspec.Resources{GPUs: 1},
				ExpectedRuntime: jobspec.Duration(time.Hour), MaxRuntime: jobspec.Duration(time.Hour),
				Output: jobspec.Output{URI: "s3://lathe-eu-ckpt/out"}}}
	}
	return rs, now, job
}

// TestEarlySpillOver: a local job the last round expected to start past
// its max_wait is decided again now (a spill-over, recorded as one) and
// bursts to the cloud, rather than waiting its max_wait first; one
// expected within its max_wait, or with no start known, is left alone;
// and with no cloud backend nothing is decided at all (no record).
func TestEarlySpillOver(t *testing.T) {
	raw, err := os.ReadFile("../../configs/simulate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := routecfg.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	queued := now.Add(-10 * time.Minute)
	job := func(id string, rs *RouteState) *jobtype.Job {
		return &jobtype.Job{ID: id, State: jobtype.StateQueued, Attempt: 1, CreatedAt: queued, UpdatedAt: queued,
			Route: &jobtype.RouteInfo{Backend: "owned", Kind: routecfg.KindLocal, Attempt: 1, ConfigHash: rs.Hash, DecidedAt: queued},
			Spec: jobspec.Spec{Name: id, Resources: jobspec.Resources{GPUs: 1}, Residency: []string{"eu"},
				MaxWait: jobspec.Duration(2 * time.Hour), ExpectedRuntime: jobspec.Duration(time.Hour), MaxRuntime: jobspec.Duration(time.Hour),
				Output: jobspec.Output{URI: "s3://sim-eu-ckpt/out"}}}
	}
	gpus := []jobtype.GPU{{Index: 0, UUID: "G0", Name: "NVIDIA H100", MemoryTotalMB: 81920, Healthy: true}}
	nodes := []poolstate.NodeStatus{{Node: poolstate.Node{Name: "n1", Backend: "local", Slots: 1, GPUs: gpus},
		Reservations: map[string]poolstate.Reservation{"run": {GPUs: []int{0}}}, Reserved: 1}}
	for _, b := range rc.Backends {
		if b.Kind != routecfg.KindLocal { // its AWS worker is live
			nodes = append(nodes, poolstate.NodeStatus{Node: poolstate.Node{Name: jobtype.CloudNode(b.Name), Backend: b.Kind}})
		}
	}
	round := func(rs *RouteState) RoundPlan {
		jobs := map[string]*jobtype.Job{"late": job("late", rs), "soon": job("soon", rs), "unknown": job("unknown", rs)}
		started := now.Add(-time.Hour)
		jobs["run"] = job("run", rs)
		jobs["run"].State, jobs["run"].StartedAt = jobtype.StateRunning, &started
		in := &RoundInput{Now: now, Nodes: nodes, Pending: []string{"late", "soon", "unknown"}, Jobs: jobs,
			Routing: RoutingInput{Now: now, Nodes: nodes, Spends: map[string]poolstate.Spend{}},
			// late: 3h from now, past its deadline (queued + 2h); soon: within it.
			Starts: map[string]time.Time{"late": now.Add(3 * time.Hour), "soon": now.Add(time.Hour)}}
		return DecideRound(in, rs, RoundOptions{DefaultMaxRuntime: 24 * time.Hour})
	}
	plan := round(NewRouteState(rc))
	if len(plan.Reroutes) != 1 {
		t.Fatalf("reroutes %+v; want late's alone", plan.Reroutes)
	}
	rp := plan.Reroutes[0]
	if rp.Job.ID != "late" || rp.Path != "spill-over" || rp.Route == nil || rp.Route.Kind == routecfg.KindLocal || rp.RoutingJob.StartIn == nil {
		t.Fatalf("late's reroute %+v (route %+v); want a spill-over to the cloud that counts its own start", rp, rp.Route)
	}
	if len(plan.Cloud) != 1 || plan.Cloud[0].Job.ID != "late" {
		t.Errorf("cloud dispatches %+v; want late", plan.Cloud)
	}
	// No cloud backend: nothing to burst to, no decision recorded.
	var local routecfg.Config = rc
	local.Backends = nil
	for _, b := range rc.Backends {
		if b.Kind == routecfg.KindLocal {
			local.Backends = append(local.Backends, b)
		}
	}
	if plan := round(NewRouteState(local)); len(plan.Reroutes) != 0 {
		t.Errorf("no cloud backend: reroutes %+v; want none", plan.Reroutes)
	}
}

// TestDecideRoundRedecidesBudgetHeldJobs: a job held because its budget
// reservation was refused is decided again (path "budget") by the first
// round after money was freed: its held epoch (the month and how many
// settlements freed money in it, jobstore.BudgetEpoch) differs from the
// round's, after a settlement (a job that ended or was cancelled) or when
// the month rolls over. While the epoch stands it stays held and is not
// decided again. A routing config reload decides it again too (path
// "config reload").
func TestDecideRoundRedecidesBudgetHeldJobs(t *testing.T) {
	rc, err := routecfg.ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := NewRouteState(rc)
	local := ""
	for _, b := range rc.Backends {
		if b.Kind == routecfg.KindLocal {
			local = b.Name
		}
	}
	december := time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, epoch, hash, path string
		now                     time.Time
	}{
		{"no money freed", "2026-12:7", rs.Hash, "", december},
		{"a settlement", "2026-12:8", rs.Hash, "budget", december},
		{"the month rolled over", "2027-01:0", rs.Hash, "budget", december.Add(2 * time.Minute)},
		{"a config reload", "2026-12:7", "an-older-config", "config reload", december},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &jobtype.Job{ID: "h", State: jobtype.StateQueued, Attempt: 1, Team: "ml", UpdatedAt: december,
				Held:      "budget reservation refused: $2.00 would pass team:ml's 2026-12 budget ($1.00 of $40.00 left)",
				HeldEpoch: "2026-12:7",
				Route:     &jobtype.RouteInfo{Backend: local, Kind: routecfg.KindLocal, Attempt: 1, ConfigHash: tc.hash, DecidedAt: december, Waiting: true},
				Spec: jobspec.Spec{Name: "h", BaseModel: "tiny-char", Trainer: "reference", Resources: jobspec.Resources{GPUs: 1},
					MaxRuntime: jobspec.Duration(time.Hour)}}
			in := &RoundInput{Now: tc.now, BudgetEpoch: tc.epoch, Pending: []string{"h"}, Jobs: map[string]*jobtype.Job{"h": j},
				Routing: RoutingInput{Now: tc.now, Spends: map[string]poolstate.Spend{}, StepTimes: map[string]float64{}}}
			plan := DecideRound(in, rs, RoundOptions{DefaultMaxRuntime: 24 * time.Hour})
			if tc.path == "" {
				if len(plan.Reroutes) != 0 || len(plan.OffWaits) != 1 || plan.OffWaits[0].Code != "held" {
					t.Fatalf("reroutes %+v, waits %+v: want the job left held, not decided again", plan.Reroutes, plan.OffWaits)
				}
				return
			}
			if len(plan.Reroutes) != 1 || plan.Reroutes[0].Path != tc.path || plan.Reroutes[0].Job.ID != "h" {
				t.Fatalf("reroutes %+v: want the held job decided again on path %q", plan.Reroutes, tc.path)
			}
		})
	}
}

// TestEveryChosenRouteReserves: a budget-held job decided again onto a
// priced backend reserves its estimate whatever the path and whatever the
// decision's wait: a waiting local route (its wait past max_wait) and a
// config reload's re-decision reserve as a placement's does. Neither may
// store the job with its hold lifted and no reservation: it would run with
// its cost counted against no budget (TestBudgetRaceE2E's "costs to the
// cent" caught one such trial).
func TestEveryChosenRouteReserves(t *testing.T) {
	rc, err := routecfg.ParseConfig([]byte(`
sites: {dc: [onprem]}
redis_site: dc
backends:
  local: {kind: local, site: dc, price: {usd_per_gpu_hour: 2.00}}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs := NewRouteState(rc)
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	gpus := []jobtype.GPU{{Index: 0, UUID: "G0", Name: "NVIDIA H100", MemoryTotalMB: 81920, Healthy: true}}
	// The one GPU is held by a job estimated to run 10 more hours: a
	// queued job's local wait is far past a max_wait of a minute.
	started := now.Add(-time.Hour)
	running := &jobtype.Job{ID: "run", State: jobtype.StateRunning, Attempt: 1, StartedAt: &started, UpdatedAt: started,
		Spec: jobspec.Spec{Name: "run", BaseModel: "tiny-char", Trainer: "reference", Resources: jobspec.Resources{GPUs: 1},
			MaxRuntime: jobspec.Duration(11 * time.Hour)}}
	nodes := []poolstate.NodeStatus{{Node: poolstate.Node{Name: "n1", Backend: "local", Slots: 2, GPUs: gpus},
		Reservations: map[string]poolstate.Reservation{"run": {GPUs: []int{0}}}, Reserved: 1}}
	join := []poolstate.JoinWait{{GPUs: 1, WaitS: 10 * 3600}}
	pressure := poolstate.PoolPressure{HealthyGPUs: 1, RunningGPUHours: 10, At: now, Joins: [3][]poolstate.JoinWait{join, join, join}}
	for _, tc := range []struct {
		name, epoch, hash, path string
		maxWait                 time.Duration
	}{
		{"a settlement, the route waiting", "2026-12:8", rs.Hash, "budget", time.Minute},
		{"a settlement", "2026-12:8", rs.Hash, "budget", 0},
		{"a config reload, the route waiting", "2026-12:7", "an-older-config", "config reload", time.Minute},
		{"a config reload", "2026-12:7", "an-older-config", "config reload", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &jobtype.Job{ID: "h", State: jobtype.StateQueued, Attempt: 1, Team: "ml", UpdatedAt: now, CreatedAt: now,
				Held:      "budget reservation refused: $2.00 would pass team:ml's 2026-12 budget ($1.00 of $40.00 left)",
				HeldEpoch: "2026-12:7",
				Route:     &jobtype.RouteInfo{Backend: "local", Kind: routecfg.KindLocal, Attempt: 1, ConfigHash: tc.hash, DecidedAt: now, Waiting: true},
				Spec: jobspec.Spec{Name: "h", BaseModel: "tiny-char", Trainer: "reference", Resources: jobspec.Resources{GPUs: 1},
					MaxRuntime: jobspec.Duration(time.Hour), MaxWait: jobspec.Duration(tc.maxWait)}}
			in := &RoundInput{Now: now, BudgetEpoch: tc.epoch, Nodes: nodes, Pending: []string{"h"},
				Jobs:    map[string]*jobtype.Job{"h": j, "run": running},
				Routing: RoutingInput{Now: now, Nodes: nodes, Pressure: pressure, Spends: map[string]poolstate.Spend{}, StepTimes: map[string]float64{}}}
			plan := DecideRound(in, rs, RoundOptions{DefaultMaxRuntime: 24 * time.Hour})
			if len(plan.Reroutes) != 1 || plan.Reroutes[0].Path != tc.path {
				t.Fatalf("reroutes %+v: want the held job decided again on path %q", plan.Reroutes, tc.path)
			}
			rp := plan.Reroutes[0]
			if rp.Decision.Waiting != (tc.maxWait > 0) {
				t.Fatalf("decision waiting %v, want %v (the setup is wrong): %+v", rp.Decision.Waiting, tc.maxWait > 0, rp.Decision)
			}
			if rp.Held != "" || rp.Decision.EstCostUSD <= 0 || !rp.Reserve {
				t.Fatalf("held %q, estimate $%.2f, reserve %v: want the route chosen to reserve its estimate", rp.Held, rp.Decision.EstCostUSD, rp.Reserve)
			}
		})
	}
}
