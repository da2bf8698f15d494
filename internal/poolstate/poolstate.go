// Package poolstate holds the plain types the job store keeps of the
// worker pool and the budgets, and that the pure decisions
// (scheduler/policy, scheduler/sim) read: node heartbeats and their
// reservations, the local pool's pressure, a budget scope's spend. It has
// no Redis client: internal/jobstore reads and writes them under the same
// names (aliases), so that a decision over them need not link the store.
package poolstate

import (
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Node is a worker's heartbeat: who it is and what it offers.
type Node struct {
	Name        string `json:"name"`
	Incarnation string `json:"incarnation"`
	Backend     string `json:"backend"`
	// Slots is how many CPU-only jobs it runs at once (CPU slots); GPU jobs
	// take GPUs, not slots.
	Slots int `json:"slots"`
	// GPUs is its GPU inventory at the last heartbeat (health included).
	GPUs []jobtype.GPU `json:"gpus"`
	// Driver and CUDA are the NVIDIA driver and CUDA versions ("" without).
	Driver string `json:"driver,omitempty"`
	CUDA   string `json:"cuda,omitempty"`
	// Simulated is true when the GPUs are go-nvml's mock servers.
	Simulated bool `json:"simulated,omitempty"`
	// CheckpointRoot is where this node keeps checkpoints: storage shared
	// by its pool, so another node can resume a job.
	CheckpointRoot string `json:"checkpoint_root,omitempty"`
	// Addr is the address the other nodes reach it at (lathed worker
	// --advertise-addr): a gang's rendezvous (MASTER_ADDR) when it runs rank 0.
	Addr      string    `json:"addr,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// Host and PID identify the worker process, so that a restarted worker
	// can tell its own dead predecessor from a live namesake.
	Host   string    `json:"host,omitempty"`
	PID    int       `json:"pid,omitempty"`
	SeenAt time.Time `json:"seen_at"`
	// QueueWaitS is a remote backend's own queue ahead of a new job, in
	// seconds, at the last heartbeat: the slurm worker's estimate from
	// Slurm's pending queue of its partition (pending GPU-hours ÷ the
	// partition's GPUs). Routing adds it to the backend's wait. 0: none
	// known.
	QueueWaitS float64 `json:"queue_wait_s,omitempty"`
}

// NodeStatus is a live node with its reservations.
type NodeStatus struct {
	Node
	// Reserved is how many jobs hold a reservation on the node (GPU and
	// CPU); CPUReserved how many of those are CPU-only jobs (slots).
	Reserved    int `json:"reserved"`
	CPUReserved int `json:"cpu_reserved"`
	// Reservations maps each job holding a reservation to it.
	Reservations map[string]Reservation `json:"reservations"`
}

// Reservation is one job's hold on a node: its attempt and GPU indices
// (none for a CPU-only job).
type Reservation struct {
	Attempt int   `json:"a"`
	GPUs    []int `json:"g,omitempty"`
}

// GPUHolder returns the job holding GPU index idx, or "".
func (n NodeStatus) GPUHolder(idx int) string {
	for id, r := range n.Reservations {
		for _, g := range r.GPUs {
			if g == idx {
				return id
			}
		}
	}
	return ""
}

// Spend is one budget scope's month: what was spent and what is reserved
// (the limit is the config's).
type Spend struct {
	SpentUSD    float64 `json:"spent_usd"`
	ReservedUSD float64 `json:"reserved_usd"`
}

// PoolPressure is a local pool's queue pressure as the leader's last
// placement round saw it: GPU-hours pending at each priority (0 urgent, 1
// normal, 2 batch) and GPU-hours running jobs still have.
type PoolPressure struct {
	PendingGPUHours [3]float64 `json:"pending_gpu_hours"`
	RunningGPUHours float64    `json:"running_gpu_hours"`
	HealthyGPUs     int        `json:"healthy_gpus"`
	At              time.Time  `json:"at"`
	// Capacity is the pool's GPUs per node, healthy or not, as last seen
	// with a node live: what routing judges a GPU request against when no
	// node is live (a restart must not make GPU jobs infeasible).
	Capacity []CapacityNode `json:"capacity,omitempty"`
	// Joins are the estimated waits of a new job joining the queue at each
	// priority 0..2, ascending by GPU count (placement.Plan.Joins, as
	// seconds after At; −1: never).
	Joins [3][]JoinWait `json:"joins,omitzero"`
}

// JoinWait is the wait of a new job of GPUs GPUs (on each of Nodes whole
// nodes for a gang; 0: one node), in seconds (−1: never).
type JoinWait struct {
	GPUs  int     `json:"gpus"`
	Nodes int     `json:"nodes,omitempty"`
	WaitS float64 `json:"wait_s"`
}

// CapacityNode is one node's GPUs by model and memory.
type CapacityNode struct {
	Name string        `json:"name"`
	GPUs []CapacityGPU `json:"gpus"`
}

// CapacityGPU is a count of one GPU model with one memory size.
type CapacityGPU struct {
	Model    string  `json:"model"`
	MemoryGB float64 `json:"memory_gb"`
	Count    int     `json:"count"`
}

// StartRatiosKept is how many recent start ratios (a local start's wait
// over the wait estimated at its submit) the store keeps and routing
// reads: jobstore.RecordStartRatio, and the simulator the same.
const StartRatiosKept = 1024
