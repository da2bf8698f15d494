package wire

import (
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// SweepStatus is the answer of GET /api/v1/sweeps/{id} (and of a sweep
// submit): the sweep's record, its trials counted by state, and the
// leaderboard, best first (docs/sweeps.md).
type SweepStatus struct {
	Sweep *jobtype.Sweep `json:"sweep"`
	// Best is the best trial's id with an objective ("" while none has
	// one), BestSucceeded the best that succeeded (whose adapter
	// `lathe sweep pull --best` fetches).
	Best          string     `json:"best,omitempty"`
	BestSucceeded string     `json:"best_succeeded,omitempty"`
	Leaderboard   []TrialRow `json:"leaderboard"`
}

// TrialRow is one trial of a leaderboard.
type TrialRow struct {
	ID     string          `json:"id"`
	Index  int             `json:"index"`
	Params []jobtype.Param `json:"params"`
	State  jobtype.State   `json:"state"`
	Reason string          `json:"reason,omitempty"`
	// Gate says why a trial not admitted yet waits.
	Gate string `json:"gate,omitempty"`
	Rung int    `json:"rung"`
	// Objective is the trial's last objective value and Step the step it
	// was measured at (nil while the trial has none).
	Objective *float64   `json:"objective,omitempty"`
	Step      int        `json:"step,omitempty"`
	GPUHours  float64    `json:"gpu_hours"`
	CostUSD   float64    `json:"cost_usd"`
	Started   *time.Time `json:"started_at,omitempty"`
	Finished  *time.Time `json:"finished_at,omitempty"`
}

// SweepList is one page of GET /api/v1/sweeps, newest first.
type SweepList struct {
	Sweeps     []*jobtype.Sweep `json:"sweeps"`
	NextCursor string           `json:"next_cursor"`
}

// SweepDryRun is the answer of POST /api/v1/sweeps?dry_run=1: the trials
// the spec expands to, each with its routing decision; nothing is stored.
type SweepDryRun struct {
	DryRun bool          `json:"dry_run"` // always true
	Trials []DryRunTrial `json:"trials"`
	Search string        `json:"search"`
}

// DryRunTrial is one trial of a SweepDryRun.
type DryRunTrial struct {
	Index  int                `json:"index"`
	Params []jobtype.Param    `json:"params"`
	Route  *jobtype.RouteInfo `json:"route"`
}

// SweepCancelled is the answer of POST /api/v1/sweeps/{id}/cancel.
type SweepCancelled struct {
	Sweep *jobtype.Sweep `json:"sweep"`
	// Trials is how many trials were cancelled at once or asked to stop.
	Trials int `json:"trials"`
}
