package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

func (s *Scheduler) placeLoop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.PlaceInterval)
	defer t.Stop()
	lastRepair, lastPrune := time.Time{}, time.Time{}
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
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// placeOnce places pending jobs in order (priority, then submit time) on
// nodes with a free slot. It stops at the first job that fits nowhere: a
// later job never jumps it (backfill that provably does not delay it comes
// with GPU placement).
func (s *Scheduler) placeOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		s.log.Warn("placer: list nodes", slog.Any("err", err))
		return
	}
	free := 0
	for _, n := range nodes {
		free += max(0, n.Slots-n.Reserved)
	}
	if free == 0 {
		return
	}
	ids, err := s.store.Pending(ctx, free+16)
	if err != nil {
		s.log.Warn("placer: read pending set", slog.Any("err", err))
		return
	}
	jobs, err := s.store.GetMany(ctx, ids)
	if err != nil {
		s.log.Warn("placer: read jobs", slog.Any("err", err))
		return
	}
	for _, j := range jobs {
		if j.State != jobtype.StateQueued {
			continue
		}
		placed, stop := s.placeJob(ctx, j, nodes)
		if stop {
			return
		}
		if placed {
			for i := range nodes {
				if nodes[i].Name == j.Node {
					nodes[i].Reserved++
				}
			}
		}
	}
}

// placeJob tries nodes, fullest-first among those with room (packing keeps
// whole nodes free for bigger work), and enqueues the attempt.
func (s *Scheduler) placeJob(ctx context.Context, j *jobtype.Job, nodes []jobstore.NodeStatus) (placed, stop bool) {
	if j.Spec.Resources.GPUs > 0 {
		// Refused at submit; a job that got here another way waits, logged.
		s.log.Warn("placer: GPU job cannot be placed until the NVML backend exists", slog.String("job_id", j.ID))
		return false, false
	}
	cands := make([]jobstore.NodeStatus, 0, len(nodes))
	for _, n := range nodes {
		if n.Backend == "local" && n.Reserved < n.Slots {
			cands = append(cands, n)
		}
	}
	sort.SliceStable(cands, func(a, b int) bool {
		fa, fb := cands[a].Slots-cands[a].Reserved, cands[b].Slots-cands[b].Reserved
		if fa != fb {
			return fa < fb
		}
		return cands[a].Name < cands[b].Name
	})
	for _, n := range cands {
		err := s.store.Dispatch(ctx, j.ID, j.Attempt, n.Name, "local", n.Slots, nil, s.leaderFence())
		switch {
		case err == nil:
			j.Node = n.Name
			s.enqueue(ctx, j.ID, j.Attempt, n.Name, j.Spec.MaxRuntime.D())
			return true, false
		case errors.Is(err, jobstore.ErrNodeFull):
			continue
		case errors.Is(err, jobstore.ErrConflict):
			return false, false // cancelled or placed by someone else meanwhile
		case errors.Is(err, jobstore.ErrFenced):
			s.log.Warn("placer: no longer the leader; stopping this pass")
			s.fence.Store(jobstore.Fence(""))
			return false, true
		default:
			s.log.Warn("placer: dispatch", slog.String("job_id", j.ID), slog.Any("err", err))
			return false, true
		}
	}
	return false, true
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
	for _, j := range jobs {
		if j.State != jobtype.StateDispatched || time.Since(j.UpdatedAt) < s.cfg.RepairAfter {
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
// ago (their worker died or lost Redis and fenced itself). When more than
// half of the running attempts expired at once, it waits up to
// MassExpiryWait first: that looks like Redis or the network, not like
// every worker dying, and reaping would restart healthy jobs.
func (s *Scheduler) reapOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leases, err := s.store.RunningLeases(ctx, 10000)
	if err != nil {
		return
	}
	now := time.Now()
	var expired []jobstore.Lease
	for _, l := range leases {
		if !l.Until.IsZero() && now.After(l.Until.Add(s.cfg.ReapGrace)) {
			expired = append(expired, l)
		}
	}
	if len(expired) == 0 {
		s.massSince = time.Time{}
		return
	}
	if len(expired) >= 2 && len(expired)*2 > len(leases) {
		if s.massSince.IsZero() {
			s.massSince = now
		}
		if now.Sub(s.massSince) < s.cfg.MassExpiryWait {
			s.log.Warn("reaper: most running attempts have expired leases at once; waiting instead of reaping",
				slog.Int("expired", len(expired)), slog.Int("running", len(leases)), slog.Duration("waited", now.Sub(s.massSince)))
			return
		}
	}
	for _, l := range expired {
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
			s.log.Warn("reaper", slog.String("job_id", l.ID), slog.Any("err", err))
		}
	}
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
