//go:build !race

// The four-cluster replays are one goroutine's CPU work a run, about 7×
// slower under the race detector (20 minutes, not 2); scripts/test.sh
// runs this file without -race, after the race run of everything else,
// which covers RunAll's goroutines (TestSimulateAgainstReference and
// others).

package sim

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// clusterGoal is what TestSimulateFourClusters expects of one cluster
// under one workload: the reference's optimum (the sweep runs 64 GPUs
// either side of it, 16 apart, and the bounds are checked at the five
// sizes centred on it) and, per bound of issue #25, whether it is met.
type clusterGoal struct {
	cluster              string
	refOpt               int
	cost, wait, p95, opt bool // met: cost ≤ 1.05×, mean wait ≤ 1.5×, p95 ≤ max_wait, optimum within a step
}

// TestSimulateFourClusters is issue #25's goal on the four shared clusters
// (owned $1 and cloud $4 per GPU-hour, max_wait 2h, learned estimates), as
// the trace is, with arrivals ×1.5, and with the residency mix (20%
// [onprem] only, 10% [us] only: one cloud site), as far as it is met today
// (docs/simulate.md, "The four shared clusters"). At the five sizes
// centred on the reference's optimum: cost ≤ 1.05× the reference's, mean
// wait ≤ 1.5× its, p95 wait ≤ max_wait (with the mix: or no more than the
// reference's, as [onprem] jobs may not burst); and the sweep's optimum,
// all-cloud a candidate, within one 16-GPU step of the reference's.
//
// A bound not met would be asserted the other way round, so that this
// test fails, and is updated, the day it is met. Every bound is met since
// routing weighs a local wait by the odds of a start in time
// (routing.stayOdds, 7 December 2026); before, cluster01's mean wait at 48
// GPUs (1.58×, 1.65× with arrivals ×1.5) and cluster03's optimum with
// arrivals ×1.5 (320 against 288) were missed.
func TestSimulateFourClusters(t *testing.T) {
	variants := []struct {
		name     string
		arrivals float64
		mix      string
		goals    []clusterGoal
	}{
		{"as-is", 1, "", []clusterGoal{
			{"01", 64, true, true, true, true},
			{"02", 144, true, true, true, true},
			{"03", 176, true, true, true, true},
			{"08", 128, true, true, true, true},
		}},
		{"arrivals-x1.5", 1.5, "", []clusterGoal{
			{"01", 64, true, true, true, true},
			{"02", 208, true, true, true, true},
			{"03", 288, true, true, true, true},
			{"08", 144, true, true, true, true},
		}},
		{"residency-mix", 1, "onprem=0.2,us=0.1,eu=0.7", []clusterGoal{
			{"01", 64, true, true, true, true},
			{"02", 128, true, true, true, true},
			{"03", 176, true, true, true, true},
			{"08", 80, true, true, true, true},
		}},
	}
	for _, v := range variants {
		for _, g := range v.goals {
			t.Run(v.name+"/cluster"+g.cluster, func(t *testing.T) {
				checkCluster(t, g, v.arrivals, v.mix)
			})
		}
	}
}

func checkCluster(t *testing.T, g clusterGoal, arrivals float64, mix string) {
	_, setup := simTrace(t)
	d := Draws{Seed: 1}
	if mix != "" {
		var err error
		if d.Residency, err = ParseMix("--residency-mix", mix, ValidResidency); err != nil {
			t.Fatal(err)
		}
	}
	jobs := ScaleArrivals(clusterJobs(t, g.cluster, d), arrivals)
	runs := []Run{{Owned: 0, Estimates: "all-cloud", Jobs: jobs}}
	from, to := max(g.refOpt-64, 16), g.refOpt+64
	n := (to-from)/16 + 1
	for _, ref := range []bool{false, true} {
		label := map[bool]string{false: "learned", true: "reference"}[ref]
		for owned := from; owned <= to; owned += 16 {
			runs = append(runs, Run{Owned: owned, Estimates: label, Jobs: jobs, Reference: ref})
		}
	}
	sums, err := RunAll(context.Background(), setup, runs)
	if err != nil {
		t.Fatal(err)
	}
	allCloud, pol, ref := sums[0], sums[1:1+n], sums[1+n:]
	// A pool too small for an [onprem] job refuses it (no backend may run
	// it): such runs did less work and are no candidates, as in `lathe
	// simulate`, and the reference must refuse the same.
	var cands, refCands []Summary
	worstCost, worstWait, p95Met := 0.0, 0.0, true
	for k := range pol {
		l, r := pol[k], ref[k]
		if l.Stuck+len(l.Violations) > 0 || l.Refused != r.Refused {
			t.Errorf("%d owned: refused %d (the reference %d), stuck %d, violations %v", l.Owned, l.Refused, r.Refused, l.Stuck, l.Violations)
		}
		if l.Refused > 0 {
			continue
		}
		cands, refCands = append(cands, l), append(refCands, r)
		if l.Owned < g.refOpt-32 || l.Owned > g.refOpt+32 {
			continue
		}
		cr, wr := l.TotalCostUSD/r.TotalCostUSD, l.Wait.MeanS/r.Wait.MeanS
		worstCost, worstWait = max(worstCost, cr), max(worstWait, wr)
		p95Met = p95Met && l.Wait.P95S <= max((2*time.Hour).Seconds(), r.Wait.P95S)
		t.Logf("%3d owned: cost %.3f× the reference's, mean wait %.2f× (%.1f / %.1f min), p95 %.2f h (reference %.2f h), cloud jobs %d / %d",
			l.Owned, cr, wr, l.Wait.MeanS/60, r.Wait.MeanS/60, l.Wait.P95S/3600, r.Wait.P95S/3600, l.CloudJobs, r.CloudJobs)
	}
	optimum := func(s []Summary) int {
		// All-cloud is a candidate unless it refused jobs (an [onprem]
		// job may not be rented): then it did less work.
		if o := s[Optimum(s)]; allCloud.Refused > 0 || o.TotalCostUSD < allCloud.TotalCostUSD {
			return o.Owned
		}
		return 0
	}
	po, ro := optimum(cands), optimum(refCands)
	t.Logf("WORST cost %.3f wait %.2f p95 %v opt %d/%d", worstCost, worstWait, p95Met, optimum(cands), optimum(refCands))
	t.Logf("optimum: policy %d GPUs, reference %d (all-cloud $%.0f)", po, ro, allCloud.TotalCostUSD)
	if ro != g.refOpt {
		t.Fatalf("the reference's optimum is %d GPUs; the bounds are checked around %d", ro, g.refOpt)
	}
	for _, b := range []struct {
		what      string
		met, want bool
	}{
		{fmt.Sprintf("cost ≤ 1.05× the reference's (worst %.3f×)", worstCost), worstCost <= 1.05, g.cost},
		{fmt.Sprintf("mean wait ≤ 1.5× the reference's (worst %.2f×)", worstWait), worstWait <= 1.5, g.wait},
		{"p95 wait ≤ max_wait (or the reference's)", p95Met, g.p95},
		{fmt.Sprintf("optimum within one step (%d GPUs, the reference's %d)", po, ro), po >= ro-16 && po <= ro+16, g.opt},
	} {
		if b.met != b.want {
			t.Errorf("%s: met %v, expected %v", b.what, b.met, b.want)
		}
	}
}
