package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/placement"
	"github.com/lathe-ml/lathe/scheduler/routing"
)

func (s *Scheduler) placeLoop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.PlaceInterval)
	defer t.Stop()
	lastRepair, lastPrune, lastSettle := time.Time{}, time.Time{}, time.Time{}
	for {
		if s.lead(ctx) {
			s.reapOnce(ctx)
			s.placeOnce(ctx)
			if time.Since(lastRepair) >= s.cfg.RepairAfter/2 {
				s.repairOnce(ctx)
				lastRepair = time.Now()
			}
			if time.Since(lastPrune) >= time.Minute {
				s.pruneOnce(ctx)
				lastPrune = time.Now()
			}
			if time.Since(lastSettle) >= settleEvery {
				s.settleOnce(ctx)
				lastSettle = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
			s.lastFP = "" // a submit, retry or cancel: always a full round
		}
	}
}

// placeOnce runs one placement round: it reads a snapshot (live local
// nodes with their GPUs and reservations, the jobs holding them, the first
// PlaceScan pending jobs), asks the pure placement package for a plan (best
// fit, EASY backfill, preemption; scheduler/placement/doc.go), then carries
// it out: each assignment is reserved and moved to dispatched in one script
// (the script refuses a GPU another job holds, so a stale snapshot loses
// instead of double-booking), then enqueued; victims of a preemption are
// asked to stop; every waiting job's place in line is written for
// `lathe status`.
func (s *Scheduler) placeOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		s.log.Warn("placer: nodes", slog.Any("err", err))
		return
	}
	pending, err := s.store.PendingCount(ctx)
	if err != nil {
		s.log.Warn("placer: pending count", slog.Any("err", err))
		return
	}
	// A round costs a read of every scanned pending job: skip it while
	// nothing it depends on changed (pending count, reservations, GPU
	// health and foreign memory) and the last round placed nothing, but
	// still run one every placeRefresh so places in line stay fresh.
	fp := fingerprint(pending, nodes)
	if fp == s.lastFP && time.Since(s.lastRound) < placeRefresh {
		return
	}
	snap, jobs, err := s.snapshot(ctx, nodes)
	if err != nil {
		s.log.Warn("placer: snapshot", slog.Any("err", err))
		return
	}
	s.lastRound = time.Now()
	s.lastFP = fp
	s.publishPressure(ctx, snap, jobs)
	if !s.dispatchCloud(ctx, nodes) {
		return
	}
	if len(snap.Pending) == 0 && len(s.offWaits) == 0 {
		if s.hadWaits {
			if err := s.store.SetWaits(ctx, nil); err == nil {
				s.hadWaits = false
			}
		}
		return
	}
	plan := placement.Place(snap)
	if len(plan.Assign) > 0 || len(plan.Preempt) > 0 {
		s.lastFP = "" // the round changed things: look again next tick
	}
	for _, a := range plan.Assign {
		j := jobs[a.JobID]
		capacity := 0
		for _, n := range snap.Nodes {
			if n.Name == a.Node {
				capacity = n.CPUSlots
			}
		}
		err := s.store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: j.Attempt, Node: a.Node, Backend: "local", Capacity: capacity, GPUs: a.GPUs, Fence: s.leaderFence()})
		switch {
		case err == nil:
			s.enqueue(ctx, j.ID, j.Attempt, a.Node, j.Spec.MaxRuntime.D())
		case errors.Is(err, jobstore.ErrNodeFull), errors.Is(err, jobstore.ErrConflict):
			// The snapshot went stale (a reservation or a cancel meanwhile): next round.
			s.log.Debug("placer: dispatch lost to a newer state", slog.String("job_id", j.ID), slog.Any("err", err))
		case errors.Is(err, jobstore.ErrFenced):
			s.log.Warn("placer: no longer the leader; stopping this round")
			s.fence.Store(jobstore.Fence(""))
			return
		default:
			s.log.Warn("placer: dispatch", slog.String("job_id", j.ID), slog.Any("err", err))
			return
		}
	}
	for _, p := range plan.Preempt {
		for _, v := range p.Victims {
			vj := jobs[v]
			if vj == nil {
				continue
			}
			err := s.store.RequestPreempt(ctx, vj.ID, vj.Attempt, p.ForJobID, s.leaderFence())
			if err != nil {
				s.log.Warn("placer: preempt", slog.String("job_id", v), slog.String("for", p.ForJobID), slog.Any("err", err))
				continue
			}
			s.log.Info("preempting a batch job for an urgent one", slog.String("job_id", v), slog.String("for", p.ForJobID),
				slog.String("node", p.Node))
		}
	}
	now := time.Now().UTC()
	waits := make(map[string]jobtype.WaitInfo, len(plan.Waits)+len(s.offWaits))
	for _, w := range s.offWaits {
		waits[w.id] = jobtype.WaitInfo{Code: w.code, Reason: w.reason, At: now}
	}
	for _, w := range plan.Waits {
		wi := jobtype.WaitInfo{Position: w.Position, Code: string(w.Code), Reason: w.Reason, At: now}
		if !w.EstimatedStart.IsZero() {
			t := w.EstimatedStart.UTC()
			wi.EstimatedStart = &t
		}
		waits[w.JobID] = wi
	}
	if err := s.store.SetWaits(ctx, waits); err != nil {
		s.log.Warn("placer: write waits", slog.Any("err", err))
	} else {
		s.hadWaits = len(waits) > 0
	}
}

// snapshot reads what one placement round looks at. jobs maps every job it
// names (pending and holding reservations) to its record.
func (s *Scheduler) snapshot(ctx context.Context, nodes []jobstore.NodeStatus) (placement.Snapshot, map[string]*jobtype.Job, error) {
	snap := placement.Snapshot{Now: time.Now()}
	ids, err := s.store.Pending(ctx, s.cfg.PlaceScan)
	if err != nil {
		return snap, nil, err
	}
	var holders []string
	for _, n := range nodes {
		if n.Backend != "local" {
			continue
		}
		for id := range n.Reservations {
			holders = append(holders, id)
		}
	}
	all, err := s.store.GetMany(ctx, append(ids, holders...))
	if err != nil {
		return snap, nil, err
	}
	jobs := make(map[string]*jobtype.Job, len(all))
	for _, j := range all {
		if j != nil {
			jobs[j.ID] = j
		}
	}
	s.offWaits = s.offWaits[:0]
	s.cloudPending = s.cloudPending[:0]
	redecided := 0
	rs := s.routing()
	for _, id := range ids {
		j := jobs[id]
		if j == nil || j.State != jobtype.StateQueued {
			continue
		}
		// Every attempt is routed before it is placed: a retry, a requeue
		// and a preemption are decided again by the same function, and so
		// is a local job waiting past its max_wait (spill-over).
		path := ""
		switch {
		case j.Route == nil:
			path = "placement" // stored before routing existed, or by hand
		case j.Route.Preemptions != j.Preemptions:
			path = "preemption"
		case j.Route.Attempt != j.Attempt:
			path = "retry"
		case j.Route.ConfigHash != "" && j.Route.ConfigHash != rs.hash:
			// Decided under another routing config: a reload that did not
			// reach it (cut short) or a restart with a changed config.
			path = "config reload"
		case j.Held == "" && j.Route.Kind == routing.KindLocal && j.Spec.MaxWait > 0 && snap.Now.Sub(j.Route.DecidedAt) > j.Spec.MaxWait.D():
			path = "spill-over"
		}
		if path != "" {
			if redecided >= maxRedecisions {
				s.offWaits = append(s.offWaits, offWait{j.ID, "routing", "waiting for its routing decision (" + path + ")"})
				continue
			}
			redecided++
			ri, held, err := s.reroute(ctx, j, path)
			if err != nil {
				return snap, nil, err
			}
			j.Route, j.Held = ri, held
		}
		if j.Held != "" {
			s.offWaits = append(s.offWaits, offWait{j.ID, "held", "held: " + j.Held})
			continue
		}
		if j.Route != nil && j.Route.Kind != "" && j.Route.Kind != routing.KindLocal {
			s.cloudPending = append(s.cloudPending, j)
			continue
		}
		snap.Pending = append(snap.Pending, placement.Job{ID: j.ID, Priority: placementPriority(j.Spec.Priority),
			Request: placement.Request{GPUs: j.Spec.Resources.GPUs, MinMemoryMB: uint64(j.Spec.Resources.GPUMemoryGB * 1024),
				Models: j.Spec.Resources.GPUModels, CPUSlots: 1},
			Estimate: s.estimate(j)})
	}
	for _, n := range nodes {
		if n.Backend != "local" {
			continue
		}
		pn := placement.Node{Name: n.Name, CPUSlots: n.Slots, CPUSlotsUsed: n.CPUReserved}
		for _, g := range n.GPUs {
			pn.GPUs = append(pn.GPUs, placement.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name,
				MemoryTotalMB: g.MemoryTotalMB, ForeignUsedMB: g.ForeignUsedMB, Healthy: g.Healthy,
				JobID: n.GPUHolder(g.Index)})
		}
		for id, r := range n.Reservations {
			run := placement.Running{JobID: id, Priority: placement.PriorityNormal, GPUs: r.GPUs, EndsAt: snap.Now}
			if len(r.GPUs) == 0 {
				run.CPUSlots = 1
			}
			if j := jobs[id]; j != nil {
				run.Priority = placementPriority(j.Spec.Priority)
				start := j.UpdatedAt
				if j.StartedAt != nil {
					start = *j.StartedAt
				}
				run.EndsAt = start.Add(s.estimate(j))
				run.Preemptible = j.Spec.Priority == jobspec.PriorityBatch && j.State == jobtype.StateRunning
				run.Stopping = j.PreemptRequested != ""
			}
			pn.Running = append(pn.Running, run)
		}
		snap.Nodes = append(snap.Nodes, pn)
	}
	return snap, jobs, nil
}

// settleEvery is how often the leader settles the budget reservations of
// jobs that ended.
const settleEvery = 2 * time.Second

// settleOnce settles the budget reservation of every job that ended: its
// reservation is released and its actual cost counted — GPU-hours it ran
// (started to finished, × its GPUs) × its backend's price per GPU-hour. A
// job that never started costs nothing; a cloud attempt's instance cost is
// on the job already (jobstore.AddCost).
func (s *Scheduler) settleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ids, err := s.store.OpenReservations(ctx)
	if err != nil || len(ids) == 0 {
		return
	}
	jobs, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return
	}
	rs := s.routing()
	for _, j := range jobs {
		if j == nil || !j.State.Terminal() {
			continue
		}
		// Cloud attempts added their instances' cost to the job as each
		// instance ended (the AWS worker); a local last attempt adds its
		// GPU-hours here.
		actual := j.CostUSD
		if j.StartedAt != nil && j.FinishedAt != nil && j.Route != nil {
			if b, ok := rs.cfg.Backend(j.Route.Backend); ok && b.Kind == routing.KindLocal {
				actual += j.FinishedAt.Sub(*j.StartedAt).Hours() * float64(j.Spec.Resources.GPUs) * b.USDPerGPUHour()
			}
		}
		if err := s.store.Settle(ctx, j.ID, actual); err != nil {
			s.log.Warn("settle budget", slog.String("job_id", j.ID), slog.Any("err", err))
			continue
		}
		s.log.Debug("budget settled", slog.String("job_id", j.ID), slog.Float64("usd", actual))
	}
}

// offWait is a queued job the placer does not place (held, routed to a
// cloud backend, or not routed yet), with the reason shown in its status.
type offWait struct{ id, code, reason string }

// dispatchCloud moves the queued jobs routed to a cloud backend onto that
// backend's queue (CloudNode), where its AWS worker claims them before it
// launches anything. The node's reservations count the backend's instances,
// up to its max_instances. A job whose backend has no live AWS worker, or
// no instance to spare, waits with the reason. It returns false when the
// leader was fenced (the round must stop).
func (s *Scheduler) dispatchCloud(ctx context.Context, nodes []jobstore.NodeStatus) bool {
	if len(s.cloudPending) == 0 {
		return true
	}
	live := map[string]bool{}
	for _, n := range nodes {
		live[n.Name] = true
	}
	rs := s.routing()
	for _, j := range s.cloudPending {
		b, ok := rs.cfg.Backend(j.Route.Backend)
		node := jobtype.CloudNode(j.Route.Backend)
		switch {
		case !ok:
			// The config changed under it; recheckAll holds or moves it.
			s.offWaits = append(s.offWaits, offWait{j.ID, "cloud", fmt.Sprintf("routed to %s, which is no longer in the config", j.Route.Backend)})
			continue
		case !live[node]:
			s.offWaits = append(s.offWaits, offWait{j.ID, "cloud", fmt.Sprintf("routed to %s (site %s): no AWS worker for it is running (lathed worker --backend aws --aws-backend %s); it waits there",
				b.Name, b.Site, b.Name)})
			continue
		}
		err := s.store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: j.Attempt, Node: node, Backend: b.Name, Capacity: b.MaxInstances, Fence: s.leaderFence()})
		switch {
		case err == nil:
			s.enqueue(ctx, j.ID, j.Attempt, node, j.Spec.MaxRuntime.D())
			s.lastFP = ""
		case errors.Is(err, jobstore.ErrNodeFull):
			s.offWaits = append(s.offWaits, offWait{j.ID, "cloud", fmt.Sprintf("routed to %s (site %s): all %d of its instances (max_instances) are in use; it waits there",
				b.Name, b.Site, b.MaxInstances)})
		case errors.Is(err, jobstore.ErrConflict):
		case errors.Is(err, jobstore.ErrFenced):
			s.log.Warn("placer: no longer the leader; stopping this round")
			s.fence.Store(jobstore.Fence(""))
			return false
		default:
			s.log.Warn("placer: dispatch to cloud", slog.String("job_id", j.ID), slog.Any("err", err))
		}
	}
	return true
}

// maxRedecisions bounds the routing decisions one placement round makes
// (each one is a ledger record); the rest wait for the next round.
const maxRedecisions = 200

// placeRefresh bounds how long the placer skips rounds while nothing changed.
const placeRefresh = 5 * time.Second

// fingerprint sums up what a placement round depends on besides time.
func fingerprint(pending int64, nodes []jobstore.NodeStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", pending)
	for _, n := range nodes {
		fmt.Fprintf(&b, "|%s:%s:%d:%d", n.Name, n.Incarnation, n.Reserved, n.Slots)
		for _, g := range n.GPUs {
			fmt.Fprintf(&b, ",%d:%t:%d", g.Index, g.Healthy, g.ForeignUsedMB>>10)
		}
	}
	return b.String()
}

// publishPressure writes the local pool's queue pressure for routing: the
// GPU-hours of pending jobs at each priority and the GPU-hours running jobs
// still have, from the same snapshot the round placed from. Runtime
// estimates are the routing ones (expected_runtime, learned seconds per
// step × max_steps, else max_runtime), not placement's upper bound.
func (s *Scheduler) publishPressure(ctx context.Context, snap placement.Snapshot, jobs map[string]*jobtype.Job) {
	sps, _ := s.store.StepTimes(ctx)
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
			if j := jobs[r.JobID]; j != nil {
				est := runtimeEstimate(j, sps, s.cfg.Defaults.MaxRuntime)
				start := j.UpdatedAt
				if j.StartedAt != nil {
					start = *j.StartedAt
				}
				left = start.Add(est).Sub(snap.Now)
			}
			if left > 0 {
				p.RunningGPUHours += left.Hours() * float64(len(r.GPUs))
			}
		}
	}
	for _, pj := range snap.Pending {
		if j := jobs[pj.ID]; j != nil && pj.Priority >= 0 && pj.Priority < 3 {
			p.PendingGPUHours[pj.Priority] += runtimeEstimate(j, sps, s.cfg.Defaults.MaxRuntime).Hours() * float64(pj.Request.GPUs)
		}
	}
	p.HealthyGPUs = healthy
	p.At = snap.Now.UTC()
	for _, n := range snap.Nodes {
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
		p.Capacity = append(p.Capacity, cn)
	}
	if len(p.Capacity) == 0 {
		if prev, err := s.store.PoolPressureOf(ctx, "local"); err == nil {
			p.Capacity = prev.Capacity // no node live: keep what was last seen
		}
	}
	if err := s.store.SetPoolPressure(ctx, "local", p); err != nil {
		s.log.Warn("placer: publish pool pressure", slog.Any("err", err))
	}
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

// estimate is a job's expected runtime for placement: its max_runtime (the
// deployment's default when unset), an upper bound, so that a backfilled
// job can never run past the head's reservation. (Estimates learned from
// finished jobs come with routing, issue #5.)
func (s *Scheduler) estimate(j *jobtype.Job) time.Duration {
	if d := j.Spec.MaxRuntime.D(); d > 0 {
		return d
	}
	return s.cfg.Defaults.MaxRuntime
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

// enqueue puts attempt of job id on node's queue. A failure is logged and
// left to the repair loop: the job is already dispatched in the store.
func (s *Scheduler) enqueue(ctx context.Context, id string, attempt int, node string, maxRuntime time.Duration) {
	payload, _ := json.Marshal(jobtype.TaskPayload{JobID: id, Attempt: attempt})
	if maxRuntime <= 0 {
		maxRuntime = s.cfg.Defaults.MaxRuntime
	}
	task := asynq.NewTask(jobtype.TaskType, payload)
	_, err := s.client.EnqueueContext(ctx, task,
		asynq.TaskID(jobtype.TaskID(id, attempt)),
		asynq.Queue(jobtype.NodeQueue(node)),
		asynq.MaxRetry(0),
		asynq.Timeout(maxRuntime+s.cfg.KillGrace+time.Minute),
	)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		s.log.Warn("placer: enqueue failed; the repair loop will retry", slog.String("job_id", id), slog.Int("attempt", attempt), slog.Any("err", err))
		return
	}
	s.log.Debug("dispatched", slog.String("job_id", id), slog.Int("attempt", attempt), slog.String("node", node))
}

// repairOnce finds dispatched attempts whose asynq task is missing (a crash
// between the dispatch script and the enqueue, or a task deleted by hand)
// and enqueues them again. The task id makes a double enqueue harmless, and
// the worker's claim makes a double delivery harmless.
func (s *Scheduler) repairOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ids, err := s.store.IDsInState(ctx, jobtype.StateDispatched, 1000)
	if err != nil {
		return
	}
	jobs, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return
	}
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, n := range nodes {
		live[n.Name] = true
	}
	for _, j := range jobs {
		if j.State != jobtype.StateDispatched || time.Since(j.UpdatedAt) < s.cfg.RepairAfter {
			continue
		}
		if !live[j.Node] && !jobtype.IsCloudNode(j.Node) {
			// Its node died before claiming it (heartbeat expired): no one
			// will take the task; the attempt goes back to the queue and is
			// placed again. A worker that comes back finds its claim stale.
			s.log.Warn("repair: dispatched to a node that is gone; requeueing", slog.String("job_id", j.ID),
				slog.Int("attempt", j.Attempt), slog.String("node", j.Node))
			if err := s.store.Requeue(ctx, j.ID, j.Attempt, "node lost", "node "+j.Node+" stopped heartbeating before the attempt started"); err != nil {
				s.log.Warn("repair: requeue", slog.String("job_id", j.ID), slog.Any("err", err))
			}
			continue
		}
		q, tid := jobtype.NodeQueue(j.Node), jobtype.TaskID(j.ID, j.Attempt)
		info, err := s.insp.GetTaskInfo(q, tid)
		switch {
		case err == nil && (info.State == asynq.TaskStatePending || info.State == asynq.TaskStateActive || info.State == asynq.TaskStateScheduled):
			continue
		case err == nil:
			// Archived or completed while the job is still dispatched: the
			// handler never claimed it. Remove and enqueue again.
			_ = s.insp.DeleteTask(q, tid)
		case !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound):
			continue
		}
		if cur, err := s.store.Get(ctx, j.ID); err != nil || cur.State != jobtype.StateDispatched || cur.Attempt != j.Attempt {
			continue
		}
		s.log.Warn("repair: dispatched attempt had no task; enqueueing again", slog.String("job_id", j.ID), slog.Int("attempt", j.Attempt))
		s.enqueue(ctx, j.ID, j.Attempt, j.Node, j.Spec.MaxRuntime.D())
	}
}

// reapOnce requeues running attempts whose lease ended more than ReapGrace
// ago (their worker died or lost Redis and fenced itself). A lease that
// expired while this scheduler itself saw Redis errors — one within the
// LeaseTTL before the lease's end, or after it — may be a Redis blip that
// kept a live worker from renewing: the reaper holds it off up to
// MassExpiryWait, unless the heartbeats show the node dead (other nodes
// heartbeated since the error, this one did not). The share of leases that
// expired says nothing: when the only node dies, all of them do.
func (s *Scheduler) reapOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leases, err := s.store.RunningLeases(ctx, 10000)
	if err != nil {
		s.sawRedis(err)
		return
	}
	now := time.Now()
	var expired []jobstore.Lease
	for _, l := range leases {
		// A cloud attempt's lease says which AWS worker watches it; when it
		// lapses the instance may still run fine, so the attempt is never
		// reaped: the backend's next worker adopts it, and the reconciler
		// terminates instances whose attempt is no longer live.
		if jobtype.IsCloudNode(l.Node) {
			continue
		}
		if !l.Until.IsZero() && now.After(l.Until.Add(s.cfg.ReapGrace)) {
			expired = append(expired, l)
		}
	}
	if len(expired) == 0 {
		s.holdSince = time.Time{}
		return
	}
	reap := expired
	if errAt := s.lastRedisError(); !errAt.IsZero() {
		nodes, err := s.store.Nodes(ctx)
		if err != nil {
			s.sawRedis(err)
			return
		}
		reap = nil
		var held []jobstore.Lease
		for _, l := range expired {
			if errAt.After(l.Until.Add(-s.cfg.LeaseTTL)) && !nodeDeadSince(nodes, l.Node, errAt) {
				held = append(held, l)
			} else {
				reap = append(reap, l)
			}
		}
		switch {
		case len(held) == 0:
			s.holdSince = time.Time{}
		case s.holdSince.IsZero() || now.Sub(s.holdSince) < s.cfg.MassExpiryWait:
			if s.holdSince.IsZero() {
				s.holdSince = now
			}
			s.log.Warn("reaper: leases expired while this scheduler could not reach Redis (a blip, not dead workers?); waiting instead of reaping them",
				slog.Int("held", len(held)), slog.Time("redis_error_at", errAt), slog.Duration("waited", now.Sub(s.holdSince)),
				slog.Duration("at_most", s.cfg.MassExpiryWait))
		default: // held long enough: reap them, and the next blip waits afresh
			reap = append(reap, held...)
			s.holdSince = time.Time{}
		}
	}
	for _, l := range reap {
		err := s.store.Reap(ctx, l.ID, l.Attempt, s.cfg.ReapGrace, s.leaderFence())
		switch {
		case err == nil:
			s.log.Warn("reaper: lease expired; the job goes back to the pending set as a new attempt",
				slog.String("job_id", l.ID), slog.Int("attempt", l.Attempt), slog.String("node", l.Node))
			s.Wake()
		case errors.Is(err, jobstore.ErrConflict):
		case errors.Is(err, jobstore.ErrFenced):
			s.fence.Store(jobstore.Fence(""))
			return
		default:
			s.sawRedis(err)
			s.log.Warn("reaper", slog.String("job_id", l.ID), slog.Any("err", err))
		}
	}
}

// nodeDeadSince reports whether the heartbeats say node died rather than
// lost Redis for a while: another node heartbeated after errAt (Redis
// answers workers again) and node did not (gone, or last seen before).
func nodeDeadSince(nodes []jobstore.NodeStatus, node string, errAt time.Time) bool {
	othersFresh, thisFresh := false, false
	for _, n := range nodes {
		fresh := n.SeenAt.After(errAt)
		if n.Name == node {
			thisFresh = fresh
		} else if fresh {
			othersFresh = true
		}
	}
	return othersFresh && !thisFresh
}

// pruneOnce applies the retention of finished jobs (KeepFinished,
// FinishedTTL), at most 1000 deletions a pass, so Redis stays small under
// noeviction.
func (s *Scheduler) pruneOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keep := s.cfg.KeepFinished
	if keep < 0 {
		keep = 0 // PruneFinished: 0 = no cap
	}
	var before time.Time
	if s.cfg.FinishedTTL > 0 {
		before = time.Now().Add(-s.cfg.FinishedTTL)
	}
	if keep == 0 && before.IsZero() {
		return
	}
	n, err := s.store.PruneFinished(ctx, keep, before, 1000)
	if err != nil {
		s.log.Warn("retention: prune finished jobs", slog.Any("err", err))
	}
	if n > 0 {
		s.log.Info("retention: deleted finished jobs", slog.Int("deleted", n), slog.Int("keep_finished", s.cfg.KeepFinished))
	}
}
