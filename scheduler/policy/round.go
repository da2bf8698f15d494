package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
	"github.com/lathe-ml/lathe/scheduler/placement"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// RoundInput is what one placement round looks at, read at once.
type RoundInput struct {
	Now      time.Time
	Nodes    []poolstate.NodeStatus // live nodes with their reservations
	Pending  []string               // the pending ids scanned, in queue order
	Jobs     map[string]*jobtype.Job
	Routing  RoutingInput // what a routing decision looks at
	Pressure poolstate.PoolPressure
	// BudgetEpoch is this month's budget epoch (jobstore.BudgetEpoch): a
	// job held in another epoch is decided again, as money was freed (or
	// a month began) since it was held.
	BudgetEpoch string
	// Starts are the estimated starts of the jobs the last round left
	// waiting on the local pool (placement.Wait.EstimatedStart), by id;
	// nil: none known (a new leader). A spill-over counts a job's own
	// start, and a job whose start is past its max_wait spills over early.
	Starts map[string]time.Time
}

// RoundOptions are the settings a round's decision depends on.
type RoundOptions struct {
	// DefaultMaxRuntime is the deployment's max_runtime for a job that
	// sets none.
	DefaultMaxRuntime time.Duration
}

// RoundPlan is what one placement round decided; the caller writes it.
type RoundPlan struct {
	Reroutes []Reroute          // in queue order, to apply first
	OffWaits []OffWait          // held, or waiting for their routing decision
	Cloud    []CloudDispatch    // queued jobs routed to a live cloud backend
	Snap     placement.Snapshot // the local pool as placement saw it
	Place    placement.Plan     // assignments, preemptions, waits (local)
	Pressure poolstate.PoolPressure
}

// OffWait is a queued job the placer does not place (held, routed to a
// cloud backend, or not routed yet), with the reason shown in its status.
type OffWait struct{ ID, Code, Reason string }

// CloudDispatch is a queued job routed to a cloud backend with a live
// worker: it moves to that backend's queue.
type CloudDispatch struct {
	Job     *jobtype.Job
	Backend routecfg.Backend
	Node    string // jobtype.CloudNode of the backend
}

// MaxRedecisions bounds the routing decisions one placement round makes
// (each one is a ledger record); the rest wait for the next round.
const MaxRedecisions = 200

// DecideRound is a placement round's decision over in (in.Now is the
// round's time; in is not modified). Every queued attempt is routed
// before it is placed: a retry, a requeue and a preemption are decided
// again by DecideRoute, and so is a local job waiting past its max_wait
// (spill-over) or one decided under another routing config. Jobs routed
// to a cloud backend go to its queue; the rest are placed on the local
// pool (placement.Place), and the pool's pressure is counted for the
// next routing decisions.
func DecideRound(in *RoundInput, rs *RouteState, opts RoundOptions) RoundPlan {
	r := rerouter{rs: rs, rsnap: Snapshot(rs, Assumptions{}, in.Routing), now: in.Now, cloud: rs.hasCloud()}
	snap := placement.Snapshot{Now: in.Now}
	live := map[string]bool{}
	for _, n := range in.Nodes {
		live[n.Name] = true
	}
	for _, id := range in.Pending {
		j := in.Jobs[id]
		if j == nil || j.State != jobtype.StateQueued {
			continue
		}
		path := ReroutePath(j, rs, in.Now)
		if path == "" && j.Held != "" && j.HeldEpoch != "" && j.HeldEpoch != in.BudgetEpoch {
			path = "budget"
		}
		if path != "" {
			if j = r.reroute(j, path, in.Starts[id]); j == nil {
				continue
			}
		} else if jc := r.earlySpill(j, in.Starts[id]); jc != nil {
			j = jc
		}
		if j.Held != "" {
			r.plan.OffWaits = append(r.plan.OffWaits, OffWait{j.ID, "held", "held: " + j.Held})
			continue
		}
		if j.Route != nil && j.Route.Kind != "" && j.Route.Kind != routecfg.KindLocal {
			if cd, ow, ok := decideCloud(j, rs, live); ok {
				r.plan.Cloud = append(r.plan.Cloud, cd)
			} else {
				r.plan.OffWaits = append(r.plan.OffWaits, ow)
			}
			continue
		}
		snap.Pending = append(snap.Pending, placementJob(j, opts.DefaultMaxRuntime))
	}
	plan := r.plan
	snap.Nodes = PlacementNodes(in, opts.DefaultMaxRuntime)
	plan.Snap = snap
	plan.Place = placement.Place(snap)
	plan.Pressure = PoolPressure(snap, in, opts.DefaultMaxRuntime)
	plan.Pressure.Joins = JoinWaits(plan.Place.Joins, snap.Now)
	return plan
}

// earlySpill re-decides local job j, waiting, when the last placement
// round estimated its start past its max_wait (from when it joined the
// queue): it would spill over then, after waiting max_wait for nothing.
// When routing now sends it to a cloud backend it bursts now (a
// spill-over, recorded as one); when it would stay local (no cloud
// backend may take it, none starts it sooner, a budget) nothing is
// recorded and it waits on, to be decided again at its max_wait as
// before. It returns the job as rerouted, or nil.
func (r *rerouter) earlySpill(j *jobtype.Job, start time.Time) *jobtype.Job {
	if j.Held != "" || j.Route == nil || j.Route.Kind != routecfg.KindLocal || j.Spec.MaxWait <= 0 ||
		!r.cloud || len(r.plan.Reroutes) >= MaxRedecisions || r.earlyTries >= MaxRedecisions {
		return nil
	}
	if start.IsZero() || !start.After(QueuedSince(j).Add(j.Spec.MaxWait.D())) {
		return nil
	}
	// A decision that keeps the job local is not recorded, but costs as
	// much as one: at most MaxRedecisions tries a round (an [onprem] job
	// past its max_wait is tried every round).
	r.earlyTries++
	rp := decideRoute(j, "spill-over", r.rs, r.rsnap, r.now, start)
	if rp.Held != "" || rp.Route == nil || rp.Route.Kind == routecfg.KindLocal || rp.Decision.Waiting {
		return nil
	}
	return r.record(j, rp)
}

// rerouter makes a round's routing decisions: plan gathers them (and the
// jobs left waiting for one), rsnap is the routing snapshot as each next
// decision would read it.
type rerouter struct {
	rs         *RouteState
	rsnap      routing.Snapshot
	now        time.Time
	plan       RoundPlan
	earlyTries int  // early spill-overs tried this round
	cloud      bool // the config has a cloud backend to spill to
}

// reroute decides queued job j again (path: why, ReroutePath) and returns
// the job as it will be once the route is stored, a copy; nil when the
// round has made MaxRedecisions already and j waits for the next.
func (r *rerouter) reroute(j *jobtype.Job, path string, start time.Time) *jobtype.Job {
	if len(r.plan.Reroutes) >= MaxRedecisions {
		r.plan.OffWaits = append(r.plan.OffWaits, OffWait{j.ID, "routing", "waiting for its routing decision (" + path + ")"})
		return nil
	}
	return r.record(j, decideRoute(j, path, r.rs, r.rsnap, r.now, start))
}

// record adds decision rp about job j to the plan and returns the job as
// it will be once the route is stored.
func (r *rerouter) record(j *jobtype.Job, rp Reroute) *jobtype.Job {
	r.plan.Reroutes = append(r.plan.Reroutes, rp)
	if rp.Reserve && j.BudgetReservedUSD == 0 {
		// What the next decision's read would have seen of it (a job
		// that holds a reservation keeps it: Reserve is a no-op).
		addReserved(&r.rsnap, j.Team, rp.Decision)
	}
	// The job as it will be once the route is stored (a copy: the input
	// stays as read).
	jc := *j
	jc.Route, jc.Held = rp.Route, rp.Held
	return &jc
}

// placementJob is queued job j as placement sees it: its priority, GPU
// request, one CPU slot and its runtime estimate.
func placementJob(j *jobtype.Job, defaultMaxRuntime time.Duration) placement.Job {
	return placement.Job{ID: j.ID, Priority: PlacementPriority(j.Spec.Priority),
		Request: placement.Request{GPUs: j.Spec.Resources.GPUs, Nodes: j.Spec.Resources.Nodes, MinMemoryMB: uint64(j.Spec.Resources.GPUMemoryGB * 1024),
			Models: j.Spec.Resources.GPUModels, CPUSlots: 1},
		Estimate: Estimate(j, defaultMaxRuntime), Expected: j.Spec.ExpectedRuntime.D()}
}

// ReroutePath is why queued job j must be decided again before it is
// placed at now under rs ("" when its route stands): "placement" (no
// route), "preemption", "retry", "config reload" or "spill-over".
func ReroutePath(j *jobtype.Job, rs *RouteState, now time.Time) string {
	switch {
	case j.Route == nil:
		return "placement" // stored before routing existed, or by hand
	case j.Route.Preemptions != j.Preemptions:
		return "preemption"
	case j.Route.Attempt != j.Attempt:
		return "retry"
	case j.Route.ConfigHash != "" && j.Route.ConfigHash != rs.Hash:
		// Decided under another routing config: a reload that did not
		// reach it (cut short) or a restart with a changed config.
		return "config reload"
	case j.Held == "" && j.Route.Kind == routecfg.KindLocal && j.Spec.MaxWait > 0 && now.Sub(j.Route.DecidedAt) >= j.Spec.MaxWait.D():
		// Once it has waited max_wait (not a moment past it: the
		// simulator decides at exactly that instant).
		return "spill-over"
	}
	return ""
}

// decideCloud decides for a queued job routed to a cloud backend: it goes
// to that backend's queue (CloudNode), where its AWS worker claims it
// before it launches anything, unless the backend left the config or has
// no live AWS worker; then it waits with the reason.
func decideCloud(j *jobtype.Job, rs *RouteState, live map[string]bool) (CloudDispatch, OffWait, bool) {
	b, ok := rs.Config.Backend(j.Route.Backend)
	node := jobtype.CloudNode(j.Route.Backend)
	switch {
	case !ok:
		// The config changed under it; a config reload holds or moves it.
		return CloudDispatch{}, OffWait{j.ID, "cloud", fmt.Sprintf("routed to %s, which is no longer in the config", j.Route.Backend)}, false
	case !live[node] && b.Kind == routecfg.KindSlurm:
		return CloudDispatch{}, OffWait{j.ID, "cloud", fmt.Sprintf("routed to %s (site %s): no slurm worker for it is running (lathed worker --backend slurm --slurm-backend %s); it waits there",
			b.Name, b.Site, b.Name)}, false
	case !live[node] && b.Kind == routecfg.KindKubernetes:
		return CloudDispatch{}, OffWait{j.ID, "cloud", fmt.Sprintf("routed to %s (site %s): no kubernetes worker for it is running (lathed worker --backend kubernetes --kube-backend %s); it waits there",
			b.Name, b.Site, b.Name)}, false
	case !live[node]:
		return CloudDispatch{}, OffWait{j.ID, "cloud", fmt.Sprintf("routed to %s (site %s): no AWS worker for it is running (lathed worker --backend aws --aws-backend %s); it waits there",
			b.Name, b.Site, b.Name)}, false
	}
	return CloudDispatch{Job: j, Backend: b, Node: node}, OffWait{}, true
}

// PlacementNodes is the local pool as placement sees it: each live local
// node's GPUs and the jobs holding them, with when each should end
// (Estimate, def the deployment's max_runtime).
func PlacementNodes(in *RoundInput, def time.Duration) []placement.Node {
	var out []placement.Node
	for _, n := range in.Nodes {
		if n.Backend != "local" {
			continue
		}
		pn := placement.Node{Name: n.Name, CPUSlots: n.Slots, CPUSlotsUsed: n.CPUReserved}
		// Who holds each GPU index, as n.GPUHolder says, indexed once: a
		// node with many GPUs and jobs (a simulated pool of 256) would
		// otherwise cost GPUs × jobs.
		holder := make(map[int]string, len(n.GPUs))
		for id, r := range n.Reservations {
			for _, g := range r.GPUs {
				if cur, ok := holder[g]; !ok || id < cur {
					holder[g] = id
				}
			}
		}
		for _, g := range n.GPUs {
			pn.GPUs = append(pn.GPUs, placement.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name,
				MemoryTotalMB: g.MemoryTotalMB, ForeignUsedMB: g.ForeignUsedMB, Healthy: g.Healthy,
				JobID: holder[g.Index]})
		}
		for id, r := range n.Reservations {
			run := placement.Running{JobID: id, Priority: placement.PriorityNormal, GPUs: r.GPUs, EndsAt: in.Now}
			if len(r.GPUs) == 0 {
				run.CPUSlots = 1
			}
			if j := in.Jobs[id]; j != nil {
				run.Priority = PlacementPriority(j.Spec.Priority)
				run.EndsAt = StartOf(j).Add(Estimate(j, def))
				if end, ok := ProgressEnd(j, in.Now); ok {
					run.ExpectedEnd = minTime(end, run.EndsAt)
				} else if d := j.Spec.ExpectedRuntime.D(); d > 0 {
					run.ExpectedEnd = StartOf(j).Add(d)
				}
				run.Preemptible = j.Spec.Priority == jobspec.PriorityBatch && j.State == jobtype.StateRunning
				run.Stopping = j.PreemptRequested != ""
			}
			pn.Running = append(pn.Running, run)
		}
		out = append(out, pn)
	}
	return out
}

// ProgressEnd is when running job j is expected to end by its trainer's
// progress lines: the steps left at the pace since the attempt's first
// line (ProgressFrom: the start-up before it, loading the model and data,
// is not a step's time; a resumed attempt's steps before its checkpoint
// did not run in it). A sweep trial's attempt that pauses at its rung's
// step (stop_at_step) ends there. With one line so far, a first attempt is paced by
// its whole run time per step, start-up included, which errs long. The
// pace counts to now, not to the last line, so a trainer that stopped
// printing is expected to take longer. ok is false without a step and
// total (0 < step < total) or a pace, and the caller falls back on the
// job's run time estimate. A trainer's lines are its owner's word, like
// the spec's expected_runtime: callers keep the end within max_runtime.
func ProgressEnd(j *jobtype.Job, now time.Time) (end time.Time, ok bool) {
	p := j.Progress
	if t := j.Trial; t != nil && t.StopAtStep > 0 && t.StopAtStep < p.TotalSteps {
		p.TotalSteps = t.StopAtStep // a sweep trial's attempt pauses at its rung's step
	}
	if j.State != jobtype.StateRunning || p.Step <= 0 || p.TotalSteps <= p.Step {
		return time.Time{}, false
	}
	var pace float64 // per step
	if m := j.ProgressFrom; m != nil && m.Attempt == j.Attempt && p.Step > m.Step && now.After(m.At) {
		pace = float64(now.Sub(m.At)) / float64(p.Step-m.Step)
	} else if ran := now.Sub(StartOf(j)); j.Attempt == 1 && ran > 0 {
		pace = float64(ran) / float64(p.Step)
	} else {
		return time.Time{}, false
	}
	left := pace * float64(p.TotalSteps-p.Step)
	return now.Add(time.Duration(min(left, float64(maxProgressLeft)))), true
}

// maxProgressLeft keeps ProgressEnd's arithmetic in range (a year).
const maxProgressLeft = 365 * 24 * time.Hour

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// StartOf is when job j's attempt started (its last update before that).
func StartOf(j *jobtype.Job) time.Time {
	if j.StartedAt != nil {
		return *j.StartedAt
	}
	return j.UpdatedAt
}

// PoolPressure is the local pool's queue pressure for routing: the
// GPU-hours of pending jobs at each priority and the GPU-hours running jobs
// still have, from the same read the round placed from (snap). Runtime
// estimates are the routing ones (RuntimeEstimate), not placement's upper
// bound. With no node live, the capacity last published (in.Pressure)
// stands. Joins are left to the caller (JoinWaits).
func PoolPressure(snap placement.Snapshot, in *RoundInput, def time.Duration) poolstate.PoolPressure {
	sps := in.Routing.StepTimes
	var p poolstate.PoolPressure
	healthy := 0
	for _, n := range snap.Nodes {
		for _, g := range n.GPUs {
			if g.Healthy {
				healthy++
			}
		}
		for _, r := range n.Running {
			left := r.EndsAt.Sub(snap.Now)
			if j := in.Jobs[r.JobID]; j != nil {
				left = StartOf(j).Add(RuntimeEstimate(j, sps, def)).Sub(snap.Now)
				if end, ok := ProgressEnd(j, snap.Now); ok {
					left = minTime(end, r.EndsAt).Sub(snap.Now)
				}
			}
			if left > 0 {
				p.RunningGPUHours += left.Hours() * float64(len(r.GPUs))
			}
		}
	}
	for _, pj := range snap.Pending {
		if j := in.Jobs[pj.ID]; j != nil && pj.Priority >= 0 && pj.Priority < 3 {
			p.PendingGPUHours[pj.Priority] += RuntimeEstimate(j, sps, def).Hours() * float64(pj.Request.GPUs*max(pj.Request.Nodes, 1))
		}
	}
	p.HealthyGPUs = healthy
	p.At = snap.Now.UTC()
	p.Capacity = CapacityOf(snap.Nodes)
	if len(p.Capacity) == 0 {
		p.Capacity = in.Pressure.Capacity // no node live: keep what was last seen
	}
	return p
}

// JoinWaits are a plan's joins as waits in seconds after now, by priority
// (−1: never).
func JoinWaits(joins []placement.Join, now time.Time) [3][]poolstate.JoinWait {
	var out [3][]poolstate.JoinWait
	for _, jn := range joins {
		if jn.Priority < 0 || jn.Priority > 2 {
			continue
		}
		w := -1.0
		if !jn.At.IsZero() {
			w = max(0, jn.At.Sub(now).Seconds())
		}
		out[jn.Priority] = append(out[jn.Priority], poolstate.JoinWait{GPUs: jn.GPUs, Nodes: jn.Nodes, WaitS: w})
	}
	return out
}

// CapacityOf counts each node's GPUs by model and memory, healthy or not.
func CapacityOf(nodes []placement.Node) []poolstate.CapacityNode {
	var out []poolstate.CapacityNode
	for _, n := range nodes {
		cn := poolstate.CapacityNode{Name: n.Name}
		for _, g := range n.GPUs {
			mem := float64(g.MemoryTotalMB) / 1024
			merged := false
			for i := range cn.GPUs {
				if cn.GPUs[i].Model == g.Name && cn.GPUs[i].MemoryGB == mem {
					cn.GPUs[i].Count++
					merged = true
				}
			}
			if !merged {
				cn.GPUs = append(cn.GPUs, poolstate.CapacityGPU{Model: g.Name, MemoryGB: mem, Count: 1})
			}
		}
		out = append(out, cn)
	}
	return out
}

// RuntimeEstimate is routing's estimate of job j's run time: its
// expected_runtime, else max_steps × the learned seconds per step of its
// base model (sps, keyed "model|gpu"; on any GPU model it ran on: the
// slowest), else max_runtime, else def.
func RuntimeEstimate(j *jobtype.Job, sps map[string]float64, def time.Duration) time.Duration {
	if d := j.Spec.ExpectedRuntime.D(); d > 0 {
		return d
	}
	if j.Spec.Training.MaxSteps > 0 {
		prefix := strings.ToLower(j.Spec.BaseModel) + "|"
		worst := 0.0
		for k, v := range sps {
			if strings.HasPrefix(k, prefix) && v > worst {
				worst = v
			}
		}
		if worst > 0 {
			return time.Duration(worst * float64(j.Spec.Training.MaxSteps) * float64(time.Second))
		}
	}
	if d := j.Spec.MaxRuntime.D(); d > 0 {
		return d
	}
	return def
}

// Estimate is job j's expected run time for placement: its max_runtime
// (def, the deployment's default, when unset), an upper bound, so that a
// backfilled job can never run past the head's reservation.
func Estimate(j *jobtype.Job, def time.Duration) time.Duration {
	if d := j.Spec.MaxRuntime.D(); d > 0 {
		return d
	}
	return def
}

// PlacementPriority is a job priority as placement ranks it.
func PlacementPriority(p jobspec.Priority) int {
	switch p {
	case jobspec.PriorityUrgent:
		return placement.PriorityUrgent
	case jobspec.PriorityBatch:
		return placement.PriorityBatch
	}
	return placement.PriorityNormal
}
