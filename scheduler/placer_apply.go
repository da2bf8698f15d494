package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/policy"
)

// apply writes a round's plan, in this order: the re-routings with their
// ledger records (a failure stops the round before anything is placed, and
// the next round reads again), the pool pressure, the cloud dispatches,
// the local assignments, the preemptions, the places in line. Every
// dispatch carries the leader's fence; a fenced one stops the round.
func (p *placer) apply(ctx context.Context, in *policy.RoundInput, plan policy.RoundPlan, fp string) {
	rs := p.router.routing()
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
		capacity := 0
		for _, n := range plan.Snap.Nodes {
			if n.Name == a.Node {
				capacity = n.CPUSlots
			}
		}
		err := p.store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: j.Attempt, Node: a.Node, Backend: "local",
			Capacity: capacity, GPUs: a.GPUs, Fence: p.fence()})
		switch {
		case err == nil:
			p.queue.enqueue(ctx, j.ID, j.Attempt, a.Node, j.Spec.MaxRuntime.D())
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
