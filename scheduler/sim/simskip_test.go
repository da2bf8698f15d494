package sim

import (
	"context"
	"math"
	"os"
	"reflect"
	"testing"

	"github.com/lathe-ml/lathe/internal/trace"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// clusterJobs reads configs/traces/msft-itp-clusterNN.csv (the trace and
// config of simTrace otherwise); the tests fail, never skip, without it.
func clusterJobs(tb testing.TB, nn string, d Draws) []Job {
	tb.Helper()
	f, err := os.Open("../../configs/traces/msft-itp-cluster" + nn + ".csv")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	tj, err := trace.Read(f)
	if err != nil {
		tb.Fatal(err)
	}
	jobs, _ := JobsFromTrace(tj, d)
	return jobs
}

// TestSimulateSkipsNoDecision checks simskip.go's claim: in a simulation
// where no job could spill to a cloud, the rounds it skips and the pending
// jobs it does not show a round change no decision. Each case runs twice,
// as it does and exhaustively (every round, every pending job shown), and
// every job's outcome must be the same; only the work differs.
func TestSimulateSkipsNoDecision(t *testing.T) {
	_, setup := simTrace(t)
	setup = noCloud(t, setup)
	mix, err := ParseMix("--priority", "urgent=0.1,normal=0.6,batch=0.3", ValidPriority)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name            string
		cluster         string
		jobs            int
		owned, nodeGPUs int
		est             string
		mixed, gangs    bool
	}{
		{"02-16-learned", "02", 1200, 16, 0, "learned", false, false},
		{"02-48-learned", "02", 1200, 48, 0, "learned", false, false},
		{"02-32x8-learned", "02", 1200, 32, 8, "learned", false, false},
		{"02-32-hint", "02", 1200, 32, 0, "hint:1", false, false},
		{"02-32-oracle", "02", 1200, 32, 0, "oracle", false, false},
		{"02-32-learned-mixed", "02", 1200, 32, 0, "learned", true, false},
		{"03-24-learned", "03", 1200, 24, 0, "learned", false, false},
		{"08-16x8-learned", "08", 1500, 16, 8, "learned", false, false},
		{"02-64x8-learned-gangs", "02", 1200, 64, 8, "learned", false, true},
		{"02-64x8-learned-mixed-gangs", "02", 1200, 64, 8, "learned", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Draws{Seed: 1}
			if c.mixed {
				d = Draws{Seed: 7, Priority: mix}
			}
			e, err := ParseEstimator(c.est)
			if err != nil {
				t.Fatal(err)
			}
			jobs := WithEstimates(clusterJobs(t, c.cluster, d)[:c.jobs], e, 1)
			s := setup
			s.Owned, s.NodeGPUs, s.Gangs = c.owned, c.nodeGPUs, c.gangs
			got, err := Simulate(context.Background(), s, jobs)
			if err != nil {
				t.Fatal(err)
			}
			s.exhaustive = true
			want, err := Simulate(context.Background(), s, jobs)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rounds %d of %d, jobs shown to them %d of %d", got.Rounds, want.Rounds, got.RoundJobs, want.RoundJobs)
			if got.RoundJobs >= want.RoundJobs {
				t.Errorf("jobs shown to rounds: %d, exhaustively %d: nothing was left out", got.RoundJobs, want.RoundJobs)
			}
			for i := range want.Jobs {
				if !reflect.DeepEqual(got.Jobs[i], want.Jobs[i]) {
					t.Fatalf("job %d: %+v; exhaustively %+v", i, got.Jobs[i], want.Jobs[i])
				}
			}
			got.Rounds, got.RoundJobs, want.Rounds, want.RoundJobs = 0, 0, 0, 0
			if !reflect.DeepEqual(got, want) {
				t.Errorf("results differ:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestSimulateNoCloudWork counts the work of a run with no cloud backend,
// whose backlog grows with the trace (issue #25), on the first n jobs of
// the shared trace at 32 owned GPUs: the rounds grow linearly with n (at
// most one per arrival and one per end), and the pending jobs shown to
// them near n log n, not with n × the backlog (it was quadratic: a round
// per waiting job every max_wait, each over the whole backlog). It counts,
// it does not time.
func TestSimulateNoCloudWork(t *testing.T) {
	jobs, setup := simTrace(t)
	setup = noCloud(t, setup)
	setup.Owned = 32
	prev := 0
	for _, n := range []int{800, 1600, 3200} {
		res, err := Simulate(context.Background(), setup, jobs[:n])
		if err != nil {
			t.Fatal(err)
		}
		nlogn := float64(n) * math.Log2(float64(n))
		t.Logf("%d jobs: %d rounds, %d jobs shown to them (%.2f n log2 n)", n, res.Rounds, res.RoundJobs, float64(res.RoundJobs)/nlogn)
		if res.Rounds > 2*n {
			t.Errorf("%d jobs: %d rounds; want at most %d (one per arrival and one per end)", n, res.Rounds, 2*n)
		}
		if float64(res.RoundJobs) > nlogn {
			t.Errorf("%d jobs: rounds were shown %d jobs; want at most n log2 n = %.0f", n, res.RoundJobs, nlogn)
		}
		if prev > 0 && float64(res.RoundJobs) > 3*float64(prev) {
			t.Errorf("%d jobs: rounds were shown %d jobs, %.1f× as many as for half as many jobs; want under 3× (quadratic: 4×)",
				n, res.RoundJobs, float64(res.RoundJobs)/float64(prev))
		}
		prev = res.RoundJobs
	}
}

// TestNoCloudConfig checks testdata/simulate-nocloud.yaml, which
// scripts/bench/simspeed.sh runs the clusters with: it is valid, its one
// backend is the owned pool of configs/simulate.yaml (same site, same
// price), and no job of the shared trace could spill (the simulation is
// inert), where with configs/simulate.yaml every job could (so what
// simskip.go leaves out changes none of its runs).
func TestNoCloudConfig(t *testing.T) {
	b, err := os.ReadFile("testdata/simulate-nocloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routecfg.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	jobs, setup := simTrace(t)
	if len(cfg.Backends) != 1 || cfg.Backends[0].Kind != routecfg.KindLocal {
		t.Fatalf("backends %+v: want only the owned pool", cfg.Backends)
	}
	if got, want := OwnedUSDPerGPUHour(cfg), OwnedUSDPerGPUHour(setup.Config); got != want {
		t.Errorf("owned GPU-hour $%v; configs/simulate.yaml's $%v", got, want)
	}
	setup.Owned = 32
	withCloud, err := newSim(setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	setup.Config = cfg
	sm, err := newSim(setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if !sm.inert || withCloud.inert {
		t.Errorf("inert: %v with no cloud, %v with configs/simulate.yaml; want true, false", sm.inert, withCloud.inert)
	}
	for i := range withCloud.jobs {
		if !withCloud.jobs[i].spill {
			t.Fatalf("job %s could not spill with configs/simulate.yaml (its largest instance type has 64 GPUs)", withCloud.jobs[i].in.ID)
		}
	}
}
