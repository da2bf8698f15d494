package jobtype

import "time"

// GPUSeries is a job's downsampled GPU series (the worker writes it
// through jobstore), the answer of GET /api/v1/jobs/{id}/gpu.
type GPUSeries struct {
	// Step is the time one point covers (JSON: nanoseconds).
	Step   time.Duration `json:"step_ns"`
	Points []GPUSample   `json:"points"`
}

// GPUSample is one point of a GPUSeries: the mean readings of the job's
// GPUs over the point's step, from time T (unix milliseconds).
type GPUSample struct {
	T    int64        `json:"t"`
	GPUs []GPUReading `json:"gpus"`
}

// GPUReading is one GPU's mean readings in a GPUSample.
type GPUReading struct {
	Index  int     `json:"index"`
	Util   float64 `json:"utilization_pct"`
	MemMB  float64 `json:"memory_used_mb"`
	PowerW float64 `json:"power_w"`
	TempC  float64 `json:"temperature_c"`
}
