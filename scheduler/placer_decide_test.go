package scheduler

import (
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
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
	rs := &routeState{cfg: rc, hash: rc.Hash()}
	local := ""
	for _, b := range rc.Backends {
		if b.Kind == routecfg.KindLocal {
			local = b.Name
		}
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	route := func(attempt int) *jobtype.RouteInfo {
		return &jobtype.RouteInfo{Backend: local, Kind: routecfg.KindLocal, Attempt: attempt, ConfigHash: rs.hash, DecidedAt: now}
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
	nodes := []jobstore.NodeStatus{{Node: jobstore.Node{Name: "n1", Backend: "local", Slots: 2, GPUs: gpus},
		Reservations: map[string]jobstore.Reservation{"run": {GPUs: []int{0}}}, Reserved: 1}}
	in := &roundInput{now: now, nodes: nodes, pending: []string{"fits", "retry", "held", "big", "gone"}, jobs: jobs,
		routing: routingInput{now: now, nodes: nodes, spends: map[string]jobstore.Spend{}, stepTimes: map[string]float64{}}}

	plan := decideRound(in, rs, roundOptions{defaultMaxRuntime: 24 * time.Hour, ledger: true})

	if len(plan.reroutes) != 1 || plan.reroutes[0].job.ID != "retry" || plan.reroutes[0].path != "retry" {
		t.Fatalf("reroutes = %+v, want the retry alone", plan.reroutes)
	}
	if rp := plan.reroutes[0]; rp.route == nil || rp.route.Attempt != 2 || rp.held != "" || rp.records == nil || rp.err != nil {
		t.Fatalf("retry's plan = %+v, want a route for attempt 2 with its ledger records", rp)
	}
	if jobs["retry"].Route.Attempt != 1 {
		t.Fatal("the decision changed its input")
	}
	assigned := map[string]bool{}
	for _, a := range plan.place.Assign {
		assigned[a.JobID] = true
	}
	if !assigned["fits"] || !assigned["retry"] || assigned["big"] || assigned["held"] {
		t.Fatalf("assignments = %+v, want fits and retry only", plan.place.Assign)
	}
	if len(plan.offWaits) != 1 || plan.offWaits[0].id != "held" || plan.offWaits[0].code != "held" {
		t.Fatalf("offWaits = %+v, want the held job", plan.offWaits)
	}
	if plan.pressure.HealthyGPUs != 2 || plan.pressure.RunningGPUHours <= 0 || len(plan.pressure.Capacity) != 1 {
		t.Fatalf("pressure = %+v", plan.pressure)
	}
	if again := decideRound(in, rs, roundOptions{defaultMaxRuntime: 24 * time.Hour}); len(again.place.Assign) != len(plan.place.Assign) {
		t.Fatal("the same input decided differently")
	}
}

// TestDecideRoundCountsAHeldReservationOnce re-routes two retries to a
// priced cloud backend in one round. The first already holds its budget
// reservation (Reserve will be a no-op for it), and the spends read count
// it: the round must not count it a second time, or the second retry would
// be refused a budget that has room for it.
func TestDecideRoundCountsAHeldReservationOnce(t *testing.T) {
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
    budget_usd_per_month: 4
    instance_types:
      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.5}
datasets:
  buckets: {lathe-eu-ckpt: aws-eu-central-1, lathe-eu-data: aws-eu-central-1}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs := &routeState{cfg: rc, hash: rc.Hash()}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	job := func(id string) *jobtype.Job {
		return &jobtype.Job{ID: id, State: jobtype.StateQueued, Attempt: 2, UpdatedAt: now, OutputURI: "s3://lathe-eu-ckpt/out/" + id,
			Route: &jobtype.RouteInfo{Backend: "aws-eu", Kind: routecfg.KindAWS, Attempt: 1, ConfigHash: rs.hash, DecidedAt: now},
			Spec: jobspec.Spec{Name: id, BaseModel: "tiny-char", Trainer: "reference", Residency: []string{"eu"},
				Dataset: "s3://lathe-eu-data/train.jsonl", Resources: jobspec.Resources{GPUs: 1},
				ExpectedRuntime: jobspec.Duration(time.Hour), MaxRuntime: jobspec.Duration(time.Hour),
				Output: jobspec.Output{URI: "s3://lathe-eu-ckpt/out"}}}
	}
	holder, second := job("holder"), job("second")
	in := &roundInput{now: now, pending: []string{"holder", "second"}, jobs: map[string]*jobtype.Job{"holder": holder, "second": second},
		routing: routingInput{now: now, stepTimes: map[string]float64{}, spends: map[string]jobstore.Spend{}}}
	estimate := decideRoute(holder, "retry", rs, routingSnapshot(rs, Assumptions{}, in.routing), now, false).decision.EstCostUSD
	if estimate <= 0 || 3*estimate <= 4 || 2*estimate > 4 {
		t.Fatalf("estimate %.2f: the test needs 2 estimates to fit the $4 budget and 3 not to", estimate)
	}
	// The holder's reservation is in the spends read, and on its record.
	holder.BudgetReservedUSD = estimate
	in.routing.spends["backend:aws-eu"] = jobstore.Spend{ReservedUSD: estimate}

	plan := decideRound(in, rs, roundOptions{defaultMaxRuntime: 24 * time.Hour})

	if len(plan.reroutes) != 2 {
		t.Fatalf("reroutes = %+v, want both retries", plan.reroutes)
	}
	for _, rp := range plan.reroutes {
		if rp.held != "" || rp.decision.Refused {
			t.Fatalf("%s: refused (%s; %v): its reservation was counted twice", rp.job.ID, rp.held, rp.decision.Reasons)
		}
	}
}
