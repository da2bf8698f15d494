package wire

import "time"

// Explanation is the answer of POST /api/v1/route: the routing decision
// the scheduler would make for a spec now, and the hash of the routing
// config it was made under. Nothing is stored or recorded.
type Explanation struct {
	Decision
	ConfigHash string `json:"config_hash"`
}

// Decision is where a job goes and why, as the API shows it: the JSON of
// scheduler/routing's Decision, field for field (the scheduler converts,
// and its tests hold the two equal). A refusal is a Decision with Refused
// set and Backend "".
type Decision struct {
	// Backend and Site chosen; "" when refused.
	Backend string `json:"backend"`
	Site    string `json:"site"`
	// Refused: no backend is feasible (a submit answers 422 with Reasons).
	Refused bool `json:"refused"`
	// Waiting: the chosen backend is local and its estimated wait is beyond
	// max_wait (or unknown); the job stays queued for the local pool and
	// may spill over later (docs/routing.md).
	Waiting bool `json:"waiting"`
	// Residency is the effective residency tags.
	Residency []string `json:"residency"`
	Reasons   []string `json:"reasons"`
	// Candidates holds every backend, in config order.
	Candidates  []Candidate   `json:"candidates"`
	Staging     []Staging     `json:"staging"`
	EstRuntime  time.Duration `json:"est_runtime_ns"`
	EstGPUHours float64       `json:"est_gpu_hours"`
	EstCostUSD  float64       `json:"est_cost_usd"`
	// Trade shows the wait-vs-burst arithmetic when the job has
	// value_per_hour_usd.
	Trade string `json:"trade,omitempty"`
}

// Candidate is one backend as a Decision weighed it.
type Candidate struct {
	Backend  string `json:"backend"`
	Site     string `json:"site"`
	Kind     string `json:"kind"`
	Feasible bool   `json:"feasible"`
	// Reason is "" when feasible, else why not (a reason code, ": ", and
	// the details).
	Reason string `json:"reason"`
	// EstWaitS is the estimated wait in seconds; -1: unknown (a local pool
	// with no healthy GPUs). A cloud backend's is its startup (0 when the
	// config gives none).
	EstWaitS    float64 `json:"est_wait_s"`
	EstCostUSD  float64 `json:"est_cost_usd"`
	EstRuntimeS float64 `json:"est_runtime_s"`
	// InstanceType chosen on a cloud backend (the cheapest that fits).
	InstanceType string `json:"instance_type,omitempty"`
	Spot         bool   `json:"spot,omitempty"`
}

// Staging is data a decision moves between sites.
type Staging struct {
	// What: "dataset", "eval dataset", "checkpoints", "output", "raw logs".
	What     string `json:"what"`
	URI      string `json:"uri"`
	FromSite string `json:"from_site"`
	ToSite   string `json:"to_site"`
}
