// Package jobtype holds the types Lathe's parts share about a job: its state
// machine, the record the API returns, progress, artifacts and events. It
// imports only jobspec, so the CLI, the scheduler and the worker agree on one
// shape without importing each other.
package jobtype

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// State is a job's lifecycle state (docs/design.md "Job lifecycle"; the transitions: Transitions).
type State string

// The job states. succeeded, failed, cancelled and stopped are terminal. There is no
// "preempted" state: a preempted attempt ends and the job goes back to
// queued as the next attempt, with reason ReasonPreempted on the state
// event (Transitions).
const (
	StateQueued       State = "queued"
	StateDispatched   State = "dispatched"
	StateProvisioning State = "provisioning"
	StateRunning      State = "running"
	StateSucceeded    State = "succeeded"
	StateFailed       State = "failed"
	StateCancelled    State = "cancelled"
	// StatePaused is a sweep trial between two ASHA rungs: its attempt ran
	// to the rung's step limit and stopped with a checkpoint; the sweep
	// promotes it (queued, next attempt, resumes from the checkpoint) or
	// stops it. It holds no slot or GPU.
	StatePaused State = "paused"
	// StateStopped ends a sweep trial the sweep stopped (not promoted by
	// ASHA, stopped by the median rule, or never admitted because the
	// sweep's budget ran out): neither failed nor cancelled. Terminal.
	StateStopped State = "stopped"
)

// States lists every state, in lifecycle order.
var States = []State{StateQueued, StateDispatched, StateProvisioning, StateRunning, StatePaused,
	StateSucceeded, StateFailed, StateCancelled, StateStopped}

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, x := range States {
		if x == s {
			return true
		}
	}
	return false
}

// Terminal reports whether no further transition leaves s (except an explicit retry).
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled || s == StateStopped
}

// Failure reasons recorded in Job.Reason.
const (
	ReasonTimeout   = "timeout"   // max_runtime reached
	ReasonPermanent = "permanent" // trainer exit 3: bad data or config, no retry
	ReasonExit      = "exit"      // trainer exited non-zero; retries exhausted
	ReasonCancelled = "cancelled" // the user asked
	ReasonInternal  = "internal"  // Lathe itself could not run the attempt: a Lathe bug or the host's fault, never the trainer's
	ReasonPreempted = "preempted" // stopped for an urgent job; queued again (not a failure)
	ReasonHung      = "hung"      // GPUs idle and no progress for hang_timeout; retried
	ReasonResidency = "residency" // the attempt would have run in a site lacking one of the job's tags: refused
	ReasonBudget    = "budget"    // what it has cost so far reached a budget's cap: stopped with a checkpoint
	// ReasonTrainerFault: the trainer exited 0 but broke the trainer
	// contract: it wrote no artifact, reported an artifact name that is not
	// a plain file name, left an artifact that is a link, a FIFO or a file
	// with another name elsewhere, or one whose size or sha256 is not what
	// it reported, or swapped the job's output folder for a link while it
	// ran. Not retried: a retry would do the same.
	ReasonTrainerFault = "trainer_fault"
)

// Progress is the latest progress line of the running attempt.
type Progress struct {
	Step         int     `json:"step"`
	TotalSteps   int     `json:"total_steps"`
	Epoch        float64 `json:"epoch,omitempty"`
	Loss         float64 `json:"loss"`
	LearningRate float64 `json:"learning_rate,omitempty"`
	SamplesPerS  float64 `json:"samples_per_s,omitempty"`
}

// ProgressMark is one progress line of attempt Attempt: step Step,
// recorded at At.
type ProgressMark struct {
	Attempt int       `json:"attempt"`
	Step    int       `json:"step"`
	At      time.Time `json:"at"`
}

// LossPoint is one point of a job's downsampled loss series: [step, loss]
// (JSON: a two-number array; jobstore.AddLossPoint says which points are
// kept).
type LossPoint [2]float64

// Step is the point's step.
func (p LossPoint) Step() int { return int(p[0]) }

// Loss is the point's training loss.
func (p LossPoint) Loss() float64 { return p[1] }

// Artifact is one file a job produced, as stored under its output folder.
type Artifact struct {
	Path   string `json:"path"`
	Format string `json:"format,omitempty"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Residency are the job's residency tags: an artifact inherits them,
	// and may only be copied to sites that carry them all.
	Residency []string `json:"residency,omitempty"`
	// Site is where it was written.
	Site string `json:"site,omitempty"`
}

// Job is a job's record as the store holds it and the API returns it.
type Job struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State State  `json:"state"`
	// Reason qualifies a failed or cancelled state (Reason* constants).
	Reason string `json:"reason,omitempty"`
	// Error is a human-readable message for a failed job.
	Error   string `json:"error,omitempty"`
	Attempt int    `json:"attempt"`
	// Backend is where the current attempt was placed ("local" for now).
	Backend string `json:"backend,omitempty"`
	// Node is the worker node of the current attempt.
	Node string `json:"node,omitempty"`
	// GPUs are the GPU indices on Node reserved for the current attempt.
	GPUs     []int    `json:"gpus"`
	Progress Progress `json:"progress"`
	// ProgressFrom is the first progress line the current (or last)
	// attempt printed: its step and when it was recorded. Placement
	// estimates a running job's end from the pace since (policy.ProgressEnd).
	ProgressFrom    *ProgressMark      `json:"progress_from,omitempty"`
	Metrics         map[string]float64 `json:"metrics"`
	Artifacts       []Artifact         `json:"artifacts"`
	OutputURI       string             `json:"output_uri,omitempty"`
	CancelRequested bool               `json:"cancel_requested,omitempty"`
	// PreemptRequested names the urgent job this one is being preempted
	// for, while its trainer checkpoints and stops ("" otherwise).
	PreemptRequested string `json:"preempt_requested,omitempty"`
	// Preemptions counts how often the job was preempted.
	Preemptions int `json:"preemptions,omitempty"`
	// CUDAVisibleDevices is what the current attempt's trainer was given
	// (the reserved GPUs' UUIDs).
	CUDAVisibleDevices string `json:"cuda_visible_devices,omitempty"`
	// SimulatedGPUs is true when the GPUs are go-nvml's mock servers and
	// the trainer ran on the CPU (LATHE_SIMULATED_GPUS=1).
	SimulatedGPUs bool `json:"simulated_gpus,omitempty"`
	// Route is the routing decision the job runs under.
	Route *RouteInfo `json:"route,omitempty"`
	// Trial is set on a sweep's trial (nil for a plain job).
	Trial *TrialInfo `json:"trial,omitempty"`
	// Held says why a job is held (its routing decision no longer holds
	// under the current config): it is not placed until it is feasible
	// again or cancelled. "" = not held.
	Held string `json:"held,omitempty"`
	// HeldEpoch is the budget epoch the job was held in
	// (jobstore.BudgetEpoch): when money frees after it, the job is decided
	// again. Internal: not on the wire.
	HeldEpoch string `json:"-"`
	// Incarnation is the worker process that owns the running (or
	// provisioning) attempt, and LeaseUntil when its lease ends.
	Incarnation string     `json:"incarnation,omitempty"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	// Gang is the job's last gang attempt (resources.nodes > 1): each
	// rank's node and GPUs, and the rendezvous (nil for other jobs).
	Gang *Gang `json:"gang,omitempty"`
	// CostUSD is the cost of the job's run as last settled (policy.JobUsage
	// when its budgets were settled), plus the instance cost of each cloud
	// attempt since, added as each instance ends. policy.JobUsage is the
	// figure: it never reads CostUSD.
	CostUSD float64 `json:"cost_usd,omitempty"`
	// CloudCostUSD is every cloud attempt's instance time × its price,
	// each attempt's added once, as its instance ends.
	CloudCostUSD float64 `json:"cloud_cost_usd,omitempty"`
	// CostNowUSD is what the job has cost so far, as the API answers it:
	// policy.JobUsageAt at the answer's time (the attempt running now
	// counted to then) plus a live cloud instance's time so far. Computed
	// when the API reads the record, never stored; 0 while nothing it ran
	// on is priced.
	CostNowUSD float64 `json:"cost_now_usd,omitempty"`
	// RunS is how long the job's ended attempts ran (running → anything
	// else), seconds; LocalRunS the part of it on the local pool. The
	// attempt running now is not in them (policy.JobUsage adds it).
	RunS      float64 `json:"run_s,omitempty"`
	LocalRunS float64 `json:"local_run_s,omitempty"`
	// SettledCostUSD is what its budgets have counted of its cost so far
	// (its settlements). Internal.
	SettledCostUSD float64 `json:"-"`
	// BudgetReservedUSD is the estimate the job holds against its budgets
	// until it ends (jobstore.Reserve; 0 once settled or when it has none).
	BudgetReservedUSD float64 `json:"budget_reserved_usd,omitempty"`
	// Instance is the cloud instance of the current (or last) cloud attempt.
	Instance *Instance `json:"instance,omitempty"`
	// Wait says why a queued job waits, where it stands and when it should
	// start, as the leader's last placement round saw it.
	Wait       *WaitInfo    `json:"wait,omitempty"`
	Submitter  string       `json:"submitter,omitempty"`
	Team       string       `json:"team,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
	UpdatedAt  time.Time    `json:"updated_at"`
	StartedAt  *time.Time   `json:"started_at,omitempty"`
	FinishedAt *time.Time   `json:"finished_at,omitempty"`
	Spec       jobspec.Spec `json:"spec"`
}

// Event types in a job's event stream.
const (
	EventState      = "state"      // Data: StateChange
	EventProgress   = "progress"   // Data: the trainer's progress line
	EventEval       = "eval"       // Data: the trainer's eval line
	EventCheckpoint = "checkpoint" // Data: the trainer's checkpoint line
	EventArtifact   = "artifact"   // Data: Artifact
	EventLog        = "log"        // Data: LogLine
	EventDone       = "done"       // Data: the trainer's done line
)

// Event is one entry of a job's event stream.
type Event struct {
	// ID is the Redis stream id; it orders events and resumes a follow.
	ID      string          `json:"id"`
	Time    time.Time       `json:"time"`
	Type    string          `json:"type"`
	Attempt int             `json:"attempt"`
	Data    json.RawMessage `json:"data"`
}

// StateChange is the Data of an EventState.
type StateChange struct {
	From   State  `json:"from,omitempty"`
	To     State  `json:"to"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	Node   string `json:"node,omitempty"`
}

// LogLine is the Data of an EventLog.
type LogLine struct {
	Stream string `json:"stream"` // stdout or stderr
	Line   string `json:"line"`
}

// TaskPayload is what an asynq task carries: one attempt of one job (for
// a gang's attempt, one rank of it). The job store, not the payload, is
// the authority on what to run.
type TaskPayload struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	// Rank is the gang rank the task runs (nil: not a gang's task).
	Rank *int `json:"rank,omitempty"`
}

// RankTaskID is the asynq task id of rank r of gang attempt n of job id:
// "<job>:<attempt>:<rank>".
func RankTaskID(jobID string, attempt, rank int) string {
	return fmt.Sprintf("%s:%d:%d", jobID, attempt, rank)
}

// Gang is a gang attempt (a job of resources.nodes > 1): one rank per
// node, rank r at Ranks[r], and the rendezvous rank 0 offered.
type Gang struct {
	Attempt int        `json:"attempt"`
	Ranks   []GangRank `json:"ranks"`
	// Addr and Port are MASTER_ADDR and MASTER_PORT (rank 0's node's
	// advertised address, a port free there), set when rank 0 claimed.
	Addr string `json:"addr,omitempty"`
	Port int    `json:"port,omitempty"`
}

// GangRank is one rank of a gang attempt: its node, its GPUs there, and
// (read back) its state (dispatched, running, succeeded, cancelled) and
// the worker incarnation that claimed it.
type GangRank struct {
	Node        string `json:"node"`
	GPUs        []int  `json:"gpus"`
	State       string `json:"state,omitempty"`
	Incarnation string `json:"incarnation,omitempty"`
}

// TaskType is the asynq task type of a job attempt.
const TaskType = "lathe:attempt"

// TaskID is the asynq task id of attempt n of job id: "<job>:<attempt>".
func TaskID(jobID string, attempt int) string {
	return fmt.Sprintf("%s:%d", jobID, attempt)
}

// NodeQueue is the asynq queue of a worker node: "node:<name>" for a local
// node, the node name itself for a cloud backend's node ("cloud:<backend>").
func NodeQueue(node string) string {
	if IsCloudNode(node) {
		return node
	}
	return "node:" + node
}

// CloudNode is the node name (and asynq queue) of cloud backend b's
// attempts: "cloud:<b>". Its AWS worker heartbeats under this name, and the
// node's reservations count the backend's instances.
func CloudNode(backend string) string { return "cloud:" + backend }

// IsCloudNode reports whether node names a cloud backend (CloudNode).
func IsCloudNode(node string) bool { return strings.HasPrefix(node, "cloud:") }

// Instance is the cloud instance of a job's current (or last) cloud
// attempt, as the AWS worker launched or found it.
type Instance struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
	Backend string `json:"backend"`
	Region  string `json:"region,omitempty"`
	Type    string `json:"type"`
	// Market is "spot" or "on-demand".
	Market     string    `json:"market"`
	Subnet     string    `json:"subnet,omitempty"`
	LaunchTime time.Time `json:"launch_time"`
	// USDPerHour is the configured price the attempt's cost is computed at.
	USDPerHour float64 `json:"usd_per_hour"`
	// State is EC2's state when the worker last looked.
	State string `json:"state,omitempty"`
	// TerminatedAt is when the worker saw it terminated (its cost ends).
	TerminatedAt *time.Time `json:"terminated_at,omitempty"`
}

// ValidArtifactName reports whether name is a plain file name Lathe accepts
// for an artifact: non-empty, at most 255 bytes, no "/" or "\", not "." or
// "..", no ".." anywhere, no control characters.
func ValidArtifactName(name string) bool {
	if name == "" || len(name) > 255 || name == "." || strings.Contains(name, "..") || strings.ContainsAny(name, "/\\") {
		return false
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// RouteInfo is the routing decision a job runs under (the full record,
// with every candidate, is in the ledger).
type RouteInfo struct {
	Backend     string   `json:"backend"`
	Site        string   `json:"site"`
	Kind        string   `json:"kind"` // local | aws
	Waiting     bool     `json:"waiting,omitempty"`
	Reasons     []string `json:"reasons,omitempty"`
	EstRuntimeS float64  `json:"est_runtime_s,omitempty"`
	EstWaitS    float64  `json:"est_wait_s,omitempty"`
	EstCostUSD  float64  `json:"est_cost_usd,omitempty"`
	Path        string   `json:"path"` // what decided: submit, retry, spill-over, reload, preemption
	// Attempt and Preemptions are the job's when decided: a later attempt
	// (a retry, a requeue, a preemption) is decided again before placement.
	Attempt     int       `json:"attempt"`
	Preemptions int       `json:"preemptions,omitempty"`
	DecidedAt   time.Time `json:"decided_at"`
	// LedgerSeq is the sequence number of the ledger record of the last
	// decision about this route, stored in the same script as the route:
	// the decision, or the refusal that holds the job (0: no ledger).
	LedgerSeq int64 `json:"ledger_seq,omitempty"`
	// ConfigHash is the hash of the routing config it was decided under:
	// a queued job whose route names another config than the one in force
	// is decided again before it is placed ("" on a route stored before
	// this field: left as is).
	ConfigHash string `json:"config_hash,omitempty"`
	// DatasetBytes and EvalDatasetBytes are the sizes of the job's dataset
	// and eval dataset as admission learned them (a file:// dataset read
	// through the allowed roots; never the spec's word): routing times
	// their staging into a cloud site with them, and every later decision
	// (spill-over, retry, reload) reads them here. nil: unknown.
	DatasetBytes     *int64 `json:"dataset_bytes,omitempty"`
	EvalDatasetBytes *int64 `json:"eval_dataset_bytes,omitempty"`
}

// WaitInfo is a queued job's place in line (from the last placement round).
type WaitInfo struct {
	Position       int        `json:"position"`
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`
	Code           string     `json:"code"`
	Reason         string     `json:"reason"`
	At             time.Time  `json:"at"` // when the round ran
}

// GPU is one GPU of a node as its worker last reported it (the heartbeat),
// and the rows of GET /api/v1/gpus and `lathe gpus -o json`.
type GPU struct {
	// Node is the node the GPU is in (filled in by the API).
	Node  string `json:"node"`
	Index int    `json:"index"` // NVML's index on the node
	UUID  string `json:"uuid"`
	Name  string `json:"name"` // as NVML names it: "NVIDIA H100 80GB HBM3"
	// Memory in MiB, as NVML reports it.
	MemoryTotalMB uint64 `json:"memory_total_mb"`
	MemoryUsedMB  uint64 `json:"memory_used_mb"`
	MemoryFreeMB  uint64 `json:"memory_free_mb"`
	// ForeignUsedMB is memory used by processes that are not Lathe's
	// trainers; it counts against what placement sees as free.
	ForeignUsedMB  uint64  `json:"foreign_used_mb"`
	UtilizationPct int     `json:"utilization_pct"`
	TemperatureC   int     `json:"temperature_c"`
	PowerW         float64 `json:"power_w"`
	ECCUncorrected uint64  `json:"ecc_uncorrected"`
	// Healthy is false for a GPU that gets no new work; Unhealthy says why
	// (a new uncorrected ECC error, an XID event, GPU lost, …).
	Healthy   bool   `json:"healthy"`
	Unhealthy string `json:"unhealthy,omitempty"`
	// JobID is the job holding the GPU, "" when free (filled in by the API
	// from the node's reservations).
	JobID string `json:"job_id"`
	// Simulated is true for GPUs of go-nvml's mock servers (--gpus
	// simulated:…): not real hardware.
	Simulated bool `json:"simulated"`
}
