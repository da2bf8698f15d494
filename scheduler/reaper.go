package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// reaper is the leader's duty that requeues attempts whose worker is gone.
type reaper struct {
	s *Scheduler
	// holdSince is when the reaper first held off expired leases for a
	// Redis blip (zero: it holds none).
	holdSince time.Time
}

// run requeues running attempts whose lease ended more than ReapGrace
// ago (their worker died or lost Redis and fenced itself). A lease that
// expired while this scheduler itself saw Redis errors — one within the
// LeaseTTL before the lease's end, or after it — may be a Redis blip that
// kept a live worker from renewing: the reaper holds it off up to
// MassExpiryWait, unless the heartbeats show the node dead (other nodes
// heartbeated since the error, this one did not). The share of leases that
// expired says nothing: when the only node dies, all of them do.
func (r *reaper) run(ctx context.Context) {
	s := r.s
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
		r.holdSince = time.Time{}
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
			r.holdSince = time.Time{}
		case r.holdSince.IsZero() || now.Sub(r.holdSince) < s.cfg.MassExpiryWait:
			if r.holdSince.IsZero() {
				r.holdSince = now
			}
			s.log.Warn("reaper: leases expired while this scheduler could not reach Redis (a blip, not dead workers?); waiting instead of reaping them",
				slog.Int("held", len(held)), slog.Time("redis_error_at", errAt), slog.Duration("waited", now.Sub(r.holdSince)),
				slog.Duration("at_most", s.cfg.MassExpiryWait))
		default: // held long enough: reap them, and the next blip waits afresh
			reap = append(reap, held...)
			r.holdSince = time.Time{}
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
