package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// ended maps a Slurm job that ended onto the attempt's end. The step's
// status says how the trainer ended when it wrote one; Slurm's state
// decides when the step was stopped (a preemption, the time limit, a
// cancel from outside Lathe) or never wrote a status (a node failure).
//
//	COMPLETED (status succeeded)      → succeeded, artifacts published
//	FAILED (status failed, exit N)    → retried as a new attempt; exit 3 failed for good
//	TIMEOUT, DEADLINE                 → failed (timeout)
//	NODE_FAIL, BOOT_FAIL, OUT_OF_MEMORY, FAILED without status → retried as a new attempt
//	PREEMPTED, REQUEUED               → a preemption: queued as the next attempt, resuming from the checkpoint
//	CANCELLED (not asked of Lathe)    → retried as a new attempt (someone scancelled it)
func (a *slurmAttempt) ended(ctx context.Context, j slurm.Job) endFunc {
	a.addCost(ctx, j)
	switch j.State {
	case slurm.StatePreempted, slurm.StateRequeued:
		return a.preempted(ctx, j)
	case slurm.StateTimeout, slurm.StateDeadline:
		return a.ending().fail(jobtype.ReasonTimeout, fmt.Sprintf("%s %s ended %s: max_runtime %s reached", a.s.w.Job, j.ID, j.State, a.maxRuntime()))
	}
	st, found, err := a.stepStatus()
	if err != nil {
		a.log.Warn("read the step's status", slog.Any("err", err))
	}
	if found && j.State != slurm.StateCancelled {
		return a.fromStatus(ctx, st, j)
	}
	msg := fmt.Sprintf("%s %s ended %s (exit code %d, %s) without a status from its step", a.s.w.Job, j.ID, j.State, j.ExitCode, j.Reason)
	if j.State == slurm.StateCancelled {
		msg = fmt.Sprintf("%s %s was cancelled outside Lathe", a.s.w.Job, j.ID)
	}
	if out := a.lastOutput(ctx); out != "" {
		msg += "; its output ends: " + out
	}
	a.note(ctx, msg)
	return a.ending().retryOrFail(jobtype.ReasonExit, msg)
}

// preempted ends an attempt Slurm preempted or requeued: its Slurm job is
// cancelled (Slurm must not run it again on its own: Lathe's next attempt
// does, routed again), and the job goes back to queued as a preemption.
func (a *slurmAttempt) preempted(ctx context.Context, j slurm.Job) endFunc {
	if j.State == slurm.StateRequeued {
		if err := a.s.cfg.Slurm.Cancel(ctx, j.ID); err != nil {
			a.log.Warn(a.s.w.Cancel+" the requeued "+a.s.w.Job, slog.Any("err", err))
		}
	}
	msg := fmt.Sprintf("%s %s %s; resuming from the last checkpoint", a.s.w.System, j.State, a.s.w.jobNoun(j.ID))
	a.note(ctx, msg)
	return func(ctx context.Context) error { return a.s.store.CloudPreempted(ctx, a.job.ID, a.n, msg) }
}

// fromStatus ends the attempt as the step's status says.
func (a *slurmAttempt) fromStatus(ctx context.Context, st agent.Status, j slurm.Job) endFunc {
	a.note(ctx, fmt.Sprintf("step status %s (exit %d) %s", st.State, st.ExitCode, st.Error))
	metrics := a.rec.Metrics()
	for k, v := range st.Metrics {
		metrics[k] = v
	}
	switch st.State {
	case agent.StateSucceeded:
		return a.publish(metrics)
	case agent.StatePaused:
		v := judgePause(stopAtStep(a.job), trainerEnd{pausedAt: st.PausedAt})
		if v.problem != "" {
			return a.ending().fail(jobtype.ReasonPermanent, v.problem)
		}
		return a.ending().paused(v.step, metrics)
	case agent.StateTimeout:
		return a.ending().fail(jobtype.ReasonTimeout, "max_runtime reached in "+a.s.w.Job+" "+j.ID+": "+st.Error)
	case agent.StatePreempted:
		return a.preempted(ctx, slurm.Job{ID: j.ID, State: slurm.StatePreempted})
	}
	if trainer.ExitOutcome(st.ExitCode) == trainer.Permanent {
		return a.ending().fail(jobtype.ReasonPermanent, "trainer exited 3 (permanent): "+st.Error)
	}
	return a.ending().retryOrFail(jobtype.ReasonExit, fmt.Sprintf("attempt failed in %s %s (exit %d): %s", a.s.w.Job, j.ID, st.ExitCode, st.Error))
}
