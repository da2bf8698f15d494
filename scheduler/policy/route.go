package policy

import (
	"maps"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// RouteState is the routing config in force and its hash (the hash every
// route and decision record names).
type RouteState struct {
	Config routecfg.Config
	Hash   string
}

// NewRouteState is cfg in force, with its hash.
func NewRouteState(cfg routecfg.Config) *RouteState {
	return &RouteState{Config: cfg, Hash: cfg.Hash()}
}

// hasCloud says whether the config has a backend a job could burst to.
func (rs *RouteState) hasCloud() bool {
	for _, b := range rs.Config.Backends {
		if b.Kind != routecfg.KindLocal {
			return true
		}
	}
	return false
}

// Assumptions are what-ifs for an explain: a local pool's wait, a
// backend's spend this month.
type Assumptions struct {
	Wait  map[string]time.Duration
	Spent map[string]float64
}

// RoutingInput is what a routing decision reads from the store.
type RoutingInput struct {
	Now       time.Time
	Nodes     []poolstate.NodeStatus
	Pressure  poolstate.PoolPressure // the local pool's, as the last placement round published it
	Spends    map[string]poolstate.Spend
	StepTimes map[string]float64
	// StartRatios are recent local starts' waits over their submit-time
	// estimates, sorted (routing.Snapshot.StartRatios).
	StartRatios []float64
}

// minEstWait is the least submit-time wait estimate a start ratio is
// taken of: the ratio of a wait to an estimate of seconds says nothing.
const minEstWait = time.Minute

// StartRatio is what job j's first start on the owned pool, at now, says
// of the local wait estimate: its wait over the wait estimated when it
// was submitted (its route's, decided at submit, local). ok is false for
// a start that says nothing: a later attempt, a route decided since
// (spill-over, reload), an estimate under a minute or none.
func StartRatio(j *jobtype.Job, now time.Time) (ratio float64, ok bool) {
	r := j.Route
	if j.Attempt != 1 || r == nil || r.Path != "submit" || r.Kind != routecfg.KindLocal || r.EstWaitS < minEstWait.Seconds() {
		return 0, false
	}
	return max(now.Sub(j.CreatedAt).Seconds(), 0) / r.EstWaitS, true
}

// Snapshot builds a routing decision's snapshot from in under rs, with the
// what-ifs of as applied: the first local backend's pool (LocalPool), and
// each backend's and team's spend against its monthly budget.
func Snapshot(rs *RouteState, as Assumptions, in RoutingInput) routing.Snapshot {
	snap := routing.Snapshot{Now: in.Now, Config: rs.Config, Pools: map[string]routing.Pool{},
		BackendSpend: map[string]routing.Spend{}, TeamSpend: map[string]routing.Spend{}, SecondsPerStep: in.StepTimes, StartRatios: in.StartRatios}
	for _, b := range rs.Config.Backends {
		if b.Kind == routecfg.KindLocal {
			// The workers of this deployment form its (first) local pool.
			pool := LocalPool(in.Nodes, in.Pressure, in.Now)
			if d, ok := as.Wait[b.Name]; ok {
				pool.AssumeWait = &d
			}
			snap.Pools[b.Name] = pool
			break
		}
	}
	for _, b := range rs.Config.Backends {
		sp := in.Spends["backend:"+b.Name]
		rsp := routing.Spend{LimitUSD: b.BudgetUSDPerMonth, SpentUSD: sp.SpentUSD, ReservedUSD: sp.ReservedUSD}
		if v, ok := as.Spent[b.Name]; ok {
			rsp.SpentUSD, rsp.ReservedUSD = v, 0
		}
		snap.BackendSpend[b.Name] = rsp
	}
	snap.QueueWait = queueWaits(rs.Config, in.Nodes)
	for team, limit := range rs.Config.TeamBudgetsUSD {
		sp := in.Spends["team:"+team]
		snap.TeamSpend[team] = routing.Spend{LimitUSD: limit, SpentUSD: sp.SpentUSD, ReservedUSD: sp.ReservedUSD}
	}
	return snap
}

// LocalPool is the local pool as routing sees it. Feasibility is judged
// against the pool's hardware, healthy or not (an unhealthy GPU may come
// back; placement skips it, and the job waits), of the live nodes, or as
// last seen (pr.Capacity) when none is live (a restart must not make GPU
// jobs infeasible). The wait counts healthy GPUs only; pr's joins count
// off what has passed between pr.At and now.
func LocalPool(nodes []poolstate.NodeStatus, pr poolstate.PoolPressure, now time.Time) routing.Pool {
	pool := routing.Pool{}
	add := func(pn *routing.PoolNode, model string, mem float64, n int) {
		for i := range pn.GPUs {
			if pn.GPUs[i].Model == model && pn.GPUs[i].MemoryGB == mem {
				pn.GPUs[i].Healthy += n
				return
			}
		}
		pn.GPUs = append(pn.GPUs, routing.PoolGPU{Model: model, MemoryGB: mem, Healthy: n})
	}
	for _, n := range nodes {
		if n.Backend != "local" {
			continue
		}
		pn := routing.PoolNode{Name: n.Name}
		for _, g := range n.GPUs {
			add(&pn, g.Name, float64(g.MemoryTotalMB)/1024, 1)
			if g.Healthy {
				pool.HealthyGPUs++
			}
		}
		pool.Nodes = append(pool.Nodes, pn)
	}
	if len(pool.Nodes) == 0 {
		for _, cn := range pr.Capacity {
			pn := routing.PoolNode{Name: cn.Name}
			for _, g := range cn.GPUs {
				add(&pn, g.Model, g.MemoryGB, g.Count)
			}
			pool.Nodes = append(pool.Nodes, pn)
		}
	}
	pool.GPUHoursAhead = [3]float64{pr.PendingGPUHours[0] + pr.RunningGPUHours, pr.PendingGPUHours[1], pr.PendingGPUHours[2]}
	// The joins are waits from pr.At: what has passed since counts off.
	age := max(0, now.Sub(pr.At).Seconds())
	for p, js := range pr.Joins {
		for _, jw := range js {
			w := jw.WaitS
			if w > 0 {
				w = max(0, w-age)
			}
			pool.Joins[p] = append(pool.Joins[p], routing.JoinWait{GPUs: jw.GPUs, Nodes: jw.Nodes, WaitS: w})
		}
	}
	return pool
}

// RouteInfo condenses decision d, taken under rs on path at now for the
// given attempt and preemption count, into a job's route.
func RouteInfo(d routing.Decision, rs *RouteState, path string, attempt, preemptions int, now time.Time) *jobtype.RouteInfo {
	ri := &jobtype.RouteInfo{Backend: d.Backend, Site: d.Site, Waiting: d.Waiting, Reasons: d.Reasons,
		EstRuntimeS: d.EstRuntime.Seconds(), EstCostUSD: d.EstCostUSD, Path: path, DecidedAt: now.UTC(),
		Attempt: attempt, Preemptions: preemptions, ConfigHash: rs.Hash}
	for _, c := range d.Candidates {
		if c.Backend == d.Backend {
			ri.Kind, ri.EstWaitS = c.Kind, c.EstWaitS
		}
	}
	return ri
}

// DataSizes are the dataset sizes admission learned for a job, as its
// route ri keeps them (unknown when ri is nil or has none).
func DataSizes(ri *jobtype.RouteInfo) (dataset, eval routing.DataSize) {
	if ri == nil {
		return
	}
	if ri.DatasetBytes != nil {
		dataset = routing.KnownSize(*ri.DatasetBytes)
	}
	if ri.EvalDatasetBytes != nil {
		eval = routing.KnownSize(*ri.EvalDatasetBytes)
	}
	return dataset, eval
}

// KeepDataSizes writes rj's known dataset sizes into route ri, so that
// every later decision about the job times staging as the first did.
func KeepDataSizes(ri *jobtype.RouteInfo, rj routing.Job) {
	if ri == nil {
		return
	}
	if s := rj.DatasetSize; s.Known {
		ri.DatasetBytes = &s.Bytes
	}
	if s := rj.EvalDatasetSize; s.Known {
		ri.EvalDatasetBytes = &s.Bytes
	}
}

// Reroute is a new routing decision for a queued job, not stored yet.
type Reroute struct {
	Job  *jobtype.Job // the job as read (not modified)
	Path string       // why it was decided again: "retry", "spill-over", …
	// RoutingJob and Snapshot are the job and the snapshot as the decision
	// saw them (what its ledger record says). Snapshot's spend maps are
	// never changed afterwards: DecideRound counts a reservation in copies.
	RoutingJob routing.Job
	Snapshot   routing.Snapshot
	Decision   routing.Decision
	Route      *jobtype.RouteInfo // the route to store
	Held       string             // why the job is held; "" when it is not
	// Reserve: reserve the decision's estimated cost once the route is
	// stored.
	Reserve bool
}

// DecideRoute decides again for job j about to be placed under a new
// attempt (path "retry", "requeue", "preemption"), re-checked
// ("spill-over", "config reload") or submitted ("submit"), over snap at
// now. A spill-over counts the time j has waited. A refused job keeps its
// route (or gets the refusal's when it has none), held with the reasons,
// marked as decided for this attempt under rs.
func DecideRoute(j *jobtype.Job, path string, rs *RouteState, snap routing.Snapshot, now time.Time) Reroute {
	return decideRoute(j, path, rs, snap, now, time.Time{})
}

// decideRoute is DecideRoute where a spill-over's local wait from now
// runs to start, the job's own estimated start from the last placement
// round (zero: unknown, a new job's join is used).
func decideRoute(j *jobtype.Job, path string, rs *RouteState, snap routing.Snapshot, now, start time.Time) Reroute {
	rj := routing.JobFromSpec(&j.Spec, j.ID, j.Team, j.OutputURI)
	rj.DatasetSize, rj.EvalDatasetSize = DataSizes(j.Route)
	if path == "spill-over" {
		// It waited already: that counts, or a job whose estimate stays
		// under max_wait would wait max_wait again and again.
		rj.Waited = now.Sub(QueuedSince(j))
		if !start.IsZero() {
			d := max(start.Sub(now), 0)
			rj.StartIn = &d
		}
	}
	d := routing.Decide(rj, snap)
	rp := Reroute{Job: j, Path: path, RoutingJob: rj, Snapshot: snap, Decision: d}
	if !d.Refused {
		rp.Route = RouteInfo(d, rs, path, j.Attempt, j.Preemptions, now)
		KeepDataSizes(rp.Route, rj)
		// Every route chosen reserves its estimate: a job that moves to a
		// priced backend on a later attempt (spill-over to the cloud, a
		// retry) reserves it then; one that holds a reservation already
		// keeps it (Reserve is a no-op). A waiting route and a config
		// reload's reserve too: a held job re-decided into either would
		// otherwise be stored with no hold and no reservation, and run
		// with its cost counted against no budget.
		rp.Reserve = d.EstCostUSD > 0 && d.Backend != ""
		return rp
	}
	rp.Held = "no backend may run it now (" + path + "): " + strings.Join(d.Reasons, "; ")
	var ri jobtype.RouteInfo
	if j.Route != nil {
		ri = *j.Route
	} else {
		ri = *RouteInfo(d, rs, path, j.Attempt, j.Preemptions, now)
	}
	ri.Attempt, ri.Preemptions, ri.ConfigHash = j.Attempt, j.Preemptions, rs.Hash
	KeepDataSizes(&ri, rj)
	rp.Route = &ri
	return rp
}

// QueuedSince is when job j's attempt last joined the queue: its submit,
// or the end of its last run (a requeue after a run).
func QueuedSince(j *jobtype.Job) time.Time {
	if j.StartedAt != nil && j.UpdatedAt.After(*j.StartedAt) {
		return j.UpdatedAt
	}
	return j.CreatedAt
}

// addReserved counts a decision's budget reservation in snap's spends, as
// reading them again after jobstore.Reserve would. It changes copies of
// the spend maps, so that the snapshots of earlier decisions stay as they
// saw them.
func addReserved(snap *routing.Snapshot, team string, d routing.Decision) {
	if sp, ok := snap.BackendSpend[d.Backend]; ok {
		sp.ReservedUSD += d.EstCostUSD
		snap.BackendSpend = maps.Clone(snap.BackendSpend)
		snap.BackendSpend[d.Backend] = sp
	}
	if sp, ok := snap.TeamSpend[team]; ok && team != "" {
		sp.ReservedUSD += d.EstCostUSD
		snap.TeamSpend = maps.Clone(snap.TeamSpend)
		snap.TeamSpend[team] = sp
	}
}

// queueWaits is the queue wait each slurm backend's live worker reported
// (Slurm's pending queue of its partition), by backend name.
func queueWaits(c routecfg.Config, nodes []poolstate.NodeStatus) map[string]time.Duration {
	var out map[string]time.Duration
	for _, b := range c.Backends {
		if b.Kind != routecfg.KindSlurm {
			continue
		}
		for _, n := range nodes {
			if n.Name == jobtype.CloudNode(b.Name) && n.QueueWaitS > 0 {
				if out == nil {
					out = map[string]time.Duration{}
				}
				out[b.Name] = time.Duration(n.QueueWaitS * float64(time.Second))
			}
		}
	}
	return out
}
