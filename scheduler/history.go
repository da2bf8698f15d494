package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// historian is the leader's duty that samples the pool every
// Config.HistoryEvery into the store's capped history
// (jobstore.AddHistory): queue depth, the oldest wait, jobs ended since the
// last sample, GPUs busy and their utilisation. GET /api/v1/history and the
// dashboard's history panels read it. A sample costs a few Redis calls:
// the state counts (ZCARD each), the pending set's size, one tally (the
// oldest queued id: ids sort by creation), the live nodes.
type historian struct {
	store *jobstore.Store
	log   *slog.Logger
	keep  int
	// ended is the finished jobs' count at the previous sample (-1: none
	// yet, after this scheduler became the leader), pruned how many the
	// retention deleted since (pruner's callback; same goroutine).
	ended  int64
	pruned int64
}

// historianParams is what a historian is built from.
type historianParams struct {
	Store *jobstore.Store
	Log   *slog.Logger
	Keep  int // Config.HistoryKeep
}

func newHistorian(p historianParams) *historian {
	return &historian{store: p.Store, log: p.Log, keep: p.Keep, ended: -1}
}

// prunedJobs counts jobs the retention deleted, so that the next sample's
// Ended counts them as ended rather than as a drop in the finished count.
func (h *historian) prunedJobs(n int) { h.pruned += int64(n) }

// run takes one sample and stores it.
func (h *historian) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := h.sample(ctx, time.Now())
	if err == nil {
		err = h.store.AddHistory(ctx, s, h.keep)
	}
	if err != nil {
		h.log.Warn("history: sample", slog.Any("err", err))
	}
}

// sample reads the pool at now.
func (h *historian) sample(ctx context.Context, now time.Time) (jobtype.HistorySample, error) {
	s := jobtype.HistorySample{At: now.UTC()}
	counts, err := h.store.CountByState(ctx)
	if err != nil {
		return s, err
	}
	if s.Pending, err = h.store.PendingCount(ctx); err != nil {
		return s, err
	}
	s.Queued = counts[jobtype.StateQueued]
	s.Running = counts[jobtype.StateDispatched] + counts[jobtype.StateProvisioning] + counts[jobtype.StateRunning]
	ended := counts[jobtype.StateSucceeded] + counts[jobtype.StateFailed] + counts[jobtype.StateCancelled]
	if h.ended >= 0 {
		s.Ended = max(0, ended-h.ended+h.pruned)
	}
	h.ended, h.pruned = ended, 0
	if s.Queued > 0 {
		ids, err := h.store.IDsInState(ctx, jobtype.StateQueued, 1)
		if err != nil {
			return s, err
		}
		ts, err := h.store.GetTallies(ctx, ids)
		if err != nil {
			return s, err
		}
		if len(ts) == 1 && !ts[0].CreatedAt.IsZero() && now.After(ts[0].CreatedAt) {
			s.OldestWaitS = now.Sub(ts[0].CreatedAt).Seconds()
		}
	}
	nodes, err := h.store.Nodes(ctx)
	if err != nil {
		return s, err
	}
	s.GPUs, s.GPUsBusy, s.GPUUtilPct = gpuUse(nodes)
	return s, nil
}

// gpuUse counts the nodes' GPUs, those a job holds (a reservation, or the
// job the heartbeat names), and their mean utilisation (%).
func gpuUse(nodes []jobstore.NodeStatus) (gpus, busy int, utilPct float64) {
	util := 0
	for _, n := range nodes {
		held := map[int]bool{}
		for _, r := range n.Reservations {
			for _, g := range r.GPUs {
				held[g] = true
			}
		}
		for _, g := range n.GPUs {
			gpus++
			util += g.UtilizationPct
			if held[g.Index] || g.JobID != "" {
				busy++
			}
		}
	}
	if gpus > 0 {
		utilPct = float64(util) / float64(gpus)
	}
	return gpus, busy, utilPct
}
