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
// at five pool sizes 16 GPUs apart centred on the reference's optimum,
// as far as it is met today (docs/simulate.md, "The four shared
// clusters"):
//   - cost ≤ 1.05× the reference's at every size, on every cluster;
//   - p95 wait ≤ max_wait at every size, on every cluster;
//   - mean wait ≤ 1.5× the reference's on clusters 03 and 08 (NOT met on
//     01, 2.5–3.5×, nor on 02 at 128–176 GPUs, up to 1.68×);
//   - the 16-GPU sweep's optimum, all-cloud a candidate, within one step
//     of the reference's on clusters 02, 03 and 08 (NOT met on 01: the
//     policy's cheapest pool costs more than renting everything).
//
// Each bound not met is asserted the other way round, so that this test
// fails, and is updated, the day it is met.
func TestSimulateFourClusters(t *testing.T) {
	goals := []struct {
		cluster         string
		refOpt          int
		waitMet, optMet bool
	}{
		{"01", 64, false, false},
		{"02", 144, false, true},
		{"03", 176, true, true},
		{"08", 128, true, true},
	}
	for _, g := range goals {
		t.Run("cluster"+g.cluster, func(t *testing.T) {
			jobs, setup := clusterJobs(t, g.cluster)
			runs := []Run{{Owned: 0, Estimates: "all-cloud", Jobs: jobs}}
			for _, ref := range []bool{false, true} {
				for n := g.refOpt - 32; n <= g.refOpt+32; n += 16 {
					label := map[bool]string{false: "learned", true: "reference"}[ref]
					runs = append(runs, Run{Owned: n, Estimates: label, Jobs: jobs, Reference: ref})
				}
			}
			sums, err := RunAll(context.Background(), setup, runs)
			if err != nil {
				t.Fatal(err)
			}
			allCloud, pol, ref := sums[0], sums[1:6], sums[6:]
			worstWait := 0.0
			for k := range pol {
				l, r := pol[k], ref[k]
				cr, wr := l.TotalCostUSD/r.TotalCostUSD, l.Wait.MeanS/r.Wait.MeanS
				worstWait = max(worstWait, wr)
				t.Logf("%3d owned: cost %.3f× the reference's, mean wait %.2f× (%.1f / %.1f min), p95 %.2f h, cloud jobs %d / %d",
					l.Owned, cr, wr, l.Wait.MeanS/60, r.Wait.MeanS/60, l.Wait.P95S/3600, l.CloudJobs, r.CloudJobs)
				if l.Refused+l.Stuck+len(l.Violations) > 0 {
					t.Errorf("%d owned: refused %d, stuck %d, violations %v", l.Owned, l.Refused, l.Stuck, l.Violations)
				}
				if cr > 1.05 {
					t.Errorf("%d owned: cost %.3f× the reference's; want ≤ 1.05", l.Owned, cr)
				}
				if l.Wait.P95S > (2 * time.Hour).Seconds() {
					t.Errorf("%d owned: p95 wait %.0f s; want ≤ max_wait", l.Owned, l.Wait.P95S)
				}
			}
			if g.waitMet != (worstWait <= 1.5) {
				t.Errorf("worst mean wait %.2f× the reference's; the bound of 1.5× is expected met: %v", worstWait, g.waitMet)
			}
			if ro := ref[Optimum(ref)].Owned; ro != g.refOpt {
				t.Fatalf("the reference's optimum is %d GPUs; the window is centred on %d", ro, g.refOpt)
			}
			po := pol[Optimum(pol)].Owned
			if allCloud.TotalCostUSD < pol[Optimum(pol)].TotalCostUSD {
				po = 0
			}
			t.Logf("optimum: policy %d GPUs, reference %d (all-cloud $%.0f)", po, g.refOpt, allCloud.TotalCostUSD)
			if met := po >= g.refOpt-16 && po <= g.refOpt+16; met != g.optMet {
				t.Errorf("the policy's optimum is %d GPUs, the reference's %d; within one step expected: %v", po, g.refOpt, g.optMet)
			}
		})
	}
}
