package jobtype

import (
	"encoding/json"
	"time"
)

// Sweep trials are ordinary jobs (docs/sweeps.md): each is validated,
// routed, placed, leased, retried, cancelled and audited like any job, and
// carries a TrialInfo naming its sweep. The sweep's own record is a Sweep.

// Reasons a trial ends stopped (Job.Reason) or waits (TrialInfo.Gate).
const (
	ReasonSweepBudget    = "sweep budget"    // the next trial (or promotion) does not fit the sweep's budget_usd or budget_gpu_hours
	ReasonMaxParallel    = "max_parallel"    // the sweep runs max_parallel trials already
	ReasonNotPromoted    = "not promoted"    // ASHA: not in the top 1/η of its rung when the rung closed
	ReasonMedianStopping = "median"          // worse than the median of the other trials at the same step
	ReasonSweepCancelled = "sweep cancelled" // the sweep was cancelled
)

// Param is one parameter of a trial: the job field's path
// ("training.learning_rate") and the value the trial sets it to.
type Param struct {
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// TrialInfo is what a sweep trial's record adds to a job.
type TrialInfo struct {
	SweepID string `json:"sweep_id"`
	// Index is the trial's place in the sweep, from 0; its job id is
	// derived from the sweep id and Index (jobstore.TrialID).
	Index  int     `json:"index"`
	Params []Param `json:"params"`
	// Rung is the last ASHA rung the trial reached (0-based; 0 for other
	// searches), StopAtStep the step limit of its current attempt (the
	// rung's steps; 0 = run to the job's end).
	Rung       int `json:"rung"`
	StopAtStep int `json:"stop_at_step,omitempty"`
	// Gate says why an unadmitted trial waits for its sweep
	// (ReasonMaxParallel, or ReasonSweepBudget with the figures); "" once
	// admitted (it is then in the pending set like any queued job).
	Gate string `json:"gate,omitempty"`
	// SettledUSD and SettledGPUHours are what the sweep has counted of
	// the trial's cost and GPU-hours so far (its settlements:
	// jobstore.SettleTrial). Internal.
	SettledUSD      float64 `json:"-"`
	SettledGPUHours float64 `json:"-"`
	// StopRequested says why the sweep asked a running trial to stop
	// (ReasonMedianStopping…): its attempt ends stopped, not cancelled.
	StopRequested string `json:"stop_requested,omitempty"`
}

// SweepState is a sweep's lifecycle state.
type SweepState string

// The sweep states: admitting while its trials are being stored (in
// bounded chunks; none of them runs yet), running until every trial has
// ended (done), or cancelled.
const (
	SweepAdmitting SweepState = "admitting"
	SweepRunning   SweepState = "running"
	SweepDone      SweepState = "done"
	SweepCancelled SweepState = "cancelled"
)

// Sweep is a sweep's record as the store holds it and the API returns it.
type Sweep struct {
	ID    string     `json:"id"`
	Name  string     `json:"name"`
	State SweepState `json:"state"`
	// Search is grid, random or asha; Metric and Goal (minimize |
	// maximize) the objective trials are ranked by.
	Search string `json:"search"`
	Metric string `json:"metric"`
	Goal   string `json:"goal"`
	Trials int    `json:"trials"`
	// Stored is how many of its trials are stored so far: Trials once
	// the sweep has left admitting.
	Stored      int `json:"stored"`
	MaxParallel int `json:"max_parallel"`
	// Budgets for the whole sweep (0: none) and what its trials reserved
	// (admitted, not settled) and spent (settled).
	BudgetUSD        float64 `json:"budget_usd,omitempty"`
	BudgetGPUHours   float64 `json:"budget_gpu_hours,omitempty"`
	ReservedUSD      float64 `json:"reserved_usd"`
	SpentUSD         float64 `json:"spent_usd"`
	ReservedGPUHours float64 `json:"reserved_gpu_hours"`
	SpentGPUHours    float64 `json:"spent_gpu_hours"`
	// Stalled says why the sweep admits no more trials now ("" when it
	// does): the next one does not fit its budget.
	Stalled string `json:"stalled,omitempty"`
	// Message says why a sweep's admission was given up (a trial stored
	// late that no backend may run, its spec no longer valid here): the
	// sweep is then cancelled.
	Message   string `json:"message,omitempty"`
	Submitter string `json:"submitter,omitempty"`
	Team      string `json:"team,omitempty"`
	// Schedule and Tick name the schedule tick that made the sweep ("" /
	// nil for a sweep submitted by hand).
	Schedule string     `json:"schedule,omitempty"`
	Tick     *time.Time `json:"tick,omitempty"`
	// Counts is the number of trials in each state (filled in by the API).
	Counts     map[State]int `json:"counts,omitempty"`
	CreatedAt  time.Time     `json:"created_at"`
	UpdatedAt  time.Time     `json:"updated_at"`
	FinishedAt *time.Time    `json:"finished_at,omitempty"`
	// Spec is the sweep spec as admitted (canonical JSON, its base job inline).
	Spec json.RawMessage `json:"spec"`
}
