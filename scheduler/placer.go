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

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/placement"
	"github.com/lathe-ml/lathe/scheduler/policy"
)

// placer is the leader's placement duty. One round is read → decide →
// apply (docs/architecture.md, "The placer"): read takes everything the
// round looks at in a few Redis round trips (policy.RoundInput); policy.DecideRound, a
// pure function, turns it into a policy.RoundPlan (re-routings, assignments,
// cloud dispatches, preemptions, waits, pool pressure); apply writes the
// plan, each write a compare-and-set script that refuses a stale plan. Its
// fields belong to the leader loop's goroutine.
type placer struct {
	store        *jobstore.Store
	log          *slog.Logger
	router       *router
	queue        *enqueuer
	fence        func() jobstore.Fence
	fenced       func()
	placeScan    int
	maxRuntime   time.Duration
	observeRound func(seconds float64)

	lastFP    string    // fingerprint of the last round's inputs
	lastRound time.Time // when the last full round ran
	hadWaits  bool      // the last round wrote waiting jobs
	// starts are the estimated starts of the jobs the last round left
	// waiting (policy.RoundInput.Starts); this leader's own, lost with it.
	starts map[string]time.Time
	// jobs are the records the last round read, decoded: a round reads
	// every record again but decodes only those whose stored fields
	// changed (jobstore.GetManyCached). Read-only to the round; nil
	// (benchmarks' baseline) decodes every record every round.
	jobs *jobstore.JobCache
}

// placerParams is what a placer is built from.
type placerParams struct {
	Store  *jobstore.Store
	Log    *slog.Logger
	Router *router   // the routing config in force, the round's routing inputs, re-routings
	Queue  *enqueuer // enqueues each dispatched attempt
	// Fence is the leader's fence, carried by every dispatch and
	// preemption; Fenced is called when one was refused (the term ended).
	Fence             func() jobstore.Fence
	Fenced            func()
	PlaceScan         int                   // Config.PlaceScan
	DefaultMaxRuntime time.Duration         // Config.Defaults.MaxRuntime
	ObserveRound      func(seconds float64) // each round's duration (the metrics)
}

func newPlacer(p placerParams) *placer {
	return &placer{store: p.Store, log: p.Log, router: p.Router, queue: p.Queue, fence: p.Fence, fenced: p.Fenced,
		placeScan: p.PlaceScan, maxRuntime: p.DefaultMaxRuntime, observeRound: p.ObserveRound, jobs: &jobstore.JobCache{}}
}

// forceRound makes the next round a full one (a submit, retry or cancel).
func (p *placer) forceRound() { p.lastFP = "" }

// round runs one placement round: read, decide (best fit, EASY backfill,
// preemption: scheduler/placement/doc.go; routing of every new attempt:
// docs/routing.md), apply. Each assignment is reserved and moved to
// dispatched in one script (the script refuses a GPU another job holds, so
// a stale read loses instead of double-booking), then enqueued; victims
// of a preemption are asked to stop; every waiting job's place in line is
// written for `lathe status`.
func (p *placer) round(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	in, fp, ok := p.read(ctx)
	if !ok {
		return
	}
	plan := policy.DecideRound(in, p.router.Routing(), policy.RoundOptions{DefaultMaxRuntime: p.maxRuntime})
	p.apply(ctx, in, plan, fp)
	starts := make(map[string]time.Time, len(plan.Place.Waits))
	for _, w := range plan.Place.Waits {
		if !w.EstimatedStart.IsZero() {
			starts[w.JobID] = w.EstimatedStart
		}
	}
	p.starts = starts
	p.observeRound(time.Since(start).Seconds())
}

// read takes the round's inputs. A round costs a read of every scanned
// pending job: it is skipped (ok false) while nothing it depends on
// changed (pending count, reservations, GPU health and foreign memory)
// and the last round placed nothing, but one still runs every
// placeRefresh so places in line stay fresh.
func (p *placer) read(ctx context.Context) (in *policy.RoundInput, fp string, ok bool) {
	nodes, err := p.store.Nodes(ctx)
	if err != nil {
		p.log.Warn("placer: nodes", slog.Any("err", err))
		return nil, "", false
	}
	pending, err := p.store.PendingCount(ctx)
	if err != nil {
		p.log.Warn("placer: pending count", slog.Any("err", err))
		return nil, "", false
	}
	now := time.Now()
	epoch, err := p.store.BudgetEpoch(ctx, jobstore.Month(now))
	if err != nil {
		p.log.Warn("placer: budget epoch", slog.Any("err", err))
		return nil, "", false
	}
	fp = epoch + "|" + fingerprint(pending, nodes)
	if fp == p.lastFP && time.Since(p.lastRound) < placeRefresh {
		return nil, "", false
	}
	in = &policy.RoundInput{Now: now, Nodes: nodes, BudgetEpoch: epoch, Starts: p.starts}
	if err := p.readJobs(ctx, in); err != nil {
		p.log.Warn("placer: snapshot", slog.Any("err", err))
		return nil, "", false
	}
	if in.Routing, err = p.router.readRouting(ctx, p.router.Routing(), in.Now, nodes, false); err != nil {
		p.log.Warn("placer: snapshot", slog.Any("err", err))
		return nil, "", false
	}
	in.Pressure = in.Routing.Pressure
	return in, fp, true
}

// readJobs reads the pending ids and the records of every job the round
// names: the pending ones and those holding a local node's reservations.
// Each record is read whole every round; only those that changed since
// the last round are decoded again (p.jobs), so the jobs in in.Jobs are
// shared between rounds and nothing may modify them.
func (p *placer) readJobs(ctx context.Context, in *policy.RoundInput) error {
	ids, err := p.store.Pending(ctx, p.placeScan)
	if err != nil {
		return err
	}
	var holders []string
	for _, n := range in.Nodes {
		if n.Backend != "local" {
			continue
		}
		for id := range n.Reservations {
			holders = append(holders, id)
		}
	}
	all, err := p.store.GetManyCached(ctx, p.jobs, append(ids, holders...))
	if err != nil {
		return err
	}
	in.Pending = ids
	in.Jobs = make(map[string]*jobtype.Job, len(all))
	for _, j := range all {
		if j != nil {
			in.Jobs[j.ID] = j
		}
	}
	return nil
}

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

// enqueuer puts dispatched attempts on their node's asynq queue: the
// last step of the placer's dispatches and of repair.
type enqueuer struct {
	client            *asynq.Client
	log               *slog.Logger
	defaultMaxRuntime time.Duration // a spec without max_runtime (the deployment default)
	killGrace         time.Duration // Config.KillGrace
}

// enqueue puts attempt of job id on node's queue. A failure is logged and
// left to the repair loop: the job is already dispatched in the store.
func (e *enqueuer) enqueue(ctx context.Context, id string, attempt int, node string, maxRuntime time.Duration) {
	e.put(ctx, jobtype.TaskPayload{JobID: id, Attempt: attempt}, jobtype.TaskID(id, attempt), node, maxRuntime)
}

// enqueueGang puts one task per rank of gang attempt of job id on its
// rank's node queue (TaskID <job>:<attempt>:<rank>), as enqueue does.
func (e *enqueuer) enqueueGang(ctx context.Context, id string, attempt int, ranks []jobtype.GangRank, maxRuntime time.Duration) {
	for r, m := range ranks {
		e.put(ctx, jobtype.TaskPayload{JobID: id, Attempt: attempt, Rank: &r}, jobtype.RankTaskID(id, attempt, r), m.Node, maxRuntime)
	}
}

// put enqueues one task: MaxRetry 0 (a retry is a new attempt, the
// store's), a timeout past max_runtime and the kill grace (the worker ends
// the attempt at max_runtime; asynq's deadline never comes first).
func (e *enqueuer) put(ctx context.Context, p jobtype.TaskPayload, taskID, node string, maxRuntime time.Duration) {
	payload, _ := json.Marshal(p)
	if maxRuntime <= 0 {
		maxRuntime = e.defaultMaxRuntime
	}
	task := asynq.NewTask(jobtype.TaskType, payload)
	_, err := e.client.EnqueueContext(ctx, task,
		asynq.TaskID(taskID),
		asynq.Queue(jobtype.NodeQueue(node)),
		asynq.MaxRetry(0),
		asynq.Timeout(maxRuntime+e.killGrace+time.Minute),
	)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		e.log.Warn("placer: enqueue failed; the repair loop will retry", slog.String("task_id", taskID), slog.Any("err", err))
		return
	}
	e.log.Debug("dispatched", slog.String("task_id", taskID), slog.String("node", node))
}

// apply writes a round's plan, in this order: the re-routings with their
// ledger records (a failure stops the round before anything is placed, and
// the next round reads again), the pool pressure, the cloud dispatches,
// the local assignments, the preemptions, the places in line. Every
// dispatch carries the leader's fence; a fenced one stops the round.
func (p *placer) apply(ctx context.Context, in *policy.RoundInput, plan policy.RoundPlan, fp string) {
	rs := p.router.Routing()
	for _, rp := range plan.Reroutes {
		if _, _, err := p.router.applyReroute(ctx, rs, rp); err != nil {
			if leftQueue(err) {
				// Cancelled or deleted since the read: nothing to decide
				// (its planned dispatch, if any, loses the same way).
				p.log.Debug("placer: reroute of a job that left the queue", slog.String("job_id", rp.Job.ID), slog.Any("err", err))
				continue
			}
			p.log.Warn("placer: reroute", slog.Any("err", err))
			return
		}
	}
	p.lastRound = time.Now()
	p.lastFP = fp
	if err := p.store.SetPoolPressure(ctx, "local", plan.Pressure); err != nil {
		p.log.Warn("placer: publish pool pressure", slog.Any("err", err))
	}
	offWaits, ok := p.dispatchCloud(ctx, plan.Cloud, plan.OffWaits)
	if !ok {
		return
	}
	if len(plan.Snap.Pending) == 0 && len(offWaits) == 0 {
		if p.hadWaits {
			if err := p.store.SetWaits(ctx, nil); err == nil {
				p.hadWaits = false
			}
		}
		return
	}
	if len(plan.Place.Assign) > 0 || len(plan.Place.Preempt) > 0 {
		p.lastFP = "" // the round changed things: look again next tick
	}
	if !p.dispatchLocal(ctx, in, plan) {
		return
	}
	p.preempt(ctx, in, plan)
	p.writeWaits(ctx, plan, offWaits)
}

// dispatchCloud moves each job of cds onto its backend's queue. The
// node's reservations count the backend's instances, up to its
// max_instances; a job with no instance to spare waits with the reason
// (added to offWaits). It returns false when the leader was fenced (the
// round must stop).
func (p *placer) dispatchCloud(ctx context.Context, cds []policy.CloudDispatch, offWaits []policy.OffWait) ([]policy.OffWait, bool) {
	for _, cd := range cds {
		j, b := cd.Job, cd.Backend
		if n := j.Spec.Resources.Nodes; n > 1 {
			// Admission refuses these off the local pool; a spill-over
			// must not put one on a cloud queue either.
			offWaits = append(offWaits, policy.OffWait{ID: j.ID, Code: "cloud", Reason: fmt.Sprintf("resources.nodes %d: backend %s (%s) does not run jobs that span nodes; it waits for the local pool",
				n, b.Name, b.Kind)})
			continue
		}
		err := p.store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: j.Attempt, Node: cd.Node, Backend: b.Name,
			Capacity: b.MaxInstances, Fence: p.fence()})
		switch {
		case err == nil:
			p.queue.enqueue(ctx, j.ID, j.Attempt, cd.Node, j.Spec.MaxRuntime.D())
			p.lastFP = ""
		case errors.Is(err, jobstore.ErrNodeFull):
			offWaits = append(offWaits, policy.OffWait{ID: j.ID, Code: "cloud", Reason: fmt.Sprintf("routed to %s (site %s): all %d of its instances (max_instances) are in use; it waits there",
				b.Name, b.Site, b.MaxInstances)})
		case errors.Is(err, jobstore.ErrConflict):
		case errors.Is(err, jobstore.ErrFenced):
			p.log.Warn("placer: no longer the leader; stopping this round")
			p.fenced()
			return offWaits, false
		default:
			p.log.Warn("placer: dispatch to cloud", slog.String("job_id", j.ID), slog.Any("err", err))
		}
	}
	return offWaits, true
}

// dispatchLocal reserves and dispatches each assignment, then enqueues
// it. A lost compare-and-set (a reservation or a cancel meanwhile) leaves
// the job for the next round. It returns false when the round must stop
// (fenced, or Redis failing).
func (p *placer) dispatchLocal(ctx context.Context, in *policy.RoundInput, plan policy.RoundPlan) bool {
	for _, a := range plan.Place.Assign {
		j := in.Jobs[a.JobID]
		var err error
		if len(a.Gang) > 1 {
			err = p.dispatchGang(ctx, j, a)
		} else {
			err = p.dispatchOne(ctx, j, a, plan)
		}
		switch {
		case err == nil:
		case errors.Is(err, jobstore.ErrNodeFull), errors.Is(err, jobstore.ErrConflict):
			// The read went stale (a reservation or a cancel meanwhile): next round.
			p.log.Debug("placer: dispatch lost to a newer state", slog.String("job_id", j.ID), slog.Any("err", err))
		case errors.Is(err, jobstore.ErrFenced):
			p.log.Warn("placer: no longer the leader; stopping this round")
			p.fenced()
			return false
		default:
			p.log.Warn("placer: dispatch", slog.String("job_id", j.ID), slog.Any("err", err))
			return false
		}
	}
	return true
}

// dispatchOne reserves a's GPUs (or a CPU slot) on its node for j and
// enqueues its attempt.
func (p *placer) dispatchOne(ctx context.Context, j *jobtype.Job, a placement.Assignment, plan policy.RoundPlan) error {
	capacity := 0
	for _, n := range plan.Snap.Nodes {
		if n.Name == a.Node {
			capacity = n.CPUSlots
		}
	}
	err := p.store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: j.Attempt, Node: a.Node, Backend: "local",
		Capacity: capacity, GPUs: a.GPUs, Fence: p.fence()})
	if err == nil {
		p.queue.enqueue(ctx, j.ID, j.Attempt, a.Node, j.Spec.MaxRuntime.D())
		p.learnStart(ctx, j)
	}
	return err
}

// learnStart keeps what job j's start on the owned pool, now, says of the
// local wait estimate (policy.StartRatio), for routing's odds.
func (p *placer) learnStart(ctx context.Context, j *jobtype.Job) {
	if r, ok := policy.StartRatio(j, time.Now()); ok {
		if err := p.store.RecordStartRatio(ctx, r); err != nil {
			p.log.Warn("placer: record a start's wait against its estimate", slog.String("job_id", j.ID), slog.Any("err", err))
		}
	}
}

// dispatchGang reserves every rank's GPUs of gang assignment a for j, or
// none (jobstore.DispatchGang: rank r is a.Gang[r]), and enqueues one task
// per rank on its node's queue.
func (p *placer) dispatchGang(ctx context.Context, j *jobtype.Job, a placement.Assignment) error {
	ranks := make([]jobtype.GangRank, len(a.Gang))
	for r, m := range a.Gang {
		ranks[r] = jobtype.GangRank{Node: m.Node, GPUs: m.GPUs}
	}
	err := p.store.DispatchGang(ctx, j.ID, j.Attempt, ranks, p.fence())
	if err == nil {
		p.log.Info("placer: dispatched a gang", slog.String("job_id", j.ID), slog.Int("attempt", j.Attempt), slog.Any("ranks", ranks))
		p.queue.enqueueGang(ctx, j.ID, j.Attempt, ranks, j.Spec.MaxRuntime.D())
		p.learnStart(ctx, j)
	}
	return err
}

// preempt asks each victim of the plan's preemptions to stop.
func (p *placer) preempt(ctx context.Context, in *policy.RoundInput, plan policy.RoundPlan) {
	for _, pr := range plan.Place.Preempt {
		for _, v := range pr.Victims {
			vj := in.Jobs[v]
			if vj == nil {
				continue
			}
			err := p.store.RequestPreempt(ctx, vj.ID, vj.Attempt, pr.ForJobID, p.fence())
			if err != nil {
				p.log.Warn("placer: preempt", slog.String("job_id", v), slog.String("for", pr.ForJobID), slog.Any("err", err))
				continue
			}
			p.log.Info("preempting a batch job for an urgent one", slog.String("job_id", v), slog.String("for", pr.ForJobID),
				slog.String("node", pr.Node))
		}
	}
}

// writeWaits writes every waiting job's place in line (and the reason of
// those the placer does not place) for `lathe status`.
func (p *placer) writeWaits(ctx context.Context, plan policy.RoundPlan, offWaits []policy.OffWait) {
	now := time.Now().UTC()
	waits := make(map[string]jobtype.WaitInfo, len(plan.Place.Waits)+len(offWaits))
	for _, w := range offWaits {
		waits[w.ID] = jobtype.WaitInfo{Code: w.Code, Reason: w.Reason, At: now}
	}
	for _, w := range plan.Place.Waits {
		wi := jobtype.WaitInfo{Position: w.Position, Code: string(w.Code), Reason: w.Reason, At: now}
		if !w.EstimatedStart.IsZero() {
			t := w.EstimatedStart.UTC()
			wi.EstimatedStart = &t
		}
		waits[w.JobID] = wi
	}
	if err := p.store.SetWaits(ctx, waits); err != nil {
		p.log.Warn("placer: write waits", slog.Any("err", err))
	} else {
		p.hadWaits = len(waits) > 0
	}
}
