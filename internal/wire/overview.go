package wire

import (
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Overview is the answer of GET /api/v1/overview: what an ops view (the
// dashboard, `lathe top`, `lathe queues`) shows, read in one go. A token
// that reads only its team's jobs gets its team's jobs only: every count,
// list and sum over jobs is over them (Team says which team; "" for an
// admin or an all-teams token, who see every job).
type Overview struct {
	// At is when the scheduler read the store.
	At time.Time `json:"at"`
	// Team is the team the answer is limited to; "" when it covers all.
	Team    string         `json:"team,omitempty"`
	Queues  OverviewQueues `json:"queues"`
	Running []RunningJob   `json:"running"`
	Nodes   []NodeGPUs     `json:"nodes"`
	Cloud   OverviewCloud  `json:"cloud"`
	// Waiting is the first waiting (queued) jobs in line, as many as the
	// request's waiting_limit asks (100 unless it says; at most 1000);
	// WaitingTotal counts them all (the same jobs as by_state's queued for
	// an all-teams answer, unless Truncated or one changed state between
	// the reads).
	Waiting      []WaitingJob `json:"waiting"`
	WaitingTotal int          `json:"waiting_total"`
	// Truncated is true when more jobs were active (queued, dispatched,
	// provisioning, running, paused) than the overview reads in one answer
	// (scheduler.OverviewMaxJobs per state); the counts by state are still
	// exact for an all-teams answer, the lists and the other counts cover
	// the jobs read.
	Truncated bool `json:"truncated,omitempty"`
}

// OverviewQueues is the depth of Lathe's queues. Its pending, by_state and
// queues keys are those of GET /api/v1/queues (QueueStats), so a reader of
// one reads the other.
type OverviewQueues struct {
	// Pending counts queued jobs in the pending set, waiting for a place.
	Pending int64 `json:"pending"`
	// ByState counts jobs per state: every state for an all-teams answer
	// (as GET /api/v1/queues), the active states (not terminal) of the
	// team's jobs otherwise.
	ByState map[jobtype.State]int64 `json:"by_state"`
	// ByPriority counts queued jobs per priority (urgent, normal, batch).
	ByPriority map[string]int64 `json:"by_priority"`
	// OldestWaitS is how long the oldest queued job has waited since it
	// was submitted, in seconds (0 with none); OldestJob is its id.
	OldestWaitS float64 `json:"oldest_wait_s"`
	OldestJob   string  `json:"oldest_job,omitempty"`
	// Burst counts queued and running jobs (dispatched, provisioning and
	// running included) routed to a cloud backend.
	Burst int `json:"burst"`
	// Queues describes each local node's asynq queue as GET
	// /api/v1/queues does; empty for a team-limited answer (asynq's task
	// counts cover every team's tasks).
	Queues []QueueInfo `json:"queues"`
}

// RunningJob is one dispatched, provisioning or running job.
type RunningJob struct {
	ID      string        `json:"id"`
	Name    string        `json:"name"`
	State   jobtype.State `json:"state"`
	Team    string        `json:"team,omitempty"`
	Backend string        `json:"backend,omitempty"`
	Node    string        `json:"node,omitempty"`
	GPUs    []int         `json:"gpus"`
	// Step and TotalSteps are the trainer's progress (TotalSteps 0 when
	// not known yet); Loss its last training loss.
	Step       int     `json:"step"`
	TotalSteps int     `json:"total_steps"`
	Loss       float64 `json:"loss"`
	// CostUSD is the cost so far: what the job's ended attempts cost, plus
	// a live cloud instance's time × its price.
	CostUSD   float64    `json:"cost_usd"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	// LossSeries is the job's training loss over its run, downsampled
	// (jobstore.AddLossPoint: at most jobstore.LossSeriesMax points about
	// evenly spaced in steps), then its latest progress when that is past
	// the last point: [[step, loss], …], [] before any progress. The
	// dashboard draws it as the jobs table's sparkline.
	LossSeries []jobtype.LossPoint `json:"loss_series"`
}

// NodeGPUs is one live node and its GPUs as its last heartbeat reported
// them (jobtype.GPU, with Node and JobID filled in; a GPU held by a job of
// another team than a team-limited answer's shows JobID "" and Busy).
type NodeGPUs struct {
	Name      string        `json:"name"`
	Backend   string        `json:"backend"`
	Simulated bool          `json:"simulated"`
	SeenAt    time.Time     `json:"seen_at"`
	GPUs      []OverviewGPU `json:"gpus"`
}

// OverviewGPU is a GPU of NodeGPUs: jobtype.GPU, and Busy when a job holds
// it (whether or not its id is shown).
type OverviewGPU struct {
	jobtype.GPU
	Busy bool `json:"busy"`
}

// OverviewCloud is what the cloud backends run and cost now.
type OverviewCloud struct {
	// USDPerHour is the sum of the live instances' prices.
	USDPerHour float64        `json:"usd_per_hour"`
	Backends   []CloudBackend `json:"backends"`
}

// CloudBackend is one cloud backend: its live instances (from the active
// jobs' Instance), their price per hour, and this month's spend and budget
// as GET /api/v1/budgets has them for scope backend:<name>.
type CloudBackend struct {
	Name        string  `json:"name"`
	Instances   int     `json:"instances"`
	USDPerHour  float64 `json:"usd_per_hour"`
	Month       string  `json:"month"`
	SpentUSD    float64 `json:"spent_usd"`
	ReservedUSD float64 `json:"reserved_usd"`
	// LimitUSD is the monthly budget; 0 = none.
	LimitUSD float64 `json:"limit_usd"`
}

// WaitingJob is one queued job, in placement order (by Wait.Position;
// jobs the last round did not list come last, oldest first).
type WaitingJob struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Team      string    `json:"team,omitempty"`
	Priority  string    `json:"priority"`
	Backend   string    `json:"backend,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Wait is its place in line, estimated start and reason from the
	// leader's last placement round; nil before one listed it.
	Wait *jobtype.WaitInfo `json:"wait,omitempty"`
}
