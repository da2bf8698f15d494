package wire

import "time"

// Decisions is the answer of GET /api/v1/decisions: the newest routing
// decisions and refusals from the ledger, newest first, of the reader's
// team only unless it reads every team's (Team says which team; "" for
// all). It carries no sequence number or count of the ledger's records,
// which would tell a team how many decisions the others had.
type Decisions struct {
	Team      string        `json:"team,omitempty"`
	Decisions []DecisionRow `json:"decisions"`
}

// DecisionRow is one ledger record of kind "decision" or "refusal", short:
// what was decided about which job, and why.
type DecisionRow struct {
	Time time.Time `json:"time"`
	// Kind is "decision" (a backend was chosen, or the job waits for one)
	// or "refusal" (no backend may run it).
	Kind string `json:"kind"`
	// JobID is "" for a refused submit: nothing was stored.
	JobID   string `json:"job_id,omitempty"`
	JobName string `json:"job_name,omitempty"`
	Team    string `json:"team,omitempty"`
	// Path is what decided: "submit", "retry", "spill-over", "config
	// reload", … (the record's path); Attempt the job's attempt then.
	Path    string `json:"path,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Backend and Site are the choice ("" when refused); Waiting that the
	// job waits for the local pool.
	Backend    string   `json:"backend,omitempty"`
	Site       string   `json:"site,omitempty"`
	Refused    bool     `json:"refused"`
	Waiting    bool     `json:"waiting"`
	Reasons    []string `json:"reasons"`
	EstCostUSD float64  `json:"est_cost_usd"`
}
