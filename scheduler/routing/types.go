package routing

import (
	"time"

	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Job is what routing needs of a job: where its data is, what it asks for,
// and what it may cost. The scheduler fills it from the normalised spec.
type Job struct {
	ID, Team string
	// Residency as submitted; empty: Config.DefaultResidency.
	Residency []string
	// Dataset, EvalDataset and Output are URIs: file:///… (in
	// datasets.file_site) or s3://bucket/key (in the bucket's site). An
	// empty Dataset or EvalDataset touches nothing; an empty Output is the
	// daemon's default output folder, which is file://.
	Dataset, EvalDataset, Output string
	// GPUs is what the job needs on each of its Nodes nodes (0 or 1: one
	// node). On the local pool that many nodes must each hold GPUs; a
	// cloud backend launches one instance per attempt, so there the job
	// needs one instance type of GPUs × Nodes (totalGPUs).
	GPUs        int
	Nodes       int
	GPUMemoryGB float64
	// GPUModels are case-insensitive substrings of GPU model names ("H100"
	// matches "NVIDIA H100 80GB HBM3"); any of them will do; none: any model.
	GPUModels []string
	// Priority: 0 urgent, 1 normal, 2 batch.
	Priority int
	// MaxWait is the longest the job may wait for the local pool before it
	// bursts to a cloud backend; 0 = no limit: it never bursts for queue
	// pressure.
	MaxWait time.Duration
	// Waited is how long the job has waited for the local pool already (a
	// spill-over: it waited its max_wait): its local wait is Waited plus
	// the estimate, unless it could start now (estimate 0). 0 for a new job.
	Waited time.Duration
	// StartIn, when set, is when a queued job is expected to start on the
	// local pool from now, as the last placement round's replay put it in
	// its place in line: its local wait from now, in place of the wait of
	// a new job joining the back of the queue (Pool.Joins), which counts
	// the job's own place twice. nil for a new job.
	StartIn *time.Duration
	// BudgetUSD caps the job's estimated cost; 0 = none.
	BudgetUSD float64
	// ExpectedRuntime is the user's estimate; 0: estimate it.
	ExpectedRuntime time.Duration
	MaxSteps        int
	BaseModel       string
	MaxRuntime      time.Duration
	// Trainer is the spec's trainer name; "" means "reference".
	Trainer string
	// ValuePerHourUSD is what an hour of earlier completion is worth to the
	// job's owner; 0 = plain rules (max_wait, then price).
	ValuePerHourUSD float64
	// DatasetSize and EvalDatasetSize are the sizes of Dataset and
	// EvalDataset as the scheduler learned them at admission (a file://
	// dataset read through the allowed roots), never from the spec.
	// Unknown (the zero value) for an s3:// dataset, a file the scheduler
	// could not read, or a job decided without them. A dataset staged into
	// a cloud backend's site takes its size ÷ the backend's staging_mbps,
	// counted in the backend's wait; an unknown size counts 0, and the
	// decision says so.
	DatasetSize, EvalDatasetSize DataSize
}

// DataSize is a dataset's size in bytes, when known.
type DataSize struct {
	Bytes int64 `json:"bytes"`
	Known bool  `json:"known"`
}

// KnownSize is a known size of n bytes (negative counts 0).
func KnownSize(n int64) DataSize { return DataSize{Bytes: max(n, 0), Known: true} }

// Pool is a local backend's state, as the leader's last placement round saw
// it.
type Pool struct {
	Nodes []PoolNode
	// GPUHoursAhead is the GPU-hours queued or running ahead, by priority
	// 0..2: work at priority ≤ p is ahead of a job of priority p.
	GPUHoursAhead [3]float64
	// HealthyGPUs in the pool; 0: the sum over Nodes.
	HealthyGPUs int
	// AssumeWait, when set, replaces the estimated wait (what-if:
	// lathe route --assume-wait).
	AssumeWait *time.Duration
	// Joins, when set, are the waits of a new job joining the queue now,
	// by priority 0..2, ascending by GPU count, from the last placement
	// round's replay (placement.Plan.Joins): what a job that every GPU of
	// the pool could serve waits, better than GPU-hours over GPUs, which
	// counts work that does not block it (a half-empty pool with long jobs
	// running). A job that names a GPU model or memory not every GPU has,
	// or that is larger than the largest count, is estimated from
	// GPUHoursAhead. After the joins of one node come those of gangs of
	// whole nodes (Nodes > 1), ascending by Nodes.
	Joins [3][]JoinWait
}

// JoinWait is the estimated wait of a new job of GPUs GPUs (on each of
// Nodes whole nodes for a gang; 0: one node): WaitS seconds, or −1 when it
// would never start (no node holds that many healthy GPUs, or they are
// held by jobs with no estimate).
type JoinWait struct {
	GPUs  int     `json:"gpus"`
	Nodes int     `json:"nodes,omitempty"`
	WaitS float64 `json:"wait_s"`
}

// PoolNode is one node of a local pool: its healthy GPUs grouped by model.
type PoolNode struct {
	Name string
	GPUs []PoolGPU
}

// PoolGPU is a group of GPUs of one model on one node.
type PoolGPU struct {
	// Model as the node reports it (NVML: "NVIDIA H100 80GB HBM3").
	Model    string
	MemoryGB float64
	Healthy  int
}

// Spend is one month of spending against a budget, in USD.
type Spend struct {
	// LimitUSD of the month; 0 = none. The config's budget applies too: the
	// tighter of the two wins.
	LimitUSD    float64
	SpentUSD    float64
	ReservedUSD float64
}

// Snapshot is everything Decide looks at. Decide does not modify it.
type Snapshot struct {
	// Now is when the decision is made (recorded; the rules do not use it
	// yet).
	Now    time.Time
	Config routecfg.Config
	// Pools by local backend name; a missing pool has 0 GPUs.
	Pools map[string]Pool
	// BackendSpend by cloud backend name, this month.
	BackendSpend map[string]Spend
	// QueueWait by backend name: the wait a job meets in a non-local
	// backend's own queue (a slurm backend's partition: Slurm's pending
	// queue), added to its startup and staging. Missing: none.
	QueueWait map[string]time.Duration
	// TeamSpend by team, this month.
	TeamSpend map[string]Spend
	// SecondsPerStep learned from finished jobs, keyed
	// lower(BaseModel)+"|"+lower(GPU model) ("cpu" for a job with no GPUs).
	SecondsPerStep map[string]float64
	// StartRatios are, sorted, the recent local starts' waits as a
	// multiple of the wait estimated at their submit (jobstore's
	// RecordStartRatio): how far the local estimate is to be trusted
	// (stayOdds). Fewer than minStartRatios: not used.
	StartRatios []float64
}

// Candidate is one backend's verdict for a job. Its estimates are zero
// when a residency check refused it (nothing is estimated there); its
// Reason is "" when feasible, else one of the Reason* constants, ": ", and
// the details. It is the API's type (internal/wire): a decision's
// candidates go on the wire as they are decided.
type Candidate = wire.Candidate

// Staging is data a decision moves between sites, as the API shows it.
type Staging = wire.Staging

// Decision is where a job goes and why.
type Decision struct {
	// Backend and Site chosen; "" when refused.
	Backend string `json:"backend"`
	Site    string `json:"site"`
	// Refused: no backend is feasible (the API answers 4xx with Reasons).
	Refused bool `json:"refused"`
	// Waiting: the chosen backend is local and its estimated wait is beyond
	// max_wait (or unknown): no cloud backend could take the job (Reasons
	// say why, budgets included), every one that could takes longer to
	// start (its startup) than the local pool, or, with ValuePerHourUSD,
	// waiting came out cheaper (Trade). The job stays queued for the local pool and may spill
	// over later, through Decide again.
	Waiting bool `json:"waiting"`
	// Residency is the effective tags.
	Residency []string `json:"residency"`
	Reasons   []string `json:"reasons"`
	// Candidates holds every backend, in config order.
	Candidates  []Candidate   `json:"candidates"`
	Staging     []Staging     `json:"staging"`
	EstRuntime  time.Duration `json:"est_runtime_ns"`
	EstGPUHours float64       `json:"est_gpu_hours"`
	EstCostUSD  float64       `json:"est_cost_usd"`
	// Trade shows the wait-vs-burst arithmetic when the job has
	// ValuePerHourUSD.
	Trade string `json:"trade,omitempty"`
}

// Wire is d as the API shows it (POST /api/v1/route, a 422 refusal, the
// CLI's offline explanation): the same JSON, nil slices kept nil.
func (d Decision) Wire() wire.Decision {
	return wire.Decision{Backend: d.Backend, Site: d.Site, Refused: d.Refused, Waiting: d.Waiting,
		Residency: d.Residency, Reasons: d.Reasons, Candidates: d.Candidates, Staging: d.Staging,
		EstRuntime: d.EstRuntime, EstGPUHours: d.EstGPUHours, EstCostUSD: d.EstCostUSD, Trade: d.Trade}
}

// nodeCount is how many nodes j spans: Nodes, at least 1.
func (j *Job) nodeCount() int { return max(j.Nodes, 1) }

// totalGPUs is every GPU j holds while it runs: GPUs on each of its nodes.
func (j *Job) totalGPUs() int { return j.GPUs * j.nodeCount() }
