package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/placement"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// roundOptions are the settings a round's decision depends on.
type roundOptions struct {
	defaultMaxRuntime time.Duration // Config.Defaults.MaxRuntime
	ledger            bool          // decisions carry ledger records
}

// roundPlan is what one placement round decided; apply writes it.
type roundPlan struct {
	reroutes []reroutePlan      // in queue order, applied first
	offWaits []offWait          // held, or waiting for their routing decision
	cloud    []cloudDispatch    // queued jobs routed to a live cloud backend
	snap     placement.Snapshot // the local pool as placement saw it
	place    placement.Plan     // assignments, preemptions, waits (local)
	pressure jobstore.PoolPressure
}

// cloudDispatch is a queued job routed to a cloud backend with a live
// AWS worker: apply moves it to that backend's queue.
type cloudDispatch struct {
	job     *jobtype.Job
	backend routecfg.Backend
	node    string // jobtype.CloudNode of the backend
}

// decideRound is a placement round's decision, pure: no Redis, no clock
// (in.now is the round's time). Every queued attempt is routed before it
// is placed: a retry, a requeue and a preemption are decided again by the
// same function (routing.Decide), and so is a local job waiting past its
// max_wait (spill-over) or one decided under another routing config.
func decideRound(in *roundInput, rs *routeState, opts roundOptions) roundPlan {
	var plan roundPlan
	snap := placement.Snapshot{Now: in.now}
	rsnap := routingSnapshot(rs, Assumptions{}, in.routing)
	live := map[string]bool{}
	for _, n := range in.nodes {
		live[n.Name] = true
	}
	for _, id := range in.pending {
		j := in.jobs[id]
		if j == nil || j.State != jobtype.StateQueued {
			continue
		}
		if path := reroutePath(j, rs, in.now); path != "" {
			if len(plan.reroutes) >= maxRedecisions {
				plan.offWaits = append(plan.offWaits, offWait{j.ID, "routing", "waiting for its routing decision (" + path + ")"})
				continue
			}
			rp := decideRoute(j, path, rs, rsnap, in.now, opts.ledger)
			plan.reroutes = append(plan.reroutes, rp)
			if rp.reserve && j.BudgetReservedUSD == 0 {
				// What the next decision's read would have seen of it (a job
				// that holds a reservation keeps it: Reserve is a no-op).
				addReserved(&rsnap, j.Team, rp.decision)
			}
			// The job as it will be once the route is stored (a copy: the
			// input stays as read).
			jc := *j
			jc.Route, jc.Held = rp.route, rp.held
			j = &jc
		}
		if j.Held != "" {
			plan.offWaits = append(plan.offWaits, offWait{j.ID, "held", "held: " + j.Held})
			continue
		}
		if j.Route != nil && j.Route.Kind != "" && j.Route.Kind != routecfg.KindLocal {
			if cd, ow, ok := decideCloud(j, rs, live); ok {
				plan.cloud = append(plan.cloud, cd)
			} else {
				plan.offWaits = append(plan.offWaits, ow)
			}
			continue
		}
		snap.Pending = append(snap.Pending, placement.Job{ID: j.ID, Priority: placementPriority(j.Spec.Priority),
			Request: placement.Request{GPUs: j.Spec.Resources.GPUs, MinMemoryMB: uint64(j.Spec.Resources.GPUMemoryGB * 1024),
				Models: j.Spec.Resources.GPUModels, CPUSlots: 1},
			Estimate: estimate(j, opts.defaultMaxRuntime)})
	}
	snap.Nodes = placementNodes(in, opts.defaultMaxRuntime)
	plan.snap = snap
	plan.place = placement.Place(snap)
	plan.pressure = poolPressure(snap, in, opts.defaultMaxRuntime)
	plan.pressure.Joins = joinWaits(plan.place.Joins, snap.Now)
	return plan
}

// reroutePath is why a queued job must be decided again before it is
// placed ("" when its route stands).
func reroutePath(j *jobtype.Job, rs *routeState, now time.Time) string {
	switch {
	case j.Route == nil:
		return "placement" // stored before routing existed, or by hand
	case j.Route.Preemptions != j.Preemptions:
		return "preemption"
	case j.Route.Attempt != j.Attempt:
		return "retry"
	case j.Route.ConfigHash != "" && j.Route.ConfigHash != rs.hash:
		// Decided under another routing config: a reload that did not
		// reach it (cut short) or a restart with a changed config.
		return "config reload"
	case j.Held == "" && j.Route.Kind == routecfg.KindLocal && j.Spec.MaxWait > 0 && now.Sub(j.Route.DecidedAt) > j.Spec.MaxWait.D():
		return "spill-over"
	}
	return ""
}

// addReserved counts a decision's budget reservation in snap's spends, as
// reading them again after jobstore.Reserve would.
func addReserved(snap *routing.Snapshot, team string, d routing.Decision) {
	if sp, ok := snap.BackendSpend[d.Backend]; ok {
		sp.ReservedUSD += d.EstCostUSD
		snap.BackendSpend[d.Backend] = sp
	}
	if sp, ok := snap.TeamSpend[team]; ok && team != "" {
		sp.ReservedUSD += d.EstCostUSD
		snap.TeamSpend[team] = sp
	}
}

// decideCloud decides for a queued job routed to a cloud backend: it goes
// to that backend's queue (CloudNode), where its AWS worker claims it
// before it launches anything, unless the backend left the config or has
// no live AWS worker; then it waits with the reason.
func decideCloud(j *jobtype.Job, rs *routeState, live map[string]bool) (cloudDispatch, offWait, bool) {
	b, ok := rs.cfg.Backend(j.Route.Backend)
	node := jobtype.CloudNode(j.Route.Backend)
	switch {
	case !ok:
		// The config changed under it; recheckAll holds or moves it.
		return cloudDispatch{}, offWait{j.ID, "cloud", fmt.Sprintf("routed to %s, which is no longer in the config", j.Route.Backend)}, false
	case !live[node]:
		return cloudDispatch{}, offWait{j.ID, "cloud", fmt.Sprintf("routed to %s (site %s): no AWS worker for it is running (lathed worker --backend aws --aws-backend %s); it waits there",
			b.Name, b.Site, b.Name)}, false
	}
	return cloudDispatch{job: j, backend: b, node: node}, offWait{}, true
}

// placementNodes is the local pool as placement sees it: each live local
// node's GPUs and the jobs holding them, with when each should end.
func placementNodes(in *roundInput, def time.Duration) []placement.Node {
	var out []placement.Node
	for _, n := range in.nodes {
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
			run := placement.Running{JobID: id, Priority: placement.PriorityNormal, GPUs: r.GPUs, EndsAt: in.now}
			if len(r.GPUs) == 0 {
				run.CPUSlots = 1
			}
			if j := in.jobs[id]; j != nil {
				run.Priority = placementPriority(j.Spec.Priority)
				run.EndsAt = startOf(j).Add(estimate(j, def))
				run.Preemptible = j.Spec.Priority == jobspec.PriorityBatch && j.State == jobtype.StateRunning
				run.Stopping = j.PreemptRequested != ""
			}
			pn.Running = append(pn.Running, run)
		}
		out = append(out, pn)
	}
	return out
}

// startOf is when a job's attempt started (its last update before that).
func startOf(j *jobtype.Job) time.Time {
	if j.StartedAt != nil {
		return *j.StartedAt
	}
	return j.UpdatedAt
}

// poolPressure is the local pool's queue pressure for routing: the
// GPU-hours of pending jobs at each priority and the GPU-hours running jobs
// still have, from the same read the round placed from. Runtime estimates
// are the routing ones (expected_runtime, learned seconds per step ×
// max_steps, else max_runtime), not placement's upper bound. With no node
// live, the capacity last published stands.
func poolPressure(snap placement.Snapshot, in *roundInput, def time.Duration) jobstore.PoolPressure {
	sps := in.routing.stepTimes
	var p jobstore.PoolPressure
	healthy := 0
	for _, n := range snap.Nodes {
		for _, g := range n.GPUs {
			if g.Healthy {
				healthy++
			}
		}
		for _, r := range n.Running {
			left := r.EndsAt.Sub(snap.Now)
			if j := in.jobs[r.JobID]; j != nil {
				left = startOf(j).Add(runtimeEstimate(j, sps, def)).Sub(snap.Now)
			}
			if left > 0 {
				p.RunningGPUHours += left.Hours() * float64(len(r.GPUs))
			}
		}
	}
	for _, pj := range snap.Pending {
		if j := in.jobs[pj.ID]; j != nil && pj.Priority >= 0 && pj.Priority < 3 {
			p.PendingGPUHours[pj.Priority] += runtimeEstimate(j, sps, def).Hours() * float64(pj.Request.GPUs)
		}
	}
	p.HealthyGPUs = healthy
	p.At = snap.Now.UTC()
	p.Capacity = capacityOf(snap.Nodes)
	if len(p.Capacity) == 0 {
		p.Capacity = in.pressure.Capacity // no node live: keep what was last seen
	}
	return p
}

// joinWaits are a plan's joins as waits after now, by priority.
func joinWaits(joins []placement.Join, now time.Time) [3][]jobstore.JoinWait {
	var out [3][]jobstore.JoinWait
	for _, jn := range joins {
		if jn.Priority < 0 || jn.Priority > 2 {
			continue
		}
		w := -1.0
		if !jn.At.IsZero() {
			w = max(0, jn.At.Sub(now).Seconds())
		}
		out[jn.Priority] = append(out[jn.Priority], jobstore.JoinWait{GPUs: jn.GPUs, WaitS: w})
	}
	return out
}

// capacityOf counts each node's GPUs by model and memory.
func capacityOf(nodes []placement.Node) []jobstore.CapacityNode {
	var out []jobstore.CapacityNode
	for _, n := range nodes {
		cn := jobstore.CapacityNode{Name: n.Name}
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
				cn.GPUs = append(cn.GPUs, jobstore.CapacityGPU{Model: g.Name, MemoryGB: mem, Count: 1})
			}
		}
		out = append(out, cn)
	}
	return out
}

// runtimeEstimate is routing's estimate of a job's run time: its
// expected_runtime, else max_steps × the learned seconds per step of its
// base model (on any GPU model it ran on: the slowest), else max_runtime.
func runtimeEstimate(j *jobtype.Job, sps map[string]float64, def time.Duration) time.Duration {
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

// estimate is a job's expected runtime for placement: its max_runtime (def,
// the deployment's default, when unset), an upper bound, so that a
// backfilled job can never run past the head's reservation.
func estimate(j *jobtype.Job, def time.Duration) time.Duration {
	if d := j.Spec.MaxRuntime.D(); d > 0 {
		return d
	}
	return def
}

func placementPriority(p jobspec.Priority) int {
	switch p {
	case jobspec.PriorityUrgent:
		return placement.PriorityUrgent
	case jobspec.PriorityBatch:
		return placement.PriorityBatch
	}
	return placement.PriorityNormal
}
