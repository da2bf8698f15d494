package worker

import (
	"fmt"
	"log/slog"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// ASHA's pause (docs/sweeps.md): an attempt of a sweep trial may carry a
// step limit, its rung's steps (jobtype.TrialInfo.StopAtStep). The worker
// writes it into the attempt's job file as training.stop_at_step; the
// trainer stops there with a final eval and a checkpoint, prints a done
// line with paused_at, and exits 0 without an adapter; the attempt ends
// paused (jobstore.Pause), nothing is published and the checkpoint stays
// where the next attempt (a promotion) resumes from it.

// stopAtStep is the step limit of job's current attempt: its trial's
// StopAtStep, 0 (none) for a plain job or a trial's last rung.
func stopAtStep(job *jobtype.Job) int {
	if job.Trial == nil || job.Trial.StopAtStep < 0 {
		return 0
	}
	return job.Trial.StopAtStep
}

// attemptSpec is the spec the attempt's job file holds: the stored spec
// with training.stop_at_step set to the attempt's step limit. The stored
// spec is not changed.
func attemptSpec(job *jobtype.Job) jobspec.Spec {
	spec := job.Spec
	spec.Training.StopAtStep = stopAtStep(job)
	return spec
}

// trainerEnd is what a trainer that exited 0 said about its end: the done
// line's paused_at (0: none), the last progress line's step, and how many
// artifacts it reported.
type trainerEnd struct {
	pausedAt, lastStep, artifacts int
}

// pauseVerdict is how an attempt whose trainer exited 0 ends: paused at
// step, or (paused false) as a success; problem, when not "", is a broken
// trainer contract that fails the attempt for good.
type pauseVerdict struct {
	paused  bool
	step    int
	problem string
}

// judgePause decides whether an attempt with step limit limit (0: none)
// whose trainer exited 0 paused. A done line with paused_at pauses it at
// that step, unless the attempt has no limit or the step is short of it
// (the trainer's error: failed, permanent). A trainer that says nothing
// of a pause but reported no artifact and whose last step is the limit
// paused too. Anything else is a run that went to its end.
func judgePause(limit int, end trainerEnd) pauseVerdict {
	switch {
	case end.pausedAt != 0 && limit <= 0:
		return pauseVerdict{problem: fmt.Sprintf("the trainer's done line says paused_at %d, but this attempt has no step limit "+
			"(training.stop_at_step is set only for a sweep's ASHA rungs): a trainer error, nothing published", end.pausedAt)}
	case end.pausedAt != 0 && end.pausedAt < limit:
		return pauseVerdict{problem: fmt.Sprintf("the trainer's done line says paused_at %d, short of the attempt's step limit "+
			"training.stop_at_step %d: a trainer error, nothing published", end.pausedAt, limit)}
	case end.pausedAt != 0:
		return pauseVerdict{paused: true, step: end.pausedAt}
	case limit > 0 && end.artifacts == 0 && end.lastStep == limit:
		return pauseVerdict{paused: true, step: limit}
	}
	return pauseVerdict{}
}

// pauseEnd is the end of an attempt whose trainer exited 0, when that is
// a pause (or a trainer error about one); nil when it is a success to
// publish. The checkpoint folder is left as it is, for the next attempt.
func (a *localAttempt) pauseEnd(r trainerRun) endFunc {
	limit := stopAtStep(a.job)
	v := judgePause(limit, trainerEnd{pausedAt: r.sink.pausedAt(), lastStep: int(r.sink.steps.Load()), artifacts: len(r.sink.artifacts())})
	switch {
	case v.problem != "":
		return a.fail(jobtype.ReasonPermanent, v.problem)
	case !v.paused:
		return nil
	}
	if n := len(r.sink.artifacts()); n > 0 {
		a.log.Warn("the trainer paused but reported artifacts; not publishing them", slog.Int("artifacts", n))
	}
	if v.step != limit {
		a.log.Warn("the trainer paused past the attempt's step limit (resumed from a later checkpoint)",
			slog.Int("paused_at", v.step), slog.Int("stop_at_step", limit))
	}
	a.w.recordStepTime(a.job, r.res, r.sink, a.log)
	return a.paused(v.step, r.sink.metrics())
}
