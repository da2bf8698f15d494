package policy

import (
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// JobUsage is a job's cost and GPU-hours so far: what cloud attempts
// added to its record, plus a local attempt's GPU-hours (started to
// finished, or to now while it runs, × its GPUs) × its backend's price.
func JobUsage(cfg routecfg.Config, j *jobtype.Job) (usd, gpuHours float64) {
	usd = j.CostUSD
	if j.StartedAt == nil || j.Route == nil {
		return usd, 0
	}
	end := j.UpdatedAt
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	}
	h := end.Sub(*j.StartedAt).Hours()
	if h < 0 {
		h = 0
	}
	gpuHours = h * float64(j.Spec.Resources.GPUs)
	if b, ok := cfg.Backend(j.Route.Backend); ok && b.Kind == routecfg.KindLocal {
		usd += gpuHours * b.USDPerGPUHour()
	}
	return usd, gpuHours
}
