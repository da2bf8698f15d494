package wire

import (
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
)

// GPUList is the answer of GET /api/v1/gpus: every GPU of every live node
// as its last heartbeat reported it, sorted by node then index, with Node
// and JobID filled in; never null.
type GPUList struct {
	GPUs []jobtype.GPU `json:"gpus"`
}

// NodeList is the answer of GET /api/v1/nodes: live nodes sorted by name.
type NodeList struct {
	Nodes []NodeInfo `json:"nodes"`
}

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

// QueueStats is the answer of GET /api/v1/queues.
type QueueStats struct {
	// Pending counts jobs in Lathe's pending set, waiting for a place.
	Pending int64 `json:"pending"`
	// ByState counts jobs per state.
	ByState map[jobtype.State]int64 `json:"by_state"`
	// Queues describes each backend queue (node:<name>).
	Queues []QueueInfo `json:"queues"`
}

// QueueInfo is one backend queue: for a local node's queue (node:<name>),
// the node's CPU slots and how many of them CPU-only jobs hold (a GPU job
// holds GPUs, not a slot: Reserved ≤ Slots), and asynq's task counts.
type QueueInfo struct {
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	Slots     int    `json:"slots"`
	Reserved  int    `json:"reserved"`
	Pending   int    `json:"pending"`
	Active    int    `json:"active"`
	Archived  int    `json:"archived"`
	Completed int    `json:"completed"`
}

// Budgets is the answer of GET /api/v1/budgets: a month's spend per
// backend and team.
type Budgets struct {
	Month  string      `json:"month"` // YYYY-MM, UTC
	Scopes []BudgetRow `json:"scopes"`
}

// BudgetRow is one scope ("backend:aws-eu", "team:ml") of a month.
type BudgetRow struct {
	Scope string `json:"scope"`
	// Kind is the backend's kind (local, aws); "" for a team.
	Kind string `json:"kind,omitempty"`
	// LimitUSD is the monthly limit; 0 = none.
	LimitUSD float64 `json:"limit_usd"`
	// SpentUSD is what settled jobs cost; ReservedUSD what running and
	// queued jobs hold as their estimate.
	SpentUSD    float64 `json:"spent_usd"`
	ReservedUSD float64 `json:"reserved_usd"`
}

// Health is the answer of GET /healthz: 200 with OK when Redis is up and
// its eviction policy is right, 503 otherwise with Code and Error saying
// why. Leader is absent when Redis could not be reached.
type Health struct {
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
	Leader *bool  `json:"leader,omitempty"`
	OK     bool   `json:"ok"`
	// Redis is "up", or "down: <reason>".
	Redis string `json:"redis"`
}

// AuditRecords is the answer of GET /api/v1/audit: ledger records, oldest
// first. GET /api/v1/audit/verify answers a ledger.Report.
type AuditRecords struct {
	Records []ledger.Record `json:"records"`
}
