package sim

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// WaitStats are the waits of a set of jobs, in seconds: from submit to the
// start of the first run (a burst job's: until it started in the cloud).
type WaitStats struct {
	Jobs  int     `json:"jobs"`
	MeanS float64 `json:"mean_s"`
	P50S  float64 `json:"p50_s"`
	P95S  float64 `json:"p95_s"`
	P99S  float64 `json:"p99_s"`
}

// Summary is what `lathe simulate` reports of one run.
type Summary struct {
	Owned     int    `json:"owned_gpus"`
	Estimates string `json:"estimates"`
	Jobs      int    `json:"jobs"`
	// Refused: no backend could take the job; Stuck: it never started.
	Refused int `json:"refused"`
	Stuck   int `json:"stuck"`
	// Costs over the horizon: owned GPUs every hour at their price, plus
	// cloud instance hours at theirs.
	TotalCostUSD float64 `json:"total_cost_usd"`
	OwnedCostUSD float64 `json:"owned_cost_usd"`
	CloudCostUSD float64 `json:"cloud_cost_usd"`
	HorizonH     float64 `json:"horizon_h"`
	// JobGPUHours is the GPU-hours the jobs ran; CostPerJobGPUHour the total
	// cost over them.
	JobGPUHours       float64 `json:"job_gpu_hours"`
	CostPerJobGPUHour float64 `json:"cost_per_job_gpu_hour_usd"`
	// RentedShare of the job GPU-hours ran in the cloud.
	RentedShare float64 `json:"rented_share"`
	// OwnedUtilisation is the owned GPU-hours used over those owned during
	// the horizon, or the run's makespan when queueing made that longer.
	OwnedUtilisation float64              `json:"owned_utilisation"`
	Wait             WaitStats            `json:"wait"`
	ByPriority       map[string]WaitStats `json:"wait_by_priority"`
	CloudJobs        int                  `json:"cloud_jobs"`
	Preemptions      int                  `json:"preemptions"`
	// Interruptions is how many spot interruptions the cloud jobs had;
	// LostGPUHours the work they lost (run since the last checkpoint),
	// LostCostUSD what the instances cost while doing it (in CloudCostUSD).
	Interruptions int     `json:"spot_interruptions,omitempty"`
	LostGPUHours  float64 `json:"lost_gpu_hours,omitempty"`
	LostCostUSD   float64 `json:"lost_cost_usd,omitempty"`
	// Violations are residency violations the simulator found: none, or a
	// bug to report.
	Violations []string `json:"residency_violations"`
	Rounds     int      `json:"placement_rounds,omitempty"`
	Decisions  int      `json:"routing_decisions,omitempty"`
}

// Summarize reports res, a run over jobs.
func Summarize(res Result, jobs []Job, owned int, estimates string) Summary {
	s := Summary{Owned: owned, Estimates: estimates, Jobs: len(jobs), OwnedCostUSD: res.OwnedCostUSD,
		CloudCostUSD: res.CloudCostUSD, TotalCostUSD: res.OwnedCostUSD + res.CloudCostUSD,
		HorizonH: res.Horizon.Hours(), Violations: res.Violations, Rounds: res.Rounds, Decisions: res.Decisions,
		ByPriority: map[string]WaitStats{}}
	s.Interruptions, s.LostGPUHours, s.LostCostUSD = interruptionTotals(res.Interruptions)
	if s.Violations == nil {
		s.Violations = []string{}
	}
	all := []float64{}
	by := map[string][]float64{}
	for i, o := range res.Jobs {
		switch {
		case o.Refused:
			s.Refused++
			continue
		case o.Stuck:
			s.Stuck++
			continue
		}
		if o.Cloud {
			s.CloudJobs++
		}
		s.Preemptions += o.Preemptions
		s.JobGPUHours += jobs[i].Duration.Hours() * float64(jobs[i].GPUs)
		w := o.Wait.Seconds()
		all = append(all, w)
		p := string(jobs[i].Priority)
		if p == "" {
			p = string(jobspec.PriorityNormal)
		}
		by[p] = append(by[p], w)
	}
	s.Wait = waitStats(all)
	for p, ws := range by {
		s.ByPriority[p] = waitStats(ws)
	}
	if s.JobGPUHours > 0 {
		s.CostPerJobGPUHour = s.TotalCostUSD / s.JobGPUHours
		s.RentedShare = res.CloudGPUHours / s.JobGPUHours
	}
	// Over the horizon, or the run's makespan when queueing made it longer.
	if h := float64(owned) * max(res.Horizon, res.Makespan).Hours(); h > 0 {
		s.OwnedUtilisation = res.OwnedBusyGPUHours / h
	}
	return s
}

func waitStats(ws []float64) WaitStats {
	st := WaitStats{Jobs: len(ws)}
	if len(ws) == 0 {
		return st
	}
	sum := 0.0
	for _, w := range ws {
		sum += w
	}
	st.MeanS = sum / float64(len(ws))
	st.P50S = Quantile(ws, 0.50)
	st.P95S = Quantile(ws, 0.95)
	st.P99S = Quantile(ws, 0.99)
	return st
}

// Run is one run of a sweep: a pool size and an estimator.
type Run struct {
	Owned int
	// Estimates labels the run (learned, hint:1, oracle, reference).
	Estimates string
	// Jobs are the jobs with the estimates' hints set.
	Jobs []Job
	// Reference runs the clairvoyant reference instead of the policy.
	Reference bool
}

// RunAll runs each of runs over setup (Owned replaced by the run's)
// on up to GOMAXPROCS goroutines and summarizes them, in runs' order.
func RunAll(ctx context.Context, setup Setup, runs []Run) ([]Summary, error) {
	return RunAllNotify(ctx, setup, runs, nil)
}

// RunAllNotify is RunAll that calls done, when not nil, as each run
// ends well, with its index in runs and its Summary: one call at a time,
// in the order the runs end (a sweep's progress).
func RunAllNotify(ctx context.Context, setup Setup, runs []Run, done func(i int, s Summary)) ([]Summary, error) {
	var mu sync.Mutex
	out := make([]Summary, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			su := setup
			su.Owned = r.Owned
			var res Result
			var err error
			if r.Reference {
				res, err = Reference(su, r.Jobs)
			} else {
				res, err = Simulate(ctx, su, r.Jobs)
			}
			if err != nil {
				errs[i] = fmt.Errorf("owned %d, %s: %w", r.Owned, r.Estimates, err)
				return
			}
			out[i] = Summarize(res, r.Jobs, r.Owned, r.Estimates)
			if done != nil {
				mu.Lock()
				defer mu.Unlock()
				done(i, out[i])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Optimum is the index of the cheapest run among sums (the first of equals).
func Optimum(sums []Summary) int {
	best := -1
	for i, s := range sums {
		if best < 0 || s.TotalCostUSD < sums[best].TotalCostUSD {
			best = i
		}
	}
	return best
}

// BreakEven is the pool size above which owning costs more than renting
// every GPU-hour (allCloud, the cost with no owned GPUs): the last crossing
// of allCloud from below, interpolated between the runs of sums (ascending
// by Owned). When the last run is still below allCloud it is extrapolated
// (extrapolated true): past the last run each owned GPU is taken to add its
// price for the horizon and save nothing more, so the answer is where that
// line meets allCloud — a lower bound on the pool size, as more GPUs still
// save a little cloud and push the crossing further. 0 when no run is below
// allCloud.
func BreakEven(sums []Summary, allCloud float64) (owned float64, extrapolated bool) {
	for i := len(sums) - 1; i > 0; i-- {
		a, b := sums[i-1], sums[i]
		if a.TotalCostUSD <= allCloud && b.TotalCostUSD > allCloud {
			f := (allCloud - a.TotalCostUSD) / (b.TotalCostUSD - a.TotalCostUSD)
			return float64(a.Owned) + f*float64(b.Owned-a.Owned), false
		}
	}
	if len(sums) == 0 {
		return 0, false
	}
	last := sums[len(sums)-1]
	if last.TotalCostUSD > allCloud || last.Owned == 0 || last.OwnedCostUSD <= 0 {
		return 0, false
	}
	perGPU := last.OwnedCostUSD / float64(last.Owned) // one owned GPU over the horizon
	return float64(last.Owned) + (allCloud-last.TotalCostUSD)/perGPU, true
}
