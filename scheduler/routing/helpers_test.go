package routing

import (
	"strings"
	"testing"
	"time"
)

// issueConfig is the config of the issue's scenarios: a local pool in an
// [onprem eu] site, aws-eu in a [cloud eu] site and aws-us in a [cloud us]
// site, Redis beside the local pool.
const issueConfig = `
data_dir: /var/lib/lathe        # another section: ignored here
scheduler: {listen: 127.0.0.1:8080}
sites:
  dc-frankfurt: [onprem, eu]
  aws-eu-central-1: [cloud, eu]
  aws-us-east-1: [cloud, us]
redis_site: dc-frankfurt
backends:
  local:
    kind: local
    site: dc-frankfurt
    checkpoint_uri: file:///shared/ckpt
    price: {usd_per_gpu_hour: 1.10}
  aws-eu:
    kind: aws
    site: aws-eu-central-1
    region: eu-central-1
    checkpoint_uri: s3://lathe-eu-ckpt/
    budget_usd_per_month: 5000
    spot: false
    instance_types:
      p5.48xlarge: {gpus: 8, gpu_model: H100, gpu_memory_gb: 80, on_demand_usd_per_hour: 55.04, spot_usd_per_hour: 30.0}
      g6e.xlarge:  {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}
  aws-us:
    kind: aws
    site: aws-us-east-1
    region: us-east-1
    checkpoint_uri: s3://lathe-us-ckpt/runs
    instance_types:
      p5.48xlarge: {gpus: 8, gpu_model: H100, gpu_memory_gb: 80, on_demand_usd_per_hour: 55.04}
      g6e.xlarge:  {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}
datasets:
  buckets: {lathe-eu-data: aws-eu-central-1, lathe-us-data: aws-us-east-1, lathe-eu-ckpt: aws-eu-central-1, lathe-us-ckpt: aws-us-east-1}
routing:
  default_residency: [onprem]
budgets:
  teams: {ml-research: 2000}
trainers:
  reference: ["/usr/bin/python3", "{scripts}/train_lora.py"]
`

func mustParse(t testing.TB, src string) Config {
	t.Helper()
	c, err := ParseConfig([]byte(src))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return c
}

// withRedisIn is issueConfig with Redis in another site.
func withRedisIn(site string) string {
	return strings.Replace(issueConfig, "redis_site: dc-frankfurt", "redis_site: "+site, 1)
}

// h100Pool is a local pool of n nodes with 8 healthy H100s each.
func h100Pool(n int) Pool {
	p := Pool{HealthyGPUs: 8 * n}
	for i := range n {
		p.Nodes = append(p.Nodes, PoolNode{Name: "gpu" + string(rune('a'+i)), GPUs: []PoolGPU{{Model: "NVIDIA H100 80GB HBM3", MemoryGB: 80, Healthy: 8}}})
	}
	return p
}

// baseSnapshot: the issue config, a 2-node H100 pool with an empty queue.
func baseSnapshot(t testing.TB, cfg string) Snapshot {
	return Snapshot{
		Now:    time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
		Config: mustParse(t, cfg),
		Pools:  map[string]Pool{"local": h100Pool(2)},
	}
}

func dur(d time.Duration) *time.Duration { return &d }

// candidate returns the candidate of backend name.
func candidate(t testing.TB, d Decision, name string) Candidate {
	t.Helper()
	for _, c := range d.Candidates {
		if c.Backend == name {
			return c
		}
	}
	t.Fatalf("no candidate %s in %+v", name, d.Candidates)
	return Candidate{}
}

// hasReason reports whether some reason of d contains sub.
func hasReason(d Decision, sub string) bool {
	for _, r := range d.Reasons {
		if strings.Contains(r, sub) {
			return true
		}
	}
	return false
}
