// Package placement decides where pending jobs run on the local GPU pool.
//
// It is pure policy over an immutable Snapshot: no Redis, no clock, no I/O.
// The leader builds a Snapshot each placement round (nodes and their GPUs
// from the heartbeats, running jobs with their estimated ends, the pending
// set in queue order), calls Place, and then does the Redis reservations,
// the dispatches and the preemptions the Plan asks for.
//
// # Pipeline
//
//	Snapshot
//	   │ index     nodes by name, GPUs by index, running jobs by id; each GPU's
//	   │           expected release time (free: now; held: its job's EndsAt,
//	   │           at least now; held by a job with no estimate: never)
//	   ▼
//	for each pending job, in queue order:
//	   │ feasible  per GPU: healthy, memory, model (static, once per shape);
//	   │           free now, outside the head's reservation (dynamic)
//	   │           no node could ever hold it ──► Wait "cannot fit anywhere"
//	   │ rank      best-fit node, then an aligned block of its GPUs
//	   │           fits and allowed ──► Assignment
//	   │ head      the first job that does not fit:
//	   │             urgent, batch jobs to stop ──► Preemption + Reservation + Wait
//	   │             otherwise, its shadow time ──► Reservation + Wait
//	   │ backfill  a later job starts only around the reservation,
//	   │           else ──► Wait "behind" or "no room"
//	   ▼
//	estimate       replay the waiting jobs over the release times ──► EstimatedStart
//	   ▼
//	Plan{Assign, Waits, Preempt, Reserved}
//
// GPU jobs and CPU-only jobs (Request.GPUs == 0) go through the same steps
// on separate resources, GPUs and CPU slots, each with its own head: a job of
// one kind never waits behind a job of the other.
//
// # Rules
//
// 1. Feasibility. A GPU can serve a request when it is healthy, not held
// (GPU.JobID is empty) and not assigned earlier in the same round, its free
// memory (MemoryTotalMB − ForeignUsedMB) is at least MinMemoryMB, and its
// name contains one of Models, case-insensitively (no Models: any). A job
// fits a node when the node has Request.GPUs such GPUs. A gang
// (Request.Nodes > 1) fits when that many distinct nodes each have
// Request.GPUs such GPUs at once, and is placed all or nothing: one
// Assignment naming every node (Assignment.Gang), never part of it. A
// CPU-only job fits a node with CPUSlots − CPUSlotsUsed ≥
// Request.CPUSlots (at least 1) and takes no GPU; GPU jobs take no CPU slots.
//
// 2. Best fit. Among the nodes a job fits now, it goes to the one with the
// fewest usable feasible GPUs (tightest), then the fewest free GPUs of any
// kind, then the lowest name; a CPU-only job to the node with the fewest free
// slots, then the name. Within the node it takes an aligned power-of-two
// block of GPU ranks (ranks are positions by Index): the smallest block size
// that holds the job, the tightest such block (fewest free in it, then in
// its parent block, and so on), the lowest ranks inside it. On an empty node
// that is the lowest indices; otherwise it keeps a job within one pair or
// quad, as GPUs are wired (NVLink bridges on pairs of PCIe cards, a PCIe
// switch per pair, a socket per half of an 8-GPU box), and fills holes
// before breaking into whole free blocks, keeping those for larger jobs.
//
// 3. Strict order with EASY backfill. Jobs are taken in queue order. The
// first job that does not fit now is the head. Its shadow time is the
// earliest time at which some node will have enough feasible GPUs for it,
// assuming every running job ends at its EndsAt (a job past it ends now) and
// every job assigned earlier this round ends at now + its Estimate; the GPUs
// it would take on that node then are its reservation (a Reservation in the
// Plan). A later job starts now only if it fits now AND either it ends (now +
// Estimate) no later than the shadow time, or it uses none of the reserved
// GPUs. Such a job cannot delay the head: the reserved GPUs are all free at
// the shadow time either way. A head whose shadow time is unknown, because
// no node could ever hold it or because what it needs is held by jobs with
// no estimate, reserves nothing and blocks nothing; the next job that does
// not fit becomes the head. Only the head reserves (EASY), not every waiting
// job (conservative backfill): one reservation is O(nodes × GPUs) once per
// round, while reservations for thousands of waiting jobs would cost a
// profile search each and make the round's time grow with the queue; queue
// order already puts urgent jobs first, and the next round recomputes the
// head, so a job delayed by backfill is protected as soon as it is first in
// line. CPU-only jobs follow the same rule with slots: a later CPU-only job
// runs past the CPU head's shadow time on the head's node only within the
// slots left over there at that time.
//
// 4. Preemption. When the GPU head is urgent, it first looks for batch jobs
// to stop: running jobs that are Preemptible, of priority batch (never
// urgent or normal, never a job of equal or higher priority), and not
// already Stopping. On each node it takes the fewest such jobs whose
// feasible GPUs, with the feasible GPUs free now and those of jobs already
// stopping, make room, and across nodes the set with the fewest victims.
// Ties go to the set that stops the fewest GPUs (a preempted job resumes
// from its checkpoint, so what is lost is roughly the work since the last
// checkpoint and a restart on each GPU it held, whatever its remaining
// time), then to the set whose soonest-ending victim ends latest (a job
// about to finish would free its GPUs anyway, and stopping it throws away
// the most nearly finished work; with equal estimates, the victims are the
// jobs that started most recently), then the node name and the victims'
// ids. The Plan gets a Preemption; the urgent job waits this round with a
// reason that names the victims, and the GPUs it will take, free ones
// included, are its reservation from now: no later job gets them this
// round. When
// jobs already Stopping make room, no new Preemption is made: the head waits
// for them. When no set makes room, the head gets a shadow time as in rule 3.
// CPU-only jobs never preempt. At most one Preemption per round.
//
// 5. Waits. Every job that does not start gets a Wait: its 1-based Position
// among waiting jobs, in queue order; a Code and a Reason that starts with
// the Code and says what the job needs and what blocks it; and an
// EstimatedStart (zero when unknown). The head's estimated start is its
// shadow time (now for an urgent head that preempts); every other waiting
// job's is found by replaying the waiting jobs in queue order over the
// release times, each holding what it takes for its Estimate. A job behind a
// single running job that holds what it needs is estimated to start at that
// job's EndsAt. The same replay gives the Plan's Joins: when a new job of
// 1, 2, 4, … GPUs (any model) joining at the end of each priority would
// start, and a new gang of 2, 4, … whole nodes; routing reads them as the
// local pool's wait.
//
// 6. Gangs. A gang follows rules 2 to 5 with "a node" read as "Nodes
// distinct nodes": it goes to the tightest nodes that each fit it now; as
// the head, its shadow time is when the Nodes-th node has its GPUs, and its
// reservation covers its GPUs on every one of those nodes (a Reservation
// per node), so a later job that would run past the shadow time uses no
// reserved GPU on any of them. An urgent gang head takes each node's
// cheapest way to make room (rule 4) on the Nodes cheapest nodes, or stops
// nothing when fewer nodes can make room (a Preemption per node with
// victims). In the estimate replay it starts when Nodes nodes have its
// GPUs. A running gang is a Running entry on each of its nodes; rule 4
// counts only the GPUs it holds on the node it is weighed on.
//
// 7. Determinism. The same Snapshot gives the same Plan, whatever order it
// lists nodes, GPUs and running jobs in (node names and GPU indices being
// unique): every choice is settled by an explicit order, and no map is
// iterated.
//
// # Cost
//
// Static feasibility is computed once per request shape (memory floor and
// models); the free counts per node are cached per shape and recomputed only
// after an assignment, so once the pool is full each further job costs a few
// map lookups, and reasons are cached the same way. The estimate replay is
// O(nodes) per waiting job. 10,000 pending jobs on 64 nodes × 8 GPUs take a
// few milliseconds (BenchmarkPlace10kOn64x8). The cost grows with the
// number of distinct shapes, each O(nodes × GPUs) once: 10,000 jobs with
// 10,000 different memory floors take about 60 ms. A gang costs O(nodes log
// nodes) to place or to find waiting, and O(nodes × GPUs per node) in the
// replay; a job of one node never takes the gang's path.
package placement
