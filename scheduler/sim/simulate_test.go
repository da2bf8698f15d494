package sim

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSimulateAgainstReference is issue #15's first must-show: on the
// shared trace, owned GPUs at $1/GPU-h, cloud at $4/GPU-h, max_wait 2h,
// learned estimates, for 64 and 128 owned GPUs the policy's total cost is
// at most 1.05× the clairvoyant reference's and its mean wait at most 1.5×,
// with p95 wait ≤ 2h; hint:1.0 and oracle are held to the same.
func TestSimulateAgainstReference(t *testing.T) {
	jobs, setup := simTrace(t)
	var runs []Run
	for _, owned := range []int{64, 128} {
		runs = append(runs, Run{Owned: owned, Estimates: "reference", Jobs: jobs, Reference: true})
		for _, e := range []Estimator{{Kind: "learned"}, {Kind: "hint", Sigma: 1}, {Kind: "oracle"}} {
			runs = append(runs, Run{Owned: owned, Estimates: e.String(), Jobs: WithEstimates(jobs, e, 1)})
		}
	}
	sums, err := RunAll(context.Background(), setup, runs)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(sums); i += 4 {
		ref := sums[i]
		for _, s := range sums[i : i+4] {
			t.Logf("%3d owned %-9s total $%.0f (%.3f× ref) mean wait %5.0fs (%.2f× ref) p95 %5.0fs cloud jobs %d violations %d",
				s.Owned, s.Estimates, s.TotalCostUSD, s.TotalCostUSD/ref.TotalCostUSD, s.Wait.MeanS, s.Wait.MeanS/ref.Wait.MeanS,
				s.Wait.P95S, s.CloudJobs, len(s.Violations))
			if len(s.Violations) > 0 || s.Refused > 0 || s.Stuck > 0 {
				t.Errorf("%d owned, %s: violations %v, refused %d, stuck %d", s.Owned, s.Estimates, s.Violations, s.Refused, s.Stuck)
			}
			if s.Jobs != len(jobs) || s.Wait.Jobs != len(jobs) {
				t.Errorf("%d owned, %s: %d jobs, %d waits; want %d", s.Owned, s.Estimates, s.Jobs, s.Wait.Jobs, len(jobs))
			}
		}
		if sums[i+1].Estimates != "learned" {
			t.Fatalf("run order: %s", sums[i+1].Estimates)
		}
		// The issue asks this of learned estimates; hint:1.0 and oracle
		// are held to it too.
		for _, l := range sums[i+1 : i+4] {
			if r := l.TotalCostUSD / ref.TotalCostUSD; r > 1.05 {
				t.Errorf("%d owned, %s: total cost %.3f× the reference's; want ≤ 1.05", l.Owned, l.Estimates, r)
			}
			if r := l.Wait.MeanS / ref.Wait.MeanS; r > 1.5 {
				t.Errorf("%d owned, %s: mean wait %.2f× the reference's; want ≤ 1.5", l.Owned, l.Estimates, r)
			}
			if l.Wait.P95S > 2*3600 {
				t.Errorf("%d owned, %s: p95 wait %.0fs; want ≤ 2h", l.Owned, l.Estimates, l.Wait.P95S)
			}
		}
	}
}

// TestSimulateSweepOptimum is the second: over 32..256/32 the policy's
// cost-optimal pool is within one step of the reference's, in 128–160,
// neither end of the range, and owning beats renting everything.
func TestSimulateSweepOptimum(t *testing.T) {
	jobs, setup := simTrace(t)
	var runs []Run
	for _, ref := range []bool{false, true} {
		label := "learned"
		if ref {
			label = "reference"
		}
		for n := 0; n <= 256; n += 32 {
			runs = append(runs, Run{Owned: n, Estimates: label, Jobs: jobs, Reference: ref})
		}
	}
	sums, err := RunAll(context.Background(), setup, runs)
	if err != nil {
		t.Fatal(err)
	}
	pol, ref := sums[1:9], sums[10:]
	allCloud := sums[0].TotalCostUSD
	po, ro := pol[Optimum(pol)].Owned, ref[Optimum(ref)].Owned
	be, extra := BreakEven(pol, allCloud)
	t.Logf("optimum: policy %d GPUs ($%.0f), reference %d GPUs ($%.0f); all-cloud $%.0f; break-even %.0f (extrapolated %v)",
		po, pol[Optimum(pol)].TotalCostUSD, ro, ref[Optimum(ref)].TotalCostUSD, allCloud, be, extra)
	if !(be > 256) || !extra {
		t.Errorf("break-even %.1f (extrapolated %v); want past 256, extrapolated", be, extra)
	}
	// Within one step of the sweep (issue #25's bound; on a 16-GPU sweep
	// both are at 144, TestSimulateFourClusters).
	if po < ro-32 || po > ro+32 {
		t.Errorf("the policy's optimum is %d GPUs, the reference's %d: more than one step apart", po, ro)
	}
	if po < 128 || po > 160 {
		t.Errorf("optimum %d GPUs; want 128–160 for this trace at these prices", po)
	}
	if !(pol[Optimum(pol)].TotalCostUSD < allCloud) {
		t.Errorf("the optimum costs $%.0f, all-cloud $%.0f: it says rent everything", pol[Optimum(pol)].TotalCostUSD, allCloud)
	}
	if math.Abs(sums[0].RentedShare-1) > 1e-9 || sums[0].OwnedCostUSD != 0 {
		t.Errorf("all-cloud run: rented share %v, owned cost %v", sums[0].RentedShare, sums[0].OwnedCostUSD)
	}
}

// TestSimulateResidencyMix is the third: with a mix where some jobs may
// run only on owned GPUs ([onprem]) and others only in one cloud site
// ([us]), every start the simulator checks is legal, and each kind of job
// ran only where it may.
func TestSimulateResidencyMix(t *testing.T) {
	all, setup := simTrace(t)
	tjobs := all[:1500]
	mix, err := ParseMix("--residency-mix", "onprem=0.6,eu=0.3,us=0.1", ValidResidency)
	if err != nil {
		t.Fatal(err)
	}
	// Draw the mix over the trace's jobs as lathe simulate does.
	jobs := slices.Clone(tjobs)
	for i := range jobs {
		jobs[i].Residency = []string{pick(mix, float64(i%10)/10+0.05)}
	}
	setup.Owned = 64
	res, err := Simulate(context.Background(), setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) > 0 {
		t.Fatalf("residency violations: %v", res.Violations[:min(5, len(res.Violations))])
	}
	where := map[string]map[string]int{}
	for i, o := range res.Jobs {
		tag := jobs[i].Residency[0]
		if where[tag] == nil {
			where[tag] = map[string]int{}
		}
		switch {
		case o.Refused:
			where[tag]["refused"]++
		case o.Stuck:
			where[tag]["stuck"]++
		default:
			where[tag][o.Backend]++
		}
	}
	t.Logf("where each residency ran: %v", where)
	if where["onprem"]["aws-eu"]+where["onprem"]["aws-us"] > 0 || where["onprem"]["owned"] == 0 {
		t.Errorf("[onprem] jobs: %v; want owned only", where["onprem"])
	}
	if where["us"]["owned"]+where["us"]["aws-eu"] > 0 || where["us"]["aws-us"] == 0 {
		t.Errorf("[us] jobs: %v; want aws-us only", where["us"])
	}
	if where["eu"]["aws-us"] > 0 || where["eu"]["owned"] == 0 || where["eu"]["aws-eu"] == 0 {
		t.Errorf("[eu] jobs: %v; want owned and aws-eu, never aws-us", where["eu"])
	}
	for tag, w := range where {
		if w["refused"]+w["stuck"] > 0 {
			t.Errorf("[%s] jobs: %v refused or stuck", tag, w)
		}
	}
}

// TestSimulateChecksResidencyItself shows the simulator's own check is not
// routing's: a start on a backend whose site lacks a tag is a violation.
func TestSimulateChecksResidencyItself(t *testing.T) {
	_, setup := simTrace(t)
	setup.Owned = 8
	jobs := []Job{{ID: "j1", Duration: time.Hour, GPUs: 1, Residency: []string{"us"}}}
	sm, err := newSim(setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	sj := &sm.jobs[0]
	sj.job.OutputURI = sm.outputFor(sj)
	sm.checkResidency(sj, sm.local) // dc carries onprem and eu, not us
	if len(sm.res.Violations) == 0 || !strings.Contains(sm.res.Violations[0], "computes on owned") {
		t.Fatalf("violations %v; want the owned pool named", sm.res.Violations)
	}
}

// TestSimulateSmall checks the mechanics on a hand-made workload: a full
// pool makes the second job wait, a job over max_wait bursts, the costs
// add up, and the learned estimate follows what ended.
func TestSimulateSmall(t *testing.T) {
	_, setup := simTrace(t)
	setup.Owned, setup.MaxWait = 8, time.Hour
	jobs := []Job{
		{ID: "a", Submit: 0, Duration: 30 * time.Minute, GPUs: 8},
		{ID: "b", Submit: time.Minute, Duration: time.Hour, GPUs: 8},          // waits for a: 29 minutes
		{ID: "c", Submit: 2 * time.Minute, Duration: 10 * time.Hour, GPUs: 4}, // behind b: may wait, or burst
	}
	res, err := Simulate(context.Background(), setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	a, b := res.Jobs[0], res.Jobs[1]
	if a.Wait != 0 || a.Cloud || b.Cloud || b.Wait != 29*time.Minute {
		t.Fatalf("a %+v, b %+v; want a at once and b on owned GPUs after 29m", a, b)
	}
	horizon := 2*time.Minute + 10*time.Hour
	if res.Horizon != horizon || res.OwnedCostUSD != 8*horizon.Hours()*1 {
		t.Errorf("horizon %s owned cost %v; want %s and $%v", res.Horizon, res.OwnedCostUSD, horizon, 8*horizon.Hours())
	}
	var cloud float64
	for _, o := range res.Jobs {
		cloud += o.CostUSD
	}
	if cloud != res.CloudCostUSD {
		t.Errorf("cloud cost %v; jobs sum to %v", res.CloudCostUSD, cloud)
	}
	var l learner
	if got, got2 := l.queued(1), l.running(1, 0); got != learnDefault || got2 != learnDefault {
		t.Errorf("empty learner: %s %s", got, got2)
	}
	for _, d := range []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 10 * time.Hour} {
		l.add(1, d)
	}
	if got := l.queued(1); got != 3*time.Hour {
		t.Errorf("queued: %s; want the median 3h", got)
	}
	if got := l.queued(8); got != 3*time.Hour {
		t.Errorf("queued 8-GPU job with none ended: %s; want all jobs' median 3h", got)
	}
	// Running: the 0.25 quantile of those that ran longer than it has.
	if got := l.running(1, 0); got != 2*time.Hour {
		t.Errorf("running, 0 elapsed: %s; want 2h (the 0.25 quantile of 1h…10h)", got)
	}
	if got := l.running(1, 150*time.Minute); got != 3*time.Hour {
		t.Errorf("running, 2h30m elapsed: %s; want 3h (of 3h, 4h, 10h)", got)
	}
	if got := l.running(1, 12*time.Hour); got != 24*time.Hour {
		t.Errorf("running past every job seen: %s; want as much again, 24h", got)
	}
}

// TestScaleArrivals: the same jobs, submits divided by the factor, run
// times and the input untouched.
func TestScaleArrivals(t *testing.T) {
	jobs := []Job{{ID: "a", Submit: 0, Duration: time.Hour}, {ID: "b", Submit: 3 * time.Hour, Duration: 2 * time.Hour}}
	got := ScaleArrivals(jobs, 1.5)
	if got[0].Submit != 0 || got[1].Submit != 2*time.Hour || got[1].Duration != 2*time.Hour || jobs[1].Submit != 3*time.Hour {
		t.Fatalf("scaled %+v (input now %+v); want b at 2h, its 2h run kept, the input as it was", got, jobs)
	}
	if same := ScaleArrivals(jobs, 1); &same[0] != &jobs[0] {
		t.Error("factor 1 copied the jobs")
	}
}

// TestSimulateBadInput: errors name the field and the value.
func TestSimulateBadInput(t *testing.T) {
	_, setup := simTrace(t)
	for _, c := range []struct {
		name string
		mod  func(*Setup, *[]Job)
		want string
	}{
		{"negative owned", func(s *Setup, _ *[]Job) { s.Owned = -1 }, "owned GPUs -1"},
		{"repeated id", func(_ *Setup, j *[]Job) { *j = append(*j, (*j)[0]) }, `id "x"`},
		{"unsorted", func(_ *Setup, j *[]Job) { *j = []Job{{ID: "x", Submit: 5}, {ID: "y", Submit: 1}} }, "not sorted"},
	} {
		s := setup
		jobs := []Job{{ID: "x", Duration: time.Hour, GPUs: 1}}
		c.mod(&s, &jobs)
		if _, err := Simulate(context.Background(), s, jobs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	for _, bad := range []string{"onprem", "onprem=x", "onprem=0", "On Prem=1", "eu=1,eu=2"} {
		if _, err := ParseMix("--residency-mix", bad, ValidResidency); err == nil || !strings.Contains(err.Error(), "--residency-mix") {
			t.Errorf("ParseMix(%q): %v", bad, err)
		}
	}
	for _, bad := range []string{"hint", "hint:-1", "hint:x", "psychic"} {
		if _, err := ParseEstimator(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseEstimator(%q): %v", bad, err)
		}
	}
}
