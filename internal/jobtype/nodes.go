package jobtype

import "time"

// NodeInfo is one live worker node as GET /api/v1/nodes and
// `lathe nodes -o json` show it: its heartbeat, and what is held on it.
type NodeInfo struct {
	Name        string    `json:"name"`
	Backend     string    `json:"backend"`
	Host        string    `json:"host,omitempty"`
	Incarnation string    `json:"incarnation"`
	StartedAt   time.Time `json:"started_at"`
	// SeenAt is the node's last heartbeat.
	SeenAt time.Time `json:"seen_at"`
	// Slots is how many CPU-only jobs the node runs at once; CPUReserved
	// how many of them hold a slot now.
	Slots       int `json:"slots"`
	CPUReserved int `json:"cpu_reserved"`
	// GPUs counts the node's GPUs; GPUsFree those healthy and held by no
	// job; GPUsUnhealthy those that get no new work.
	GPUs          int `json:"gpus"`
	GPUsFree      int `json:"gpus_free"`
	GPUsUnhealthy int `json:"gpus_unhealthy"`
	// Driver and CUDA are the NVIDIA driver and CUDA versions ("" without).
	Driver string `json:"driver,omitempty"`
	CUDA   string `json:"cuda,omitempty"`
	// Simulated is true when the GPUs are go-nvml's mock servers.
	Simulated      bool   `json:"simulated"`
	CheckpointRoot string `json:"checkpoint_root,omitempty"`
	// Jobs are the ids of the jobs holding a reservation (GPUs or a CPU
	// slot) on the node, sorted; never null.
	Jobs []string `json:"jobs"`
}

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
