package sim

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/trace"
)

// clusterJobs is shared cluster c of configs/traces as simulated jobs
// (seed 1, the config's default residency) and the setup of
// configs/simulate.yaml with max_wait 2h.
func clusterJobs(tb testing.TB, c string) ([]Job, Setup) {
	tb.Helper()
	_, setup := simTrace(tb)
	f, err := os.Open("../../configs/traces/msft-itp-cluster" + c + ".csv")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	tj, err := trace.Read(f)
	if err != nil {
		tb.Fatal(err)
	}
	jobs, _ := JobsFromTrace(tj, Draws{Seed: 1})
	return jobs, setup
}

// TestSimulateFourClusters is issue #25's goal on the four shared clusters
// (owned $1 and cloud $4 per GPU-hour, max_wait 2h, learned estimates),
// as far as it is met today (docs/simulate.md, "The four shared
// clusters"). Each cluster is swept 16 GPUs apart over the range of
// docs/simulate.md's table, with all-cloud as a candidate, and:
//   - at the five sizes centred on the reference's optimum, the cost is
//     ≤ 1.05× the reference's and the p95 wait ≤ max_wait, on every
//     cluster;
//   - there, the mean wait is ≤ 1.5× the reference's on clusters 02, 03
//     and 08 (NOT met on 01: 1.6–2.5× at 32–80 GPUs);
//   - the sweep's optimum is within one step of the reference's on
//     clusters 01, 02 and 08 (NOT met on 03: 224 against 176, where the
//     reference's own costs from 176 to 224 lie within 0.7%).
//
// Each bound not met is asserted the other way round, so that this test
// fails, and is updated, the day it is met.
func TestSimulateFourClusters(t *testing.T) {
	goals := []struct {
		cluster         string
		from, to        int // the sweep
		refOpt          int
		waitMet, optMet bool
	}{
		{"01", 16, 128, 64, false, true},
		{"02", 64, 224, 144, true, true},
		{"03", 96, 320, 176, true, false},
		{"08", 32, 192, 128, true, true},
	}
	for _, g := range goals {
		t.Run("cluster"+g.cluster, func(t *testing.T) {
			jobs, setup := clusterJobs(t, g.cluster)
			runs := []Run{{Owned: 0, Estimates: "all-cloud", Jobs: jobs}}
			n := 0
			for _, ref := range []bool{false, true} {
				label := map[bool]string{false: "learned", true: "reference"}[ref]
				n = 0
				for owned := g.from; owned <= g.to; owned += 16 {
					runs = append(runs, Run{Owned: owned, Estimates: label, Jobs: jobs, Reference: ref})
					n++
				}
			}
			sums, err := RunAll(context.Background(), setup, runs)
			if err != nil {
				t.Fatal(err)
			}
			allCloud, pol, ref := sums[0], sums[1:1+n], sums[1+n:]
			worstWait := 0.0
			for k := range pol {
				l, r := pol[k], ref[k]
				if l.Refused+l.Stuck+len(l.Violations) > 0 {
					t.Errorf("%d owned: refused %d, stuck %d, violations %v", l.Owned, l.Refused, l.Stuck, l.Violations)
				}
				if l.Owned < g.refOpt-32 || l.Owned > g.refOpt+32 {
					continue
				}
				cr, wr := l.TotalCostUSD/r.TotalCostUSD, l.Wait.MeanS/r.Wait.MeanS
				worstWait = max(worstWait, wr)
				t.Logf("%3d owned: cost %.3f× the reference's, mean wait %.2f× (%.1f / %.1f min), p95 %.2f h, cloud jobs %d / %d",
					l.Owned, cr, wr, l.Wait.MeanS/60, r.Wait.MeanS/60, l.Wait.P95S/3600, l.CloudJobs, r.CloudJobs)
				if cr > 1.05 {
					t.Errorf("%d owned: cost %.3f× the reference's; want ≤ 1.05", l.Owned, cr)
				}
				if l.Wait.P95S > (2 * time.Hour).Seconds() {
					t.Errorf("%d owned: p95 wait %.0f s; want ≤ max_wait", l.Owned, l.Wait.P95S)
				}
			}
			if g.waitMet != (worstWait <= 1.5) {
				t.Errorf("worst mean wait %.2f× the reference's; the bound of 1.5× expected met: %v", worstWait, g.waitMet)
			}
			optimum := func(s []Summary) int {
				if o := s[Optimum(s)]; o.TotalCostUSD < allCloud.TotalCostUSD {
					return o.Owned
				}
				return 0
			}
			po, ro := optimum(pol), optimum(ref)
			if ro != g.refOpt {
				t.Fatalf("the reference's optimum is %d GPUs; the bounds are checked around %d", ro, g.refOpt)
			}
			t.Logf("optimum: policy %d GPUs, reference %d (all-cloud $%.0f)", po, ro, allCloud.TotalCostUSD)
			if met := po >= ro-16 && po <= ro+16; met != g.optMet {
				t.Errorf("the policy's optimum is %d GPUs, the reference's %d; within one step expected: %v", po, ro, g.optMet)
			}
		})
	}
}
