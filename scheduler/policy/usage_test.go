package policy

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
	"github.com/lathe-ml/lathe/scheduler/placement"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// TestJobUsage: a job's cost is its cloud instances' cost plus its local
// run time × GPUs × the local price, and its GPU-hours its whole run time
// × GPUs (nodes × gpus for a job that spans nodes); the attempt running now counts to the last update; the settled
// CostUSD is never added again (settling twice cannot double it); local
// time stays priced after the job's route moved to the cloud.
func TestJobUsage(t *testing.T) {
	cfg, err := routecfg.ParseConfig([]byte(`
sites: {dc: [onprem], aws-eu-central-1: [cloud]}
redis_site: dc
backends:
  local: {kind: local, site: dc, price: {usd_per_gpu_hour: 2.00}}
  aws-eu:
    kind: aws
    site: aws-eu-central-1
    region: eu-central-1
    checkpoint_uri: s3://ckpt/
    instance_types:
      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}
datasets:
  buckets: {ckpt: aws-eu-central-1}
`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	j := &jobtype.Job{State: jobtype.StateSucceeded, Spec: jobspec.Spec{Resources: jobspec.Resources{GPUs: 2}},
		Route: &jobtype.RouteInfo{Backend: "local", Kind: "local"}, RunS: 5400, LocalRunS: 3600, CloudCostUSD: 1.5}
	want := func(usd, gpuh float64) {
		t.Helper()
		u, g := JobUsage(cfg, j)
		if math.Abs(u-usd) > 1e-9 || math.Abs(g-gpuh) > 1e-9 {
			t.Fatalf("usage $%v, %v GPU-h; want $%v, %v GPU-h", u, g, usd, gpuh)
		}
	}
	want(1.5+1*2*2.00, 1.5*2) // 1 h local × 2 GPUs × $2, plus $1.50 of cloud
	j.CostUSD = 5.5           // as the settler stored it: not counted again
	want(5.5, 3)
	j.Route = &jobtype.RouteInfo{Backend: "aws-eu", Kind: "aws"} // moved to the cloud since
	want(5.5, 3)
	// Running locally now for 30 more minutes, to its last update.
	j.Route = &jobtype.RouteInfo{Backend: "local", Kind: "local"}
	j.State, j.StartedAt, j.UpdatedAt = jobtype.StateRunning, &start, start.Add(30*time.Minute)
	want(1.5+1.5*2*2.00, 2*2)
	// A job of 3 nodes × 2 GPUs holds 6 GPUs: it costs and counts three times as much.
	j.Spec.Resources.Nodes = 3
	want(1.5+1.5*6*2.00, 2*6)
}

// TestGangJoinsReachRouting: a gang's join (placement.Join.Nodes) keeps its
// node count on its way to routing: through the pool's pressure
// (JoinWaits) and the local pool routing reads (LocalPool).
func TestGangJoinsReachRouting(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	joins := []placement.Join{{Priority: 1, GPUs: 8, At: now.Add(time.Minute)}, {Priority: 1, GPUs: 8, Nodes: 2, At: now.Add(time.Hour)}}
	pr := poolstate.PoolPressure{At: now, Joins: JoinWaits(joins, now)}
	got := LocalPool(nil, pr, now).Joins[1]
	want := []routing.JoinWait{{GPUs: 8, WaitS: 60}, {GPUs: 8, Nodes: 2, WaitS: 3600}}
	if !slices.Equal(got, want) {
		t.Errorf("joins %+v; want %+v", got, want)
	}
}
