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
	router       router
	queue        *enqueuer
	fence        func() jobstore.Fence
	fenced       func()
	placeScan    int
	maxRuntime   time.Duration
	observeRound func(seconds float64)

	lastFP    string    // fingerprint of the last round's inputs
	lastRound time.Time // when the last full round ran
	hadWaits  bool      // the last round wrote waiting jobs
}

// placerParams is what a placer is built from.
type placerParams struct {
	Store  *jobstore.Store
	Log    *slog.Logger
	Router router    // the routing config in force, the round's routing inputs, re-routings
	Queue  *enqueuer // enqueues each dispatched attempt
	// Fence is the leader's fence, carried by every dispatch and
	// preemption; Fenced is called when one was refused (the term ended).
	Fence             func() jobstore.Fence
	Fenced            func()
	PlaceScan         int                   // Config.PlaceScan
	DefaultMaxRuntime time.Duration         // Config.Defaults.MaxRuntime
	ObserveRound      func(seconds float64) // each round's duration (the metrics)
}

// router is what the placer needs of the routing paths (route.go): the
// routing config in force, a round's routing inputs, and a re-routing
// written with its ledger records.
type router interface {
	routing() *policy.RouteState
	readRouting(ctx context.Context, rs *policy.RouteState, now time.Time, nodes []jobstore.NodeStatus) (policy.RoutingInput, error)
	applyReroute(ctx context.Context, rs *policy.RouteState, rp policy.Reroute) (*jobtype.RouteInfo, string, error)
}

var _ router = (*Scheduler)(nil)

func newPlacer(p placerParams) *placer {
	return &placer{store: p.Store, log: p.Log, router: p.Router, queue: p.Queue, fence: p.Fence, fenced: p.Fenced,
		placeScan: p.PlaceScan, maxRuntime: p.DefaultMaxRuntime, observeRound: p.ObserveRound}
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
	plan := policy.DecideRound(in, p.router.routing(), policy.RoundOptions{DefaultMaxRuntime: p.maxRuntime})
	p.apply(ctx, in, plan, fp)
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
	fp = fingerprint(pending, nodes)
	if fp == p.lastFP && time.Since(p.lastRound) < placeRefresh {
		return nil, "", false
	}
	in = &policy.RoundInput{Now: time.Now(), Nodes: nodes}
	if err := p.readJobs(ctx, in); err != nil {
		p.log.Warn("placer: snapshot", slog.Any("err", err))
		return nil, "", false
	}
	if in.Routing, err = p.router.readRouting(ctx, p.router.routing(), in.Now, nodes); err != nil {
		p.log.Warn("placer: snapshot", slog.Any("err", err))
		return nil, "", false
	}
	in.Pressure = in.Routing.Pressure
	return in, fp, true
}

// readJobs reads the pending ids and the records of every job the round
// names: the pending ones and those holding a local node's reservations.
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
	all, err := p.store.GetMany(ctx, append(ids, holders...))
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
	payload, _ := json.Marshal(jobtype.TaskPayload{JobID: id, Attempt: attempt})
	if maxRuntime <= 0 {
		maxRuntime = e.defaultMaxRuntime
	}
	task := asynq.NewTask(jobtype.TaskType, payload)
	_, err := e.client.EnqueueContext(ctx, task,
		asynq.TaskID(jobtype.TaskID(id, attempt)),
		asynq.Queue(jobtype.NodeQueue(node)),
		asynq.MaxRetry(0),
		asynq.Timeout(maxRuntime+e.killGrace+time.Minute),
	)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		e.log.Warn("placer: enqueue failed; the repair loop will retry", slog.String("job_id", id), slog.Int("attempt", attempt), slog.Any("err", err))
		return
	}
	e.log.Debug("dispatched", slog.String("job_id", id), slog.Int("attempt", attempt), slog.String("node", node))
}
