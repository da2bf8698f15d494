package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// endFunc is the store write that records how an attempt ended (nil, or a
// no-op, when there is nothing to write).
type endFunc = func(context.Context) error

// attemptEnd builds the store writes that end one attempt: the "report"
// step of the local and the AWS worker alike, so both end a failure, a
// retry, a success or a cancel the same way.
type attemptEnd struct {
	store       *jobstore.Store
	job         *jobtype.Job
	n           int // the attempt
	maxAttempts int
	log         *slog.Logger
}

// fail ends the attempt failed, for good.
func (e attemptEnd) fail(reason, msg string) endFunc {
	e.log.Error("attempt failed", slog.String("reason", reason), slog.String("error", msg))
	return func(ctx context.Context) error {
		return e.store.Finish(ctx, e.job.ID, e.n, jobstore.Ending{State: jobtype.StateFailed, Reason: reason, Error: msg})
	}
}

// retryOrFail requeues a retryable failure as a new attempt (routed
// again), or fails the job when its attempts are used up. Attempts ended
// by a preemption are not failures: they do not count.
func (e attemptEnd) retryOrFail(reason, msg string) endFunc {
	if used := e.n - e.job.Preemptions; used >= e.maxAttempts {
		return e.fail(reason, fmt.Sprintf("%s; %d attempts used", msg, used))
	}
	e.log.Warn("attempt failed; retrying as a new attempt", slog.String("error", msg))
	return e.requeue(reason, msg)
}

// requeue puts the job back to queued for a new attempt, whatever the
// attempts used (a fence, a shutdown, GPUs that could not be pinned).
func (e attemptEnd) requeue(reason, msg string) endFunc {
	return func(ctx context.Context) error { return e.store.Requeue(ctx, e.job.ID, e.n, reason, msg) }
}

// succeeded ends the attempt succeeded with its metrics and artifacts.
func (e attemptEnd) succeeded(metrics map[string]float64, arts []jobtype.Artifact) endFunc {
	return func(ctx context.Context) error {
		return e.store.Finish(ctx, e.job.ID, e.n, jobstore.Ending{State: jobtype.StateSucceeded, Metrics: metrics, Artifacts: arts})
	}
}

// paused ends the attempt paused at step with its metrics (a sweep
// trial's attempt reached its ASHA rung's step limit and checkpointed):
// nothing is published. With a cancel asked the store ends it cancelled,
// with a stop asked stopped (jobstore.Pause).
func (e attemptEnd) paused(step int, metrics map[string]float64) endFunc {
	e.log.Info("attempt paused at its step limit; checkpoint kept for the next rung", slog.Int("step", step))
	return func(ctx context.Context) error { return e.store.Pause(ctx, e.job.ID, e.n, step, metrics) }
}

// cancelled ends the attempt cancelled.
func (e attemptEnd) cancelled() endFunc {
	return func(ctx context.Context) error {
		return e.store.Finish(ctx, e.job.ID, e.n, jobstore.Ending{State: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled})
	}
}

// verdict ends the attempt as trainer.Judge says: a retryable failure is
// retried while attempts are left, anything else fails it.
func (e attemptEnd) verdict(v trainer.Verdict) endFunc {
	if v.Outcome == trainer.Failed {
		return e.retryOrFail(v.Reason, v.Message)
	}
	return e.fail(v.Reason, v.Message)
}
