package routing

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// bench100Config writes a config of 100 backends: 40 local pools in 4
// on-premises sites and 60 aws backends in 6 cloud sites, 4 instance types
// each.
func bench100Config() string {
	var b strings.Builder
	b.WriteString("sites:\n")
	for i := range 4 {
		region := []string{"eu", "us"}[i%2]
		b.WriteString("  dc-" + strconv.Itoa(i) + ": [onprem, " + region + ", site-dc" + strconv.Itoa(i) + "]\n")
	}
	for i := range 6 {
		region := []string{"eu", "us", "ap"}[i%3]
		b.WriteString("  cloud-" + strconv.Itoa(i) + ": [cloud, " + region + "]\n")
	}
	b.WriteString("control: {}\nredis_site: dc-0\n")
	b.WriteString("datasets:\n  file_site: dc-0\n  buckets:\n")
	for i := range 6 {
		b.WriteString("    ckpt-" + strconv.Itoa(i) + ": cloud-" + strconv.Itoa(i) + "\n")
	}
	b.WriteString("    data-eu: cloud-0\n    data-us: dc-1\n")
	b.WriteString("budgets: {teams: {ml-research: 100000}}\nbackends:\n")
	for i := range 40 {
		b.WriteString("  local-" + strconv.Itoa(i) + ":\n    kind: local\n    site: dc-" + strconv.Itoa(i%4) +
			"\n    price: {usd_per_gpu_hour: " + strconv.FormatFloat(1+float64(i%7)/10, 'f', 2, 64) + "}\n")
	}
	for i := range 60 {
		b.WriteString("  aws-" + strconv.Itoa(i) + ":\n    kind: aws\n    site: cloud-" + strconv.Itoa(i%6) +
			"\n    region: eu-test-" + strconv.Itoa(i%6) + "\n    checkpoint_uri: s3://ckpt-" + strconv.Itoa(i%6) + "/" + strconv.Itoa(i) +
			"\n    budget_usd_per_month: 50000\n    instance_types:\n" +
			"      p5.48xlarge: {gpus: 8, gpu_model: H100, gpu_memory_gb: 80, on_demand_usd_per_hour: " + strconv.Itoa(50+i%9) + "}\n" +
			"      p4d.24xlarge: {gpus: 8, gpu_model: A100, gpu_memory_gb: 40, on_demand_usd_per_hour: 32.77}\n" +
			"      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}\n" +
			"      g5.12xlarge: {gpus: 4, gpu_model: A10G, gpu_memory_gb: 24, on_demand_usd_per_hour: 5.67}\n")
	}
	return strings.Replace(b.String(), "control: {}\n", "", 1)
}

// bench100Snapshot: each pool has 8 nodes of 8 GPUs (H100 or A100), and
// some queue ahead.
func bench100Snapshot(tb testing.TB) Snapshot {
	s := Snapshot{Config: mustParse(tb, bench100Config()), Pools: map[string]Pool{}, BackendSpend: map[string]Spend{},
		TeamSpend: map[string]Spend{"ml-research": {SpentUSD: 5000}}, SecondsPerStep: map[string]float64{"tiny-char|nvidia h100 80gb hbm3": 0.5, "tiny-char|h100": 0.5}}
	for i := range 40 {
		var p Pool
		model := []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"}[i%2]
		for n := range 8 {
			p.Nodes = append(p.Nodes, PoolNode{Name: "n" + strconv.Itoa(n), GPUs: []PoolGPU{{Model: model, MemoryGB: 80, Healthy: 8 - n%3}}})
		}
		p.GPUHoursAhead = [3]float64{10, float64(100 * (1 + i%5)), 500}
		p.HealthyGPUs = 56
		s.Pools["local-"+strconv.Itoa(i)] = p
	}
	for i := range 60 {
		s.BackendSpend["aws-"+strconv.Itoa(i)] = Spend{SpentUSD: float64(i * 100)}
	}
	return s
}

// benchJobs: an [eu] job that bursts, an [onprem] job that stays, a
// [eu] job with its data in an eu bucket (cloud only: local pools use
// file://), weighing cost against time,
// and a [us] job with learned steps that is refused (Redis is in an [eu]
// site), which writes a reason for each of the 100 backends.
func benchJobs() []Job {
	eu := Job{ID: "a", Team: "ml-research", Residency: []string{"eu"}, Dataset: "file:///data/a", Output: "file:///out/a",
		GPUs: 1, GPUModels: []string{"H100"}, Priority: 1, MaxWait: time.Hour, ExpectedRuntime: 2 * time.Hour, BaseModel: "tiny-char"}
	onprem := eu
	onprem.Residency, onprem.MaxWait = nil, 4*time.Hour
	us := eu
	us.Residency, us.ExpectedRuntime, us.MaxSteps = []string{"us"}, 0, 10000
	us.Dataset, us.Output = "s3://data-us/train", "s3://data-us/out"
	bucket := eu
	bucket.Dataset, bucket.Output, bucket.Residency, bucket.ValuePerHourUSD = "s3://data-eu/train", "s3://data-eu/out", []string{"eu"}, 20
	usFileOut := us // output on the [onprem …] file site: refused on every backend
	usFileOut.Output = "file:///out/u"
	return []Job{eu, onprem, bucket, us, usFileOut}
}

// BenchmarkDecide100Backends: decisions per second over 100 backends. The
// goal is ≥ 100,000/s on one core:
//
//	go test -run '^$' -bench BenchmarkDecide100Backends -cpu 1 ./scheduler/routing
func BenchmarkDecide100Backends(b *testing.B) {
	s := bench100Snapshot(b)
	jobs := benchJobs()
	for _, j := range jobs {
		if d := Decide(j, s); len(d.Candidates) != 100 {
			b.Fatalf("%d candidates", len(d.Candidates))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Decide(jobs[i%len(jobs)], s)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkParseConfig100Backends: parsing and indexing the same config.
func BenchmarkParseConfig100Backends(b *testing.B) {
	data := []byte(bench100Config())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := routecfg.ParseConfig(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBench100Decisions pins what the benchmark decides, so it measures
// real work.
func TestBench100Decisions(t *testing.T) {
	s := bench100Snapshot(t)
	want := []struct {
		kind     string
		refused  bool
		feasible int
	}{{routecfg.KindAWS, false, 40}, {routecfg.KindLocal, false, 20}, {routecfg.KindAWS, false, 20}, {routecfg.KindAWS, false, 20}, {"", true, 0}}
	// (Job 2 has s3:// data: no local pool may take it, so an eu cloud
	// backend does.)
	for i, j := range benchJobs() {
		d := Decide(j, s)
		feasible := 0
		for _, c := range d.Candidates {
			if c.Feasible {
				feasible++
			}
		}
		kind := ""
		if c, ok := s.Config.Backend(d.Backend); ok {
			kind = c.Kind
		}
		t.Logf("job %d %v → %s (waiting %v, refused %v), %d feasible", i, j.Residency, d.Backend, d.Waiting, d.Refused, feasible)
		if w := want[i]; kind != w.kind || d.Refused != w.refused || feasible != w.feasible {
			t.Errorf("job %d: %s refused %v, %d feasible; want %+v\n%v", i, kind, d.Refused, feasible, w, d.Reasons)
		}
	}
}
