// Package trainer runs one trainer attempt as a child process, following the
// trainer contract in docs/trainer.md.
//
// Run starts the trainer without a shell, in its own process group, with a
// minimal environment, and reads its stdout and stderr line by line: JSON lines
// that carry an "event" field become [TrainerEvent] values, every other line is
// a log line. Both go to a [Sink], one call at a time.
//
// Ending an attempt follows the contract: when the context is done, the whole
// process group gets SIGTERM, then SIGKILL after [Config.KillGrace]. Whatever
// happens, once the group leader has exited the rest of the group is killed,
// and Run returns only after no live process is left in the group and both
// pipes are drained. With [Config.Cgroup] the trainer runs in a cgroup v2 of
// its own too, and "no live process left" covers the whole cgroup: a process
// that escaped the group (setsid, a double fork) is killed with it. A caller may therefore record "cancelled" as soon as Run
// returns. The [Outcome] says how the attempt ended: success, a retryable
// failure, a permanent failure (exit 3), a cancel, a timeout, or a failed start.
//
// Callers that need to say why they stopped an attempt pass a cause with
// [context.WithCancelCause]: [ErrTimeout] yields [TimedOut], [ErrCancelled]
// yields [Cancelled].
//
// [GroupAlive], [KillGroup] and [KillCgroup] are exported for the worker, which
// kills trainers orphaned by its previous incarnation; [AutoCgroupRoot] and
// [PrepareCgroup] find and check where trainer cgroups go.
//
// The package works on Linux only; elsewhere Run reports [StartFailed] with an
// error wrapping [errors.ErrUnsupported].
package trainer
