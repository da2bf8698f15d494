package sim

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/trace"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// simTrace reads the shared trace and configs/simulate.yaml for the
// simulation tests and benchmarks; they fail, never skip, without them.
func simTrace(tb testing.TB) ([]Job, Setup) {
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
	jobs, _ := JobsFromTrace(tj, Draws{Seed: 1})
	return jobs, Setup{Config: cfg, GPUName: "NVIDIA H100 80GB HBM3", GPUMemoryMB: 80 * 1024, MaxWait: 2 * time.Hour}
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
