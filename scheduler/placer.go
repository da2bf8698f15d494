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
	s         *Scheduler
	lastFP    string    // fingerprint of the last round's inputs
	lastRound time.Time // when the last full round ran
	hadWaits  bool      // the last round wrote waiting jobs
}

func newPlacer(s *Scheduler) *placer { return &placer{s: s} }

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
	s := p.s
	plan := policy.DecideRound(in, s.routing(), policy.RoundOptions{DefaultMaxRuntime: s.cfg.Defaults.MaxRuntime})
	p.apply(ctx, in, plan, fp)
	s.metrics.placeRound.Observe(time.Since(start).Seconds())
}

// read takes the round's inputs. A round costs a read of every scanned
// pending job: it is skipped (ok false) while nothing it depends on
// changed (pending count, reservations, GPU health and foreign memory)
// and the last round placed nothing, but one still runs every
// placeRefresh so places in line stay fresh.
func (p *placer) read(ctx context.Context) (in *policy.RoundInput, fp string, ok bool) {
	s := p.s
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		s.log.Warn("placer: nodes", slog.Any("err", err))
		return nil, "", false
	}
	pending, err := s.store.PendingCount(ctx)
	if err != nil {
		s.log.Warn("placer: pending count", slog.Any("err", err))
		return nil, "", false
	}
	fp = fingerprint(pending, nodes)
	if fp == p.lastFP && time.Since(p.lastRound) < placeRefresh {
		return nil, "", false
	}
	in = &policy.RoundInput{Now: time.Now(), Nodes: nodes}
	if err := p.readJobs(ctx, in); err != nil {
		s.log.Warn("placer: snapshot", slog.Any("err", err))
		return nil, "", false
	}
	if in.Routing, err = s.readRouting(ctx, s.routing(), in.Now, nodes); err != nil {
		s.log.Warn("placer: snapshot", slog.Any("err", err))
		return nil, "", false
	}
	in.Pressure = in.Routing.Pressure
	return in, fp, true
}

// readJobs reads the pending ids and the records of every job the round
// names: the pending ones and those holding a local node's reservations.
func (p *placer) readJobs(ctx context.Context, in *policy.RoundInput) error {
	s := p.s
	ids, err := s.store.Pending(ctx, s.cfg.PlaceScan)
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
	all, err := s.store.GetMany(ctx, append(ids, holders...))
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
