package scheduler

// The leader's upkeep duties: the reaper (attempts whose worker is gone),
// repair (dispatched attempts whose asynq task is missing), the pruner
// (finished jobs past the retention) and the historian (the pool's
// history, sampled).

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// reaper is the leader's duty that requeues attempts whose worker is gone.
type reaper struct {
	store          *jobstore.Store
	log            *slog.Logger
	grace          time.Duration
	massExpiryWait time.Duration
	leaseTTL       time.Duration
	fence          func() jobstore.Fence
	fenced         func()
	sawRedis       func(error)
	lastRedisError func() time.Time
	wake           func()

	// holdSince is when the reaper first held off expired leases for a
	// Redis blip (zero: it holds none).
	holdSince time.Time
}

// reaperParams is what a reaper is built from.
type reaperParams struct {
	Store          *jobstore.Store
	Log            *slog.Logger
	Grace          time.Duration // Config.ReapGrace
	MassExpiryWait time.Duration // Config.MassExpiryWait
	LeaseTTL       time.Duration // Config.LeaseTTL
	// Fence is the leader's fence, carried by every reap; Fenced is called
	// when a reap was refused (the term ended).
	Fence  func() jobstore.Fence
	Fenced func()
	// SawRedis notes a Redis error this scheduler saw; LastRedisError is
	// when it last saw one (zero: never).
	SawRedis       func(error)
	LastRedisError func() time.Time
	Wake           func() // a reaped attempt is pending again: place it
}

func newReaper(p reaperParams) *reaper {
	return &reaper{store: p.Store, log: p.Log, grace: p.Grace, massExpiryWait: p.MassExpiryWait, leaseTTL: p.LeaseTTL,
		fence: p.Fence, fenced: p.Fenced, sawRedis: p.SawRedis, lastRedisError: p.LastRedisError, wake: p.Wake}
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leases, err := r.store.RunningLeases(ctx, 10000)
	if err != nil {
		r.sawRedis(err)
		return
	}
	now := time.Now()
	expired := r.expired(leases, now)
	if len(expired) == 0 {
		r.holdSince = time.Time{}
		return
	}
	reap := expired
	if errAt := r.lastRedisError(); !errAt.IsZero() {
		if reap, err = r.holdOff(ctx, expired, errAt, now); err != nil {
			r.sawRedis(err)
			return
		}
	}
	r.reapLeases(ctx, reap)
}

// expired is the leases of leases that ended more than the grace before
// now, but for cloud attempts'.
func (r *reaper) expired(leases []jobstore.Lease, now time.Time) []jobstore.Lease {
	var expired []jobstore.Lease
	for _, l := range leases {
		// A cloud attempt's lease says which AWS worker watches it; when it
		// lapses the instance may still run fine, so the attempt is never
		// reaped: the backend's next worker adopts it, and the reconciler
		// terminates instances whose attempt is no longer live.
		if jobtype.IsCloudNode(l.Node) {
			continue
		}
		if !l.Until.IsZero() && now.After(l.Until.Add(r.grace)) {
			expired = append(expired, l)
		}
	}
	return expired
}

// holdOff is the leases of expired to reap now that this scheduler saw a
// Redis error at errAt: a lease that may have lapsed in that blip (it
// ended within LeaseTTL of the error, or after it) and whose node the
// heartbeats do not show dead is held off, for up to MassExpiryWait since
// the reaper first held one; then it is reaped with the rest.
func (r *reaper) holdOff(ctx context.Context, expired []jobstore.Lease, errAt, now time.Time) ([]jobstore.Lease, error) {
	nodes, err := r.store.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var reap, held []jobstore.Lease
	for _, l := range expired {
		if errAt.After(l.Until.Add(-r.leaseTTL)) && !nodeDeadSince(nodes, l.Node, errAt) {
			held = append(held, l)
		} else {
			reap = append(reap, l)
		}
	}
	switch {
	case len(held) == 0:
		r.holdSince = time.Time{}
	case r.holdSince.IsZero() || now.Sub(r.holdSince) < r.massExpiryWait:
		if r.holdSince.IsZero() {
			r.holdSince = now
		}
		r.log.Warn("reaper: leases expired while this scheduler could not reach Redis (a blip, not dead workers?); waiting instead of reaping them",
			slog.Int("held", len(held)), slog.Time("redis_error_at", errAt), slog.Duration("waited", now.Sub(r.holdSince)),
			slog.Duration("at_most", r.massExpiryWait))
	default: // held long enough: reap them, and the next blip waits afresh
		reap = append(reap, held...)
		r.holdSince = time.Time{}
	}
	return reap, nil
}

// reapLeases requeues the attempt of each of leases as a new attempt;
// it stops at a fenced write (this scheduler lost the lease).
func (r *reaper) reapLeases(ctx context.Context, leases []jobstore.Lease) {
	for _, l := range leases {
		err := r.store.Reap(ctx, l.ID, l.Attempt, r.grace, r.fence())
		switch {
		case err == nil:
			r.log.Warn("reaper: lease expired; the job goes back to the pending set as a new attempt",
				slog.String("job_id", l.ID), slog.Int("attempt", l.Attempt), slog.String("node", l.Node))
			r.wake()
		case errors.Is(err, jobstore.ErrConflict):
		case errors.Is(err, jobstore.ErrFenced):
			r.fenced()
			return
		default:
			r.sawRedis(err)
			r.log.Warn("reaper", slog.String("job_id", l.ID), slog.Any("err", err))
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

// repairer is the leader's duty that enqueues again dispatched attempts
// whose task is missing.
type repairer struct {
	store       *jobstore.Store
	log         *slog.Logger
	tasks       taskInspector
	queue       *enqueuer
	repairAfter time.Duration
}

// repairerParams is what a repairer is built from.
type repairerParams struct {
	Store       *jobstore.Store
	Log         *slog.Logger
	Tasks       taskInspector // asynq's view of the tasks (an *asynq.Inspector)
	Queue       *enqueuer     // enqueues an attempt again
	RepairAfter time.Duration // Config.RepairAfter
}

// taskInspector is what repair needs of asynq's Inspector.
type taskInspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

var _ taskInspector = (*asynq.Inspector)(nil)

func newRepairer(p repairerParams) *repairer {
	return &repairer{store: p.Store, log: p.Log, tasks: p.Tasks, queue: p.Queue, repairAfter: p.RepairAfter}
}

// run finds dispatched attempts whose asynq task is missing (a crash
// between the dispatch script and the enqueue, or a task deleted by hand)
// and enqueues them again. The task id makes a double enqueue harmless, and
// the worker's claim makes a double delivery harmless.
func (d *repairer) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ids, err := d.store.IDsInState(ctx, jobtype.StateDispatched, 1000)
	if err != nil {
		return
	}
	jobs, err := d.store.GetMany(ctx, ids)
	if err != nil {
		return
	}
	nodes, err := d.store.Nodes(ctx)
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, n := range nodes {
		live[n.Name] = true
	}
	for _, j := range jobs {
		if j.State != jobtype.StateDispatched || time.Since(j.UpdatedAt) < d.repairAfter {
			continue
		}
		if (!live[j.Node] && !jobtype.IsCloudNode(j.Node)) || gangNodeLost(j, live) {
			d.requeueLost(ctx, j)
			continue
		}
		d.enqueueMissing(ctx, j)
	}
}

// gangNodeLost reports whether a rank of j's current gang attempt is on a
// node that is not live (its whole attempt is placed again).
func gangNodeLost(j *jobtype.Job, live map[string]bool) bool {
	if j.Gang == nil || j.Gang.Attempt != j.Attempt {
		return false
	}
	for _, m := range j.Gang.Ranks {
		if !live[m.Node] {
			return true
		}
	}
	return false
}

// requeueLost puts dispatched attempt j back in the queue: its node died
// before claiming it (heartbeat expired), so no one will take the task;
// the attempt is placed again. A worker that comes back finds its claim
// stale.
func (d *repairer) requeueLost(ctx context.Context, j *jobtype.Job) {
	d.log.Warn("repair: dispatched to a node that is gone; requeueing", slog.String("job_id", j.ID),
		slog.Int("attempt", j.Attempt), slog.String("node", j.Node))
	if err := d.store.Requeue(ctx, j.ID, j.Attempt, "node lost", "node "+j.Node+" stopped heartbeating before the attempt started"); err != nil {
		d.log.Warn("repair: requeue", slog.String("job_id", j.ID), slog.Any("err", err))
	}
}

// enqueueMissing enqueues dispatched attempt j's task again when its node's
// queue does not hold it (pending, active or scheduled) and the store
// still has j dispatched at that attempt; a task archived or completed
// unclaimed is deleted first. An error asking asynq leaves it for the
// next pass.
//
// A gang's attempt has a task per rank (jobtype.RankTaskID); a rank whose
// task is missing while it is still dispatched gets it again.
func (d *repairer) enqueueMissing(ctx context.Context, j *jobtype.Job) {
	if g := j.Gang; g != nil && g.Attempt == j.Attempt {
		for r, m := range g.Ranks {
			if d.taskMissing(jobtype.NodeQueue(m.Node), jobtype.RankTaskID(j.ID, j.Attempt, r)) && d.stillDispatched(ctx, j) {
				d.log.Warn("repair: a dispatched gang rank had no task; enqueueing again", slog.String("job_id", j.ID), slog.Int("attempt", j.Attempt), slog.Int("rank", r))
				d.queue.enqueueGang(ctx, j.ID, j.Attempt, g.Ranks[r:r+1], j.Spec.MaxRuntime.D())
			}
		}
		return
	}
	if !d.taskMissing(jobtype.NodeQueue(j.Node), jobtype.TaskID(j.ID, j.Attempt)) || !d.stillDispatched(ctx, j) {
		return
	}
	d.log.Warn("repair: dispatched attempt had no task; enqueueing again", slog.String("job_id", j.ID), slog.Int("attempt", j.Attempt))
	d.queue.enqueue(ctx, j.ID, j.Attempt, j.Node, j.Spec.MaxRuntime.D())
}

// taskMissing reports whether task tid is missing from queue q (not
// pending, active or scheduled); one archived or completed unclaimed is
// deleted. An error asking asynq counts as not missing (the next pass).
func (d *repairer) taskMissing(q, tid string) bool {
	info, err := d.tasks.GetTaskInfo(q, tid)
	switch {
	case err == nil && (info.State == asynq.TaskStatePending || info.State == asynq.TaskStateActive || info.State == asynq.TaskStateScheduled):
		return false
	case err == nil:
		// Archived or completed while the job is still dispatched: the
		// handler never claimed it. Remove and enqueue again.
		_ = d.tasks.DeleteTask(q, tid)
	case !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound):
		return false
	}
	return true
}

// stillDispatched reports whether the store still has j dispatched at its attempt.
func (d *repairer) stillDispatched(ctx context.Context, j *jobtype.Job) bool {
	cur, err := d.store.Get(ctx, j.ID)
	return err == nil && cur.State == jobtype.StateDispatched && cur.Attempt == j.Attempt
}

// pruneEvery is how often the leader applies the retention of finished jobs.
const pruneEvery = time.Minute

// pruner is the leader's duty that applies the retention of finished jobs.
type pruner struct {
	store        *jobstore.Store
	log          *slog.Logger
	keepFinished int
	finishedTTL  time.Duration
	pruned       func(n int)
}

// prunerParams is what a pruner is built from.
type prunerParams struct {
	Store        *jobstore.Store
	Log          *slog.Logger
	KeepFinished int           // Config.KeepFinished (negative: no cap)
	FinishedTTL  time.Duration // Config.FinishedTTL (negative: no age limit)
	Pruned       func(n int)   // told how many finished jobs each pass deleted (the history's throughput); nil: none
}

func newPruner(p prunerParams) *pruner {
	return &pruner{store: p.Store, log: p.Log, keepFinished: p.KeepFinished, finishedTTL: p.FinishedTTL, pruned: p.Pruned}
}

// run applies the retention of finished jobs (KeepFinished,
// FinishedTTL), at most 1000 deletions a pass, so Redis stays small under
// noeviction.
func (d *pruner) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keep := d.keepFinished
	if keep < 0 {
		keep = 0 // PruneFinished: 0 = no cap
	}
	var before time.Time
	if d.finishedTTL > 0 {
		before = time.Now().Add(-d.finishedTTL)
	}
	if keep == 0 && before.IsZero() {
		return
	}
	n, err := d.store.PruneFinished(ctx, keep, before, 1000)
	if err != nil {
		d.log.Warn("retention: prune finished jobs", slog.Any("err", err))
	}
	if n > 0 && d.pruned != nil {
		d.pruned(n)
	}
	if n > 0 {
		d.log.Info("retention: deleted finished jobs", slog.Int("deleted", n), slog.Int("keep_finished", d.keepFinished))
	}
}

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
