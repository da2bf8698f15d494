package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

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
		if !live[j.Node] && !jobtype.IsCloudNode(j.Node) {
			// Its node died before claiming it (heartbeat expired): no one
			// will take the task; the attempt goes back to the queue and is
			// placed again. A worker that comes back finds its claim stale.
			d.log.Warn("repair: dispatched to a node that is gone; requeueing", slog.String("job_id", j.ID),
				slog.Int("attempt", j.Attempt), slog.String("node", j.Node))
			if err := d.store.Requeue(ctx, j.ID, j.Attempt, "node lost", "node "+j.Node+" stopped heartbeating before the attempt started"); err != nil {
				d.log.Warn("repair: requeue", slog.String("job_id", j.ID), slog.Any("err", err))
			}
			continue
		}
		q, tid := jobtype.NodeQueue(j.Node), jobtype.TaskID(j.ID, j.Attempt)
		info, err := d.tasks.GetTaskInfo(q, tid)
		switch {
		case err == nil && (info.State == asynq.TaskStatePending || info.State == asynq.TaskStateActive || info.State == asynq.TaskStateScheduled):
			continue
		case err == nil:
			// Archived or completed while the job is still dispatched: the
			// handler never claimed it. Remove and enqueue again.
			_ = d.tasks.DeleteTask(q, tid)
		case !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound):
			continue
		}
		if cur, err := d.store.Get(ctx, j.ID); err != nil || cur.State != jobtype.StateDispatched || cur.Attempt != j.Attempt {
			continue
		}
		d.log.Warn("repair: dispatched attempt had no task; enqueueing again", slog.String("job_id", j.ID), slog.Int("attempt", j.Attempt))
		d.queue.enqueue(ctx, j.ID, j.Attempt, j.Node, j.Spec.MaxRuntime.D())
	}
}
