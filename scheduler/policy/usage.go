package policy

import (
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// JobUsage is a job's cost and GPU-hours so far, the one function every
// figure of money comes from (budget settling, sweep spend, the
// leaderboard): what its cloud attempts' instances cost, plus the time its
// attempts ran on the local pool × its GPUs (nodes × gpus:
// Resources.TotalGPUs) × the local backend's price.
// Ended attempts count from the run time the store added as each left
// running (RunS, LocalRunS); the attempt running now counts to the job's
// last update. It never reads CostUSD, which is this function's figure as
// last settled: reading it would count the job twice.
func JobUsage(cfg routecfg.Config, j *jobtype.Job) (usd, gpuHours float64) {
	return JobUsageAt(cfg, j, j.UpdatedAt)
}

// JobUsageAt is JobUsage with the attempt running now counted to now (a
// running attempt's cost as it accrues: the spend guard's figure).
func JobUsageAt(cfg routecfg.Config, j *jobtype.Job, now time.Time) (usd, gpuHours float64) {
	runS, localS := j.RunS, j.LocalRunS
	local := j.Route == nil || j.Route.Kind == "" || j.Route.Kind == routecfg.KindLocal
	if j.State == jobtype.StateRunning && j.StartedAt != nil {
		if live := now.Sub(*j.StartedAt).Seconds(); live > 0 {
			runS += live
			if local {
				localS += live
			}
		}
	}
	gpus := float64(j.Spec.Resources.TotalGPUs())
	return j.CloudCostUSD + localS/3600*gpus*localPrice(cfg, j), runS / 3600 * gpus
}

// localPrice is the price of a GPU-hour on the local pool j ran on: its
// route's backend when that is a local one, else (its route moved to the
// cloud since) the config's first local backend's; 0 when unpriced.
func localPrice(cfg routecfg.Config, j *jobtype.Job) float64 {
	if j.Route != nil {
		if b, ok := cfg.Backend(j.Route.Backend); ok && b.Kind == routecfg.KindLocal {
			return b.USDPerGPUHour()
		}
	}
	for _, b := range cfg.Backends {
		if b.Kind == routecfg.KindLocal {
			return b.USDPerGPUHour()
		}
	}
	return 0
}
