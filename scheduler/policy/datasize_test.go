package policy

import (
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// TestDataSizesCarried: a later decision (a retry, a spill-over) reads the
// dataset sizes admission kept on the job's route, times their staging,
// and keeps them on the new route; a route without them counts 0.
func TestDataSizesCarried(t *testing.T) {
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
    staging_mbps: 100
    instance_types:
      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.5}
datasets:
  file_site: dc-frankfurt
  buckets: {lathe-eu-ckpt: aws-eu-central-1}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs := NewRouteState(rc)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	job := func(sizes *int64) *jobtype.Job {
		return &jobtype.Job{ID: "j", State: jobtype.StateQueued, Attempt: 2, UpdatedAt: now, OutputURI: "s3://lathe-eu-ckpt/out/j",
			Route: &jobtype.RouteInfo{Backend: "aws-eu", Kind: routecfg.KindAWS, Attempt: 1, ConfigHash: rs.Hash, DecidedAt: now,
				DatasetBytes: sizes, EvalDatasetBytes: sizes},
			Spec: jobspec.Spec{Name: "j", BaseModel: "tiny-char", Trainer: "reference", Residency: []string{"eu"},
				Dataset: "file:///data/train.jsonl", EvalDataset: "file:///data/eval.jsonl", Resources: jobspec.Resources{GPUs: 1},
				ExpectedRuntime: jobspec.Duration(time.Hour), MaxRuntime: jobspec.Duration(time.Hour),
				Output: jobspec.Output{URI: "s3://lathe-eu-ckpt/out"}}}
	}
	snap := Snapshot(rs, Assumptions{}, RoutingInput{Now: now})
	gb := int64(25e9)
	for _, tc := range []struct {
		name  string
		sizes *int64
		wait  float64
	}{{"sizes kept on the route: 2 × 25 GB at 100 MB/s", &gb, 500}, {"no sizes: staging counts 0", nil, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			rp := DecideRoute(job(tc.sizes), "retry", rs, snap, now)
			if rp.Route == nil || rp.Route.Backend != "aws-eu" {
				t.Fatalf("route %+v; want aws-eu", rp.Route)
			}
			if rp.Route.EstWaitS != tc.wait {
				t.Errorf("aws-eu's estimated wait %v s, want %v", rp.Route.EstWaitS, tc.wait)
			}
			if got := rp.RoutingJob.DatasetSize; got.Known != (tc.sizes != nil) {
				t.Errorf("routing job's dataset size %+v", got)
			}
			kept := rp.Route.DatasetBytes != nil && rp.Route.EvalDatasetBytes != nil
			if kept != (tc.sizes != nil) || kept && (*rp.Route.DatasetBytes != gb || *rp.Route.EvalDatasetBytes != gb) {
				t.Errorf("new route's sizes %v %v; want %v kept", rp.Route.DatasetBytes, rp.Route.EvalDatasetBytes, tc.sizes)
			}
		})
	}
}
