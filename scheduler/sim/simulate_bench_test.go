package sim

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/trace"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// simTrace reads the shared trace and configs/simulate.yaml for the
// simulation tests and benchmarks; they fail, never skip, without them.
func simTrace(tb testing.TB) ([]Job, Setup) {
	tb.Helper()
	tj, cfg := simTraceRaw(tb)
	jobs, _ := JobsFromTrace(tj, Draws{Seed: 1})
	return jobs, Setup{Config: cfg, GPUName: "NVIDIA H100 80GB HBM3", GPUMemoryMB: 80 * 1024, MaxWait: 2 * time.Hour}
}

// simTraceRaw is the shared trace as read and configs/simulate.yaml.
func simTraceRaw(tb testing.TB) ([]trace.Job, routecfg.Config) {
	tb.Helper()
	f, err := os.Open("../../configs/traces/msft-itp-cluster02.csv")
	if err != nil {
		tb.Fatalf("the trace of issue #15: %v", err)
	}
	defer f.Close()
	tj, err := trace.Read(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile("../../configs/simulate.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := routecfg.ParseConfig(b)
	if err != nil {
		tb.Fatal(err)
	}
	return tj, cfg
}

// BenchmarkSimulateTrace replays the 5,778 jobs of the trace once per
// iteration through the policy (learned estimates) with 128 owned GPUs;
// BenchmarkReferenceTrace runs the clairvoyant reference on the same jobs,
// the baseline of docs/benchmarks.md.
func BenchmarkSimulateTrace(b *testing.B) {
	jobs, setup := simTrace(b)
	for _, owned := range []int{64, 128, 256} {
		b.Run("owned="+itoa(owned), func(b *testing.B) {
			setup.Owned = owned
			for b.Loop() {
				if _, err := Simulate(context.Background(), setup, jobs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkReferenceTrace(b *testing.B) {
	jobs, setup := simTrace(b)
	setup.Owned = 128
	for b.Loop() {
		if _, err := Reference(setup, jobs); err != nil {
			b.Fatal(err)
		}
	}
}

func itoa(n int) string {
	return string(rune('0'+n/100%10)) + string(rune('0'+n/10%10)) + string(rune('0'+n%10))
}

// noCloud is setup with its config cut to the local backend: nothing to
// spill to, so the queue grows with the trace (issue #25).
func noCloud(tb testing.TB, setup Setup) Setup {
	tb.Helper()
	cfg := setup.Config
	cfg.Backends = nil
	for _, b := range setup.Config.Backends {
		if b.Kind == routecfg.KindLocal {
			cfg.Backends = append(cfg.Backends, b)
		}
	}
	c, err := routecfg.Compile(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	setup.Config = c
	return setup
}

// BenchmarkSimulateNoCloudBacklog replays the trace cut to its first n
// jobs at 32 owned GPUs with no cloud backend: the backlog grows with n,
// and the time per run should grow near n log n with it (issue #25).
func BenchmarkSimulateNoCloudBacklog(b *testing.B) {
	jobs, setup := simTrace(b)
	setup = noCloud(b, setup)
	setup.Owned = 32
	for _, n := range []int{800, 1600, 3200} {
		b.Run("jobs="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Simulate(context.Background(), setup, jobs[:n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSimulateNoCloudClusters replays the whole of each shared
// cluster's trace with no cloud backend at 16 owned GPUs, where the
// backlog grows most (cluster08: 13,047 jobs), and reports the rounds and
// the pending jobs shown to them per run (issue #25; scripts/bench/simspeed.sh
// times every pool size, with and without the cloud).
func BenchmarkSimulateNoCloudClusters(b *testing.B) {
	_, setup := simTrace(b)
	setup = noCloud(b, setup)
	setup.Owned = 16
	for _, nn := range []string{"01", "02", "03", "08"} {
		jobs := clusterJobs(b, nn, Draws{Seed: 1})
		b.Run("cluster"+nn, func(b *testing.B) {
			var res Result
			for b.Loop() {
				var err error
				if res, err = Simulate(context.Background(), setup, jobs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(res.Rounds), "rounds/op")
			b.ReportMetric(float64(res.RoundJobs), "roundjobs/op")
		})
	}
}
