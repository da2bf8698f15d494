package placement

import "time"

// Priorities, in the order the pending set sorts them. Lower is more urgent.
const (
	PriorityUrgent = 0
	PriorityNormal = 1
	PriorityBatch  = 2
)

// Request is what one job needs: GPUs on one node, or on each of Nodes
// nodes (a gang).
type Request struct {
	// GPUs is how many GPUs the job needs on each of its nodes. Zero makes
	// it a CPU-only job, which takes CPUSlots and no GPU; below zero never
	// fits.
	GPUs int `json:"gpus"`
	// Nodes is how many distinct nodes the job spans, GPUs on each: a gang,
	// placed all or nothing (it starts only when that many nodes each have
	// GPUs feasible GPUs free at once). 0 or 1: one node. Ignored for a
	// CPU-only job.
	Nodes int `json:"nodes,omitempty"`
	// MinMemoryMB is the free memory (MemoryTotalMB − ForeignUsedMB) each
	// GPU must have. Zero: any.
	MinMemoryMB uint64 `json:"min_memory_mb,omitempty"`
	// Models are substrings matched case-insensitively against GPU.Name:
	// "H100" matches "NVIDIA H100 80GB HBM3". A GPU matches when its name
	// contains any of them. Empty: any model.
	Models []string `json:"models,omitempty"`
	// CPUSlots is how many CPU slots a CPU-only job takes; below 1 counts
	// as 1. Ignored when GPUs > 0: GPU jobs take no CPU slots.
	CPUSlots int `json:"cpu_slots,omitempty"`
}

// Job is one pending job as the placer sees it.
type Job struct {
	// ID is the job's id; Assignment, Wait and Preemption name it.
	ID string `json:"id"`
	// Priority is PriorityUrgent, PriorityNormal or PriorityBatch.
	Priority int `json:"priority"`
	// Request is what it needs.
	Request Request `json:"request"`
	// Estimate is its expected runtime. It must be > 0: a job without one
	// is treated as running forever (it never backfills ahead of the head,
	// and GPUs it is given are never expected to free up).
	Estimate time.Duration `json:"estimate"`
	// Expected is its expected run time for the estimates alone (the
	// replay that gives EstimatedStart and Joins), where Estimate is an
	// upper bound (max_runtime) that keeps a backfilled job off the
	// head's reservation: a start estimated from bounds is as late as
	// every job running to its limit. 0: Estimate.
	Expected time.Duration `json:"expected,omitempty"`
}

// nodes is how many nodes r spans: Nodes, at least 1.
func (r *Request) nodes() int { return max(r.Nodes, 1) }

// expected is j's run time for the estimate replay.
func (j *Job) expected() time.Duration {
	if j.Expected > 0 {
		return j.Expected
	}
	return j.Estimate
}

// GPU is one GPU of a node, as its worker last reported it.
type GPU struct {
	// Index is the GPU's index on its node (NVML order), unique per node.
	// Assignments name GPUs by Index.
	Index int `json:"index"`
	// UUID is the GPU's UUID. Placement does not use it.
	UUID string `json:"uuid,omitempty"`
	// Name is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Name string `json:"name"`
	// MemoryTotalMB is the GPU's memory.
	MemoryTotalMB uint64 `json:"memory_total_mb"`
	// ForeignUsedMB is memory used by processes that are not Lathe's; it
	// counts against free memory.
	ForeignUsedMB uint64 `json:"foreign_used_mb,omitempty"`
	// Healthy is false for a GPU that must not be given out (XID errors,
	// lost, drained). Placement never assigns an unhealthy GPU.
	Healthy bool `json:"healthy"`
	// JobID is the job that holds the GPU; "" when it is free. This is the
	// authority on who holds a GPU: Running.GPUs is not consulted.
	JobID string `json:"job_id,omitempty"`
}

// Running is a job that holds resources on a node: started, or dispatched
// and not yet started. Every job named by a GPU.JobID should be listed; a
// GPU held by a job that is not is never expected to free up.
type Running struct {
	// JobID is the job's id.
	JobID string `json:"job_id"`
	// Priority is the job's priority (PriorityUrgent … PriorityBatch).
	Priority int `json:"priority"`
	// GPUs are the indices it holds, for the reader; placement goes by GPU.JobID.
	GPUs []int `json:"gpus,omitempty"`
	// CPUSlots is how many of the node's CPU slots it holds.
	CPUSlots int `json:"cpu_slots,omitempty"`
	// EndsAt is when it is expected to end (start + estimate). A job past
	// it is expected to end at Snapshot.Now.
	EndsAt time.Time `json:"ends_at"`
	// ExpectedEnd is when it is expected to end for the estimates alone
	// (Job.Expected); zero: EndsAt.
	ExpectedEnd time.Time `json:"expected_end,omitzero"`
	// Preemptible is true when it may be stopped (SIGTERM, checkpoint,
	// back to queued) to make room for an urgent job. Only batch jobs are
	// ever chosen, whatever this says.
	Preemptible bool `json:"preemptible,omitempty"`
	// Stopping is true once a preemption was asked of it and it has not
	// let go of its GPUs yet. Its GPUs are expected free at Snapshot.Now,
	// and it is not chosen as a victim again.
	Stopping bool `json:"stopping,omitempty"`
}

// Node is one worker machine.
type Node struct {
	// Name is the node's unique name.
	Name string `json:"name"`
	// GPUs are its GPUs, in any order.
	GPUs []GPU `json:"gpus,omitempty"`
	// CPUSlots is how many CPU-only jobs' slots it offers.
	CPUSlots int `json:"cpu_slots,omitempty"`
	// CPUSlotsUsed is how many of them are held.
	CPUSlotsUsed int `json:"cpu_slots_used,omitempty"`
	// Running are the jobs that hold its GPUs or CPU slots, in any order.
	Running []Running `json:"running,omitempty"`
}

// Snapshot is everything one placement round looks at. Place does not
// modify it.
type Snapshot struct {
	// Now is the round's time; every estimate is relative to it.
	Now time.Time `json:"now"`
	// Nodes are the live nodes, in any order.
	Nodes []Node `json:"nodes"`
	// Pending are the jobs waiting for a place, already in queue order:
	// priority, then submit time.
	Pending []Job `json:"pending"`
}

// Assignment starts one job now: the caller reserves exactly these GPUs (or
// CPU slots) on Node.
type Assignment struct {
	// JobID is the job to start.
	JobID string `json:"job_id"`
	// Node is the node to start it on.
	Node string `json:"node"`
	// GPUs are the GPU indices it gets, ascending; empty for a CPU-only job.
	GPUs []int `json:"gpus,omitempty"`
	// CPUSlots is how many CPU slots a CPU-only job takes; 0 for a GPU job.
	CPUSlots int `json:"cpu_slots,omitempty"`
	// Gang, for a job of several nodes (Request.Nodes > 1), is every node
	// it starts on with its GPUs, one per node, rank 0 first: Node and
	// GPUs repeat Gang[0]. The caller reserves all of them or none. Nil
	// for a job of one node.
	Gang []Member `json:"gang,omitempty"`
}

// Member is one node of a gang's Assignment and the GPUs it gets there.
type Member struct {
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
}

// WaitCode groups the reasons a job waits. Every Wait.Reason starts with its
// Code followed by ": ".
type WaitCode string

// The wait codes.
const (
	// WaitNeverFits: no node, even empty, has what the job needs (too many
	// GPUs, no such model, not enough memory, more CPU slots than any node).
	// It blocks nothing.
	WaitNeverFits WaitCode = "cannot fit anywhere"
	// WaitNoRoom: some node could hold it, but none has the GPUs free now.
	WaitNoRoom WaitCode = "no room"
	// WaitBehind: it fits now, but starting it would delay the job first in
	// line (the head), which holds a reservation.
	WaitBehind WaitCode = "behind"
	// WaitPreempting: an urgent job waits for batch jobs to stop for it.
	WaitPreempting WaitCode = "preempting"
	// WaitCPUFull: a CPU-only job finds no node with enough free CPU slots.
	WaitCPUFull WaitCode = "cpu slots full"
)

// Wait is a job that does not start this round.
type Wait struct {
	// JobID is the waiting job.
	JobID string `json:"job_id"`
	// Position is its 1-based place among the waiting jobs, in queue order.
	Position int `json:"position"`
	// EstimatedStart is a best-effort start time; zero when unknown (it can
	// never fit, or what it needs is held by jobs without an estimate).
	EstimatedStart time.Time `json:"estimated_start,omitzero"`
	// Code is the kind of reason, for grouping.
	Code WaitCode `json:"code"`
	// Reason says what the job needs and what blocks it.
	Reason string `json:"reason"`
}

// Preemption asks the caller to stop Victims (SIGTERM, checkpoint, back to
// queued) on Node so that ForJobID can start there on GPUs. The caller should
// mark the victims Running.Stopping in later snapshots until they let go. A
// gang's head gets one Preemption per node it stops jobs on.
type Preemption struct {
	// ForJobID is the urgent job the room is made for.
	ForJobID string `json:"for_job_id"`
	// Node is where.
	Node string `json:"node"`
	// Victims are the batch jobs to stop, sorted by id.
	Victims []string `json:"victims"`
	// GPUs are the indices the urgent job will take once they stop.
	GPUs []int `json:"gpus"`
}

// Reservation is what the head of the queue (the first job that cannot
// start) is promised: GPUs (or CPU slots) on Node from At. Later jobs start
// now only if they leave it intact. It is information for post-mortems and
// the dashboard; the caller does not store it.
type Reservation struct {
	// JobID is the head job.
	JobID string `json:"job_id"`
	// Node is where it will start.
	Node string `json:"node"`
	// GPUs are the indices kept for it; empty for a CPU-only head.
	GPUs []int `json:"gpus,omitempty"`
	// CPUSlots is how many slots a CPU-only head needs.
	CPUSlots int `json:"cpu_slots,omitempty"`
	// At is its shadow time: when it is expected to start.
	At time.Time `json:"at"`
}

// Plan is one round's decision. Every pending job appears exactly once, in
// Assign or in Waits, and both keep queue order.
type Plan struct {
	// Assign are the jobs to start now.
	Assign []Assignment `json:"assign,omitempty"`
	// Waits are the jobs that wait, with positions and reasons.
	Waits []Wait `json:"waits,omitempty"`
	// Preempt holds the preemptions of at most one head: one, or one per
	// node for a gang.
	Preempt []Preemption `json:"preempt,omitempty"`
	// Reserved holds the GPU head's reservation (one per node for a gang)
	// and the CPU-only head's.
	Reserved []Reservation `json:"reserved,omitempty"`
	// Joins estimates when a new GPU job would start if it joined the queue
	// now, behind every waiting job of its priority or a more urgent one:
	// for each priority, for 1, 2, 4, … GPUs up to the largest node's
	// count (and that count), of any model and memory, then for gangs of
	// 2, 4, 8, … whole nodes of that count (up to every node that has
	// it). Routing reads them as the local pool's wait (docs/routing.md,
	// rule 4).
	Joins []Join `json:"joins,omitempty"`
}

// Join is when a new job of GPUs GPUs (any model, any memory), joining the
// queue now at the end of Priority, is estimated to start: by the same
// replay that gives waiting jobs their EstimatedStart. Nodes, above 1, makes
// it a gang of that many whole nodes of GPUs each. Zero At: never (no node
// has that many healthy GPUs, or they are held by jobs with no estimate).
type Join struct {
	Priority int       `json:"priority"`
	GPUs     int       `json:"gpus"`
	Nodes    int       `json:"nodes,omitempty"`
	At       time.Time `json:"at,omitzero"`
}
